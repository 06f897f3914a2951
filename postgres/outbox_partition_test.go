package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// outboxPartitions returns the names of the outbox's partitions, sorted.
func outboxPartitions(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, _ := conn.Query(context.Background(), `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'outbox'::regclass ORDER BY 1`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// dayPartition is the name of the partition of t's day.
func dayPartition(t time.Time) string { return "outbox_d" + t.UTC().Format("20060102") }

// eventHome returns the partition that holds the event of id, or "" when
// there is none.
func eventHome(t *testing.T, conn *pgx.Conn, id string) string {
	t.Helper()
	var home string
	err := conn.QueryRow(context.Background(), "SELECT tableoid::regclass::text FROM outbox WHERE id = $1", id).Scan(&home)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return home
}

// prunePass runs OutboxPrune from the start to the end of a pass and
// returns how many events it deleted.
func prunePass(t *testing.T, s lapse.Store, before, now time.Time) int {
	t.Helper()
	deleted, from := 0, int64(0)
	for range 10_000 {
		got, err := s.OutboxPrune(context.Background(), &lapse.OutboxPruneParams{Before: before, Now: now, From: from, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got.Next != 0 && got.Next <= from {
			t.Fatalf("OutboxPrune(from %d) goes on from %d", from, got.Next)
		}
		deleted += got.Deleted
		if from = got.Next; from == 0 {
			return deleted
		}
	}
	t.Fatal("a pass did not end")
	return 0
}

// TestOutboxPartitions checks the layout a new schema gets: the events
// before it, a partition for each day from today to three days ahead, and
// the default; that an event goes to its day's partition and one of
// another UUID version to the default; and that an id that exists is
// lapse.ErrEventExists in every partition.
func TestOutboxPartitions(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	conn := connect(t, dsn)
	ctx := context.Background()
	now := time.Now().UTC()
	want := []string{"outbox_before", "outbox_default"}
	for d := range 4 {
		want = append(want, dayPartition(now.Add(time.Duration(d)*24*time.Hour)))
	}
	slices.Sort(want)
	if got := outboxPartitions(t, conn); !slices.Equal(got, want) {
		// A test that runs across midnight may see one day more.
		if len(got) != len(want)+1 {
			t.Fatalf("partitions = %v, want %v", got, want)
		}
	}
	for i, c := range []struct {
		at   time.Time
		id   string
		home string
	}{
		{now, "", dayPartition(now)},
		{now.Add(50 * time.Hour), "", dayPartition(now.Add(50 * time.Hour))},
		{now.Add(-time.Hour), "", "outbox_before"},
		{now.Add(30 * 24 * time.Hour), "", "outbox_default"},
		{now, "0f8fad5b-d9cb-469f-a165-70867728950e", "outbox_default"},
	} {
		p := createParams(fmt.Sprintf("OP-%02d", i), nil, c.at)
		if c.id != "" {
			p.Outbox[0].ID = c.id
		}
		if _, _, err := s.OrderCreate(ctx, p); err != nil {
			t.Fatal(err)
		}
		if got := eventHome(t, conn, p.Outbox[0].ID); got != c.home {
			t.Errorf("the event of %s is in %s, want %s", c.at, got, c.home)
		}
		again := createParams(fmt.Sprintf("OP-%02d-again", i), nil, c.at)
		again.Outbox[0].ID = p.Outbox[0].ID
		if _, _, err := s.OrderCreate(ctx, again); !errors.Is(err, lapse.ErrEventExists) {
			t.Errorf("an event id that exists in %s: %v, want ErrEventExists", c.home, err)
		}
	}
}

// TestOutboxPartitionDrop checks that a pass drops a day whose ids all lie
// before the cut-off once it has read it: the events that may go went with
// their deliveries and attempts, and those that stay (a delivery pending,
// an event created after the cut-off) moved to the default whole, where a
// claim still finds them and their ids still exist. It checks too that the
// pass makes the partitions ahead of its Now.
func TestOutboxPartitionDrop(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	conn := connect(t, dsn)
	ctx := context.Background()
	day := time.Now().UTC().Add(24 * time.Hour) // tomorrow, whose partition exists
	before := day.Truncate(24 * time.Hour).Add(25 * time.Hour)
	now := before.Add(7 * 24 * time.Hour)

	create := func(no string, createdAt time.Time, subs ...string) *lapse.OrderCreateParams {
		t.Helper()
		p := createParams(no, nil, day)
		p.Outbox[0].CreatedAt = createdAt
		p.Outbox[0].Subscribers = subs
		if _, _, err := s.OrderCreate(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var done []*lapse.OrderCreateParams
	for i := range 50 {
		done = append(done, create(fmt.Sprintf("PD-done-%02d", i), day, "a"))
	}
	quiet := create("PD-quiet", day)
	pending := create("PD-pending", day, "slow")
	young := create("PD-young", before.Add(time.Hour)) // its id in the day, created after the cut-off
	for _, p := range []*lapse.OrderCreateParams{done[0], quiet, pending, young} {
		if got := eventHome(t, conn, p.Outbox[0].ID); got != dayPartition(day) {
			t.Fatalf("the event of %s is in %s, want %s", p.Order.OrderNo, got, dayPartition(day))
		}
	}
	at := day.Add(time.Minute)
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: at, Owner: "w", LeaseUntil: at.Add(time.Minute), Subscribers: []string{"a"}, Limit: 100})
	if err != nil || len(ds) != len(done) {
		t.Fatalf("claimed %d, %v", len(ds), err)
	}
	for _, d := range ds {
		if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: d.Attempts, Status: lapse.DeliveryDone, At: at,
			Record: lapse.DeliveryAttempt{DeliveryID: d.ID, Attempt: d.Attempts, Worker: "w", StartedAt: at, Outcome: lapse.OutcomeOK}}); err != nil {
			t.Fatal(err)
		}
	}
	type row struct {
		Seq                        int64
		ID, OrderNo, Type, Payload string
		CreatedAt                  time.Time
	}
	rowOf := func(id string) row {
		t.Helper()
		var r row
		if err := conn.QueryRow(ctx, "SELECT seq, id::text, order_no, type, payload::text, created_at FROM outbox WHERE id = $1", id).
			Scan(&r.Seq, &r.ID, &r.OrderNo, &r.Type, &r.Payload, &r.CreatedAt); err != nil {
			t.Fatal(err)
		}
		return r
	}
	stay := map[string]row{}
	for _, p := range []*lapse.OrderCreateParams{pending, young} {
		stay[p.Outbox[0].ID] = rowOf(p.Outbox[0].ID)
	}

	if n := prunePass(t, s, before, now); n != len(done)+1 {
		t.Errorf("the pass deleted %d events, want %d (the delivered ones and the quiet one)", n, len(done)+1)
	}
	parts := outboxPartitions(t, conn)
	if slices.Contains(parts, dayPartition(day)) {
		t.Errorf("%s is still there after the pass: %v", dayPartition(day), parts)
	}
	for d := now; d.Before(now.Add(4 * 24 * time.Hour)); d = d.Add(24 * time.Hour) {
		if !slices.Contains(parts, dayPartition(d)) {
			t.Errorf("no partition of %s, three days after the pass's now or sooner: %v", d.Format(time.DateOnly), parts)
		}
	}
	for id, was := range stay {
		if got := eventHome(t, conn, id); got != "outbox_default" {
			t.Errorf("the event %s that stays is in %q, want outbox_default", id, got)
		}
		if got := rowOf(id); got != was {
			t.Errorf("the event that stays changed in its move: %+v, was %+v", got, was)
		}
	}
	for _, p := range append(done, quiet) {
		if evs, err := s.OutboxList(ctx, mustOrder(t, s, p.Order.OrderNo).ID); err != nil || len(evs) != 0 {
			t.Fatalf("events of %s after the pass: %d, %v", p.Order.OrderNo, len(evs), err)
		}
		if ds, err := s.DeliveryList(ctx, mustOrder(t, s, p.Order.OrderNo).ID); err != nil || len(ds) != 0 {
			t.Fatalf("deliveries of %s after the pass: %d, %v", p.Order.OrderNo, len(ds), err)
		}
	}
	var attempts int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM delivery_attempts").Scan(&attempts); err != nil || attempts != 0 {
		t.Errorf("attempt rows after the pass: %d, %v", attempts, err)
	}
	ds, err = s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: now.Add(time.Minute), Subscribers: []string{"slow"}, Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].Event == nil || ds[0].Event.ID != pending.Outbox[0].ID || string(ds[0].Event.Payload) != stay[pending.Outbox[0].ID].Payload {
		t.Fatalf("the pending delivery after its event moved: %+v, %v", ds, err)
	}
	again := createParams("PD-again", nil, day)
	again.Outbox[0].ID = pending.Outbox[0].ID
	if _, _, err := s.OrderCreate(ctx, again); !errors.Is(err, lapse.ErrEventExists) {
		t.Errorf("the id of an event that moved: %v, want ErrEventExists", err)
	}
}

// TestOutboxPartitionDropWaitsForNoOne checks that a drop whose lock
// another transaction holds (here a reader of the outbox) is put off, not
// waited for: the pass ends at once without an error, and the next pass
// drops the day.
func TestOutboxPartitionDropWaitsForNoOne(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	conn := connect(t, dsn)
	ctx := context.Background()
	day := time.Now().UTC().Add(24 * time.Hour)
	before := day.Truncate(24 * time.Hour).Add(25 * time.Hour)
	now := before.Add(7 * 24 * time.Hour)
	if _, _, err := s.OrderCreate(ctx, createParams("PW-1", nil, day)); err != nil {
		t.Fatal(err)
	}
	// The pass makes the days ahead first, which the reader's lock would
	// put off too: made beforehand, they are not in the way.
	if got, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: day.Add(-time.Hour), Now: now, Limit: 1}); err != nil || got.Deleted != 0 {
		t.Fatalf("a step that makes the days: %+v, %v", got, err)
	}

	reader, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM outbox"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if n := prunePass(t, s, before, now); n != 1 {
		t.Errorf("the pass beside a reader deleted %d events, want 1", n)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the pass beside a reader took %s: it waited for the lock", took)
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(outboxPartitions(t, conn), dayPartition(day)) {
		t.Fatalf("%s was dropped while a reader held the outbox", dayPartition(day))
	}
	if n := prunePass(t, s, before, now); n != 0 {
		t.Errorf("the second pass deleted %d events, want 0", n)
	}
	if slices.Contains(outboxPartitions(t, conn), dayPartition(day)) {
		t.Errorf("%s is still there after the second pass", dayPartition(day))
	}
}

func mustOrder(t *testing.T, s lapse.Store, orderNo string) *lapse.Order {
	t.Helper()
	o, err := s.OrderGet(context.Background(), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
