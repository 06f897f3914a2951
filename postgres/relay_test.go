package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// relayed makes a new order whose creation event is relayed to sub.
func relayed(orderNo, sub string, now time.Time) *lapse.OrderCreateParams {
	p := createParams(orderNo, nil, now)
	p.Outbox[0].Relays = []string{sub}
	return p
}

// relayPass runs one relay transaction of sub: it reads up to limit events
// and moves the cursor past them. It returns the order numbers read, and
// whether the cursor was there to be had.
func relayPass(t *testing.T, s *postgres.Store, sub string, limit int, now time.Time) (got []string, blocked []bool, locked bool) {
	t.Helper()
	ds, blocked, locked := relayEvents(t, s, sub, limit, now)
	for _, d := range ds {
		got = append(got, d.OrderNo)
	}
	return got, blocked, locked
}

// relayEvents is relayPass returning the events read.
func relayEvents(t *testing.T, s *postgres.Store, sub string, limit int, now time.Time) (got []*lapse.Delivery, blocked []bool, locked bool) {
	t.Helper()
	err := s.Tx(context.Background(), func(tx lapse.Store) error {
		r := tx.(lapse.Relayer)
		c, err := r.RelayLock(context.Background(), sub, now)
		if err != nil || c == nil {
			return err
		}
		locked = true
		b, err := r.RelayRead(context.Background(), &lapse.RelayReadParams{Subscriber: sub, Cursor: c, Limit: limit})
		if err != nil {
			return err
		}
		for i, d := range b.Events {
			if d.Subscriber != sub || d.Event == nil || d.Event.OrderNo != d.OrderNo || len(d.Event.Payload) == 0 {
				return fmt.Errorf("event %d read as %+v", i, d)
			}
		}
		got = b.Events
		blocked = b.Blocked
		b.Next.UpdatedAt = now
		return r.RelayAdvance(context.Background(), b.Next, int64(len(b.Events)))
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, blocked, locked
}

// claimNats claims up to 10 due deliveries to nats and returns them with
// their order numbers, sorted.
func claimNats(t *testing.T, s *postgres.Store, now, lease time.Time) ([]*lapse.Delivery, []string) {
	t.Helper()
	claimed, err := s.DeliveryClaim(context.Background(), &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: lease,
		Subscribers: []string{"nats"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var nos []string
	for _, d := range claimed {
		nos = append(nos, d.OrderNo)
	}
	slices.Sort(nos)
	return claimed, nos
}

// TestRelayCommitOrder checks that a relay reads every event it is owed
// once, in the order the transactions committed, whatever order they
// began in: a transaction that began first and commits after the relay has
// read a later one's event is read in a later pass, not skipped. Events
// relayed to another subscriber, and events with deliveries instead, are
// not read; events of new orders written by COPY (OrderCreateMany) and by
// a statement (OrderCreate) both are.
func TestRelayCommitOrder(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)

	if got, _, _ := relayPass(t, s, "nats", 10, now); len(got) != 0 {
		t.Fatalf("an empty outbox relayed %v", got)
	}

	// A transaction that writes its event first and commits last.
	written, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.Tx(ctx, func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctx, relayed("RL-EARLY", "nats", now)); err != nil {
				return err
			}
			close(written)
			<-release
			return nil
		})
	}()
	<-written
	if _, _, err := s.OrderCreate(ctx, relayed("RL-A", "nats", now)); err != nil {
		t.Fatal(err)
	}
	other := createParams("RL-OTHER", nil, now)
	other.Outbox[0].Relays = []string{"webhook"}
	rows := createParams("RL-ROWS", nil, now)
	rows.Outbox[0].Subscribers = []string{"nats"}
	if err := s.OrderCreateMany(ctx, []*lapse.OrderCreateParams{other, rows, relayed("RL-B", "nats", now), relayed("RL-C", "nats", now)}); err != nil {
		t.Fatal(err)
	}

	// Pending: RL-ROWS's delivery, and the three committed events the
	// nats relay has to read (the webhook's relay has no cursor yet).
	if c, err := s.DeliveryCount(ctx); err != nil || c.Pending != 4 {
		t.Fatalf("DeliveryCount = %+v, %v; want 4 pending", c, err)
	}
	got, blocked, _ := relayPass(t, s, "nats", 2, now)
	if !slices.Equal(got, []string{"RL-A", "RL-B"}) || slices.Contains(blocked, true) {
		t.Fatalf("first pass read %v (blocked %v), want RL-A, RL-B", got, blocked)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OrderCreate(ctx, relayed("RL-D", "nats", now)); err != nil {
		t.Fatal(err)
	}
	var all []string
	for range 5 {
		got, _, _ := relayPass(t, s, "nats", 2, now)
		all = append(all, got...)
	}
	if !slices.Equal(all, []string{"RL-C", "RL-EARLY", "RL-D"}) {
		t.Fatalf("later passes read %v, want RL-C, RL-EARLY (committed after RL-C was read), RL-D", all)
	}
	if got, _, _ := relayPass(t, s, "webhook", 10, now); !slices.Equal(got, []string{"RL-OTHER"}) {
		t.Fatalf("the webhook's relay read %v, want RL-OTHER", got)
	}
	if c, err := s.DeliveryCount(ctx); err != nil || c.Pending != 1 {
		t.Fatalf("DeliveryCount once the relays passed everything = %+v, %v; want RL-ROWS's delivery alone pending", c, err)
	}
	if bs, err := s.DeliveryCountBySubscriber(ctx); err != nil || len(bs) != 1 || bs[0].Subscriber != "nats" || bs[0].N != 1 {
		t.Fatalf("DeliveryCountBySubscriber = %+v, %v; want nats 1 pending", bs, err)
	}
	cs, err := s.RelayList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Subscriber != "nats" || cs[0].Relayed != 5 || cs[1].Relayed != 1 {
		t.Fatalf("cursors %+v, want nats with 5 relayed and webhook with 1", cs)
	}
	ds, err := s.DeliveryList(ctx, mustOrder(t, s, "RL-ROWS").ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("RL-ROWS has deliveries %v (%v), want its one", ds, err)
	}
	for _, no := range []string{"RL-A", "RL-EARLY"} {
		if ds, err := s.DeliveryList(ctx, mustOrder(t, s, no).ID); err != nil || len(ds) != 0 {
			t.Fatalf("relayed order %s has deliveries %v (%v), want none", no, ds, err)
		}
	}
}

// TestRelayLockAndDefer checks that one relay at a time holds a
// subscriber's cursor, that an event whose order has a pending delivery to
// the subscriber reads as blocked, and that RelayDefer writes deliveries
// chained behind it (and behind each other), those attempted leased to
// their owner with one attempt, the others due at once.
func TestRelayLockAndDefer(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)

	// One relay holds the cursor; another finds it taken.
	relayPass(t, s, "nats", 10, now) // makes it
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.Tx(ctx, func(tx lapse.Store) error {
			c, err := tx.(lapse.Relayer).RelayLock(ctx, "nats", now)
			if err == nil && c == nil {
				err = fmt.Errorf("the first relay found the cursor taken")
			}
			close(held)
			<-release
			return err
		})
	}()
	<-held
	if _, _, locked := relayPass(t, s, "nats", 10, now); locked {
		t.Fatal("a second relay locked the cursor the first holds")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// RL-P has a pending delivery to nats; its next event is blocked.
	p := createParams("RL-P", nil, now)
	p.Outbox[0].Subscribers = []string{"nats"}
	if _, _, err := s.OrderCreate(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, no := range []string{"RL-Q", "RL-R"} {
		if _, _, err := s.OrderCreate(ctx, relayed(no, "nats", now)); err != nil {
			t.Fatal(err)
		}
	}
	o := mustOrder(t, s, "RL-P")
	ev := lapse.NewOutboxEvent(lapse.EventOrderDeadlineChanged, o, nil)
	ev.Relays = []string{"nats"}
	dl := now.Add(time.Hour)
	if _, err := s.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
		DeadlineAt: dl, At: now, Outbox: []lapse.OutboxEvent{ev}}); err != nil {
		t.Fatal(err)
	}

	lease := now.Add(10 * time.Second)
	var deferred []*lapse.Delivery
	err := s.Tx(ctx, func(tx lapse.Store) error {
		r := tx.(lapse.Relayer)
		c, err := r.RelayLock(ctx, "nats", now)
		if err != nil {
			return err
		}
		b, err := r.RelayRead(ctx, &lapse.RelayReadParams{Subscriber: "nats", Cursor: c, Limit: 10})
		if err != nil {
			return err
		}
		var nos []string
		for _, d := range b.Events {
			nos = append(nos, d.OrderNo)
		}
		if !slices.Equal(nos, []string{"RL-Q", "RL-R", "RL-P"}) || !slices.Equal(b.Blocked, []bool{false, false, true}) {
			return fmt.Errorf("read %v blocked %v, want RL-Q, RL-R, RL-P with RL-P blocked", nos, b.Blocked)
		}
		// RL-Q failed; RL-P waits behind its pending delivery.
		deferred, err = r.RelayDefer(ctx, &lapse.RelayDeferParams{Subscriber: "nats", Events: []*lapse.Delivery{b.Events[0], b.Events[2]},
			Attempted: []bool{true, false}, Owner: "w1", At: now, LeaseUntil: lease})
		if err != nil {
			return err
		}
		b.Next.UpdatedAt = now
		return r.RelayAdvance(ctx, b.Next, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(deferred) != 2 {
		t.Fatalf("deferred %v", deferred)
	}
	q, pd := deferred[0], deferred[1]
	if q.OrderNo != "RL-Q" || q.Attempts != 1 || q.LeaseOwner != "w1" || q.LeaseUntil == nil || !q.LeaseUntil.Equal(lease) ||
		q.Status != lapse.DeliveryPending || q.Event == nil || q.Event.OrderNo != "RL-Q" {
		t.Fatalf("the failed event's delivery is %+v, want RL-Q leased to w1 with 1 attempt", q)
	}
	if pd.OrderNo != "RL-P" || pd.Attempts != 0 || pd.LeaseOwner != "" || pd.EventType != lapse.EventOrderDeadlineChanged {
		t.Fatalf("the blocked event's delivery is %+v, want RL-P's unleased", pd)
	}

	// The lease is the owner's: the failed attempt is recorded through
	// DeliveryFinish, and RL-P's second delivery waits behind its first.
	if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: q.ID, Owner: "w1", Attempt: 1, At: now,
		Status: lapse.DeliveryPending, NextAttemptAt: now, Error: "boom",
		Record: lapse.DeliveryAttempt{DeliveryID: q.ID, Attempt: 1, Worker: "w1", StartedAt: now, Outcome: lapse.OutcomeError, Error: "boom"}}); err != nil {
		t.Fatal(err)
	}
	claimed, nos := claimNats(t, s, now, lease)
	if !slices.Equal(nos, []string{"RL-P", "RL-Q"}) {
		t.Fatalf("claimed %v, want RL-P's first delivery and RL-Q's (RL-P's second waits behind its first)", nos)
	}
	for _, d := range claimed {
		if d.OrderNo == "RL-P" && d.EventType != lapse.EventOrderCreated {
			t.Fatalf("claimed RL-P's %s before its order.created", d.EventType)
		}
	}
}

// TestRelayPrune checks that the pruner keeps an event until every relay
// that is owed it has passed it, and then deletes its relay rows with it.
func TestRelayPrune(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	p := relayed("RL-PRUNE", "nats", now)
	p.Outbox[0].Relays = []string{"nats", "webhook"}
	if _, _, err := s.OrderCreate(ctx, p); err != nil {
		t.Fatal(err)
	}
	prune := func() int {
		t.Helper()
		n := 0
		for from := int64(0); ; {
			got, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: now.Add(time.Hour), Now: now.Add(time.Hour), From: from, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			n += got.Deleted
			if from = got.Next; from == 0 {
				return n
			}
		}
	}
	if n := prune(); n != 0 {
		t.Fatalf("pruned %d events that no relay has read", n)
	}
	relayPass(t, s, "nats", 10, now)
	if n := prune(); n != 0 {
		t.Fatalf("pruned %d events that the webhook's relay has not read", n)
	}
	relayPass(t, s, "webhook", 10, now)
	if n := prune(); n != 1 {
		t.Fatalf("pruned %d events once both relays passed it, want 1", n)
	}
	conn := connect(t, dsn)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_relay`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d relay rows left (%v), want none", left, err)
	}
}

// TestUpgradeRelay starts from the schema before 0027 with events that
// have deliveries pending, migrates, and checks that those deliveries are
// still claimed as they were, that a relay reads none of the old events
// (they have their deliveries) and reads the events written after.
func TestUpgradeRelay(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 26)
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	conn := connect(t, dsn)
	dropStandIn := relayStandIn(t, conn)
	var old []*lapse.OrderCreateParams
	for i := range 3 {
		p := createParams(fmt.Sprintf("UR-OLD-%d", i), nil, now)
		p.Outbox[0].Subscribers = []string{"nats"}
		old = append(old, p)
	}
	if err := s.OrderCreateMany(ctx, old); err != nil {
		t.Fatal(err)
	}
	dropStandIn()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OrderCreate(ctx, relayed("UR-NEW", "nats", now)); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := relayPass(t, s, "nats", 10, now); !slices.Equal(got, []string{"UR-NEW"}) {
		t.Fatalf("the relay read %v after the upgrade, want UR-NEW alone", got)
	}
	if _, nos := claimNats(t, s, now, now.Add(time.Minute)); !slices.Equal(nos, []string{"UR-OLD-0", "UR-OLD-1", "UR-OLD-2"}) {
		t.Fatalf("claimed %v after the upgrade, want the three old deliveries", nos)
	}
}

// TestRelayOrderAcrossInvertedIDs checks that an order's events come out of
// the relay in the order they were written even when the transaction that
// wrote the later one had its id first (it wrote something else before it
// waited for the order) and both lie in one range: the relay, reading one
// event a batch, reads the earlier one ahead with the later one, and never
// again after.
func TestRelayOrderAcrossInvertedIDs(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("INV-1", nil, now)); err != nil {
		t.Fatal(err)
	}
	move := func(st lapse.Store, h time.Duration) string {
		t.Helper()
		o := mustOrder(t, st, "INV-1")
		ev := lapse.NewOutboxEvent(lapse.EventOrderDeadlineChanged, o, nil)
		ev.Relays = []string{"nats"}
		if _, err := st.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
			DeadlineAt: now.Add(h), At: now, Outbox: []lapse.OutboxEvent{ev}}); err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	relayPass(t, s, "nats", 10, now) // the cursor, before both

	// The later writer takes its id first, then waits for the first.
	var second string
	early, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.Tx(ctx, func(tx lapse.Store) error {
			if _, err := tx.StockSet(ctx, &lapse.StockSetParams{SKU: "inv", OnHand: 1, At: now}); err != nil {
				return err
			}
			close(early)
			<-release
			second = move(tx, 2*time.Hour)
			return nil
		})
	}()
	<-early
	first := move(s, time.Hour)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var got []string
	for range 3 {
		ds, _, _ := relayEvents(t, s, "nats", 1, now)
		for _, d := range ds {
			got = append(got, d.EventID)
		}
	}
	if !slices.Equal(got, []string{first, second}) {
		t.Fatalf("the relay read %v, want %s then %s, each once", got, first, second)
	}
	if c, err := s.DeliveryCount(ctx); err != nil || c.Pending != 0 {
		t.Fatalf("DeliveryCount = %+v, %v; want nothing pending", c, err)
	}
	rs, err := s.RelayedEvents(ctx, mustOrder(t, s, "INV-1").ID)
	if err != nil || len(rs) != 2 || !rs[0].Passed || !rs[1].Passed {
		t.Fatalf("RelayedEvents = %+v, %v; want both passed", rs, err)
	}
}
