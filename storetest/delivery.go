package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// createWithSubs creates an order whose order.created event fans out to subs.
func createWithSubs(t *testing.T, s lapse.Store, orderNo string, now time.Time, subs ...string) *lapse.Order {
	t.Helper()
	p := newOrder(orderNo, now.Add(time.Hour), now)
	p.Outbox[0].Subscribers = subs
	o, created, err := s.OrderCreate(ctxT(t), p)
	if err != nil || !created {
		t.Fatalf("OrderCreate(%s) = %v, %v", orderNo, created, err)
	}
	return o
}

func claim(t *testing.T, s lapse.Store, now time.Time, owner string, limit int, subs ...string) []*lapse.Delivery {
	t.Helper()
	ds, err := s.DeliveryClaim(ctxT(t), &lapse.DeliveryClaimParams{Now: now, Owner: owner, LeaseUntil: now.Add(30 * time.Second), Subscribers: subs, Limit: limit})
	if err != nil {
		t.Fatalf("DeliveryClaim: %v", err)
	}
	return ds
}

func testDeliveryFanOut(t *testing.T, s lapse.Store) {
	o := createWithSubs(t, s, "DF-1", base, "stock", "webhook")
	ds, err := s.DeliveryList(ctxT(t), o.ID)
	if err != nil || len(ds) != 2 {
		t.Fatalf("DeliveryList = %d, %v; want 2", len(ds), err)
	}
	evs, _ := s.OutboxList(ctxT(t), o.ID)
	subs := []string{ds[0].Subscriber, ds[1].Subscriber}
	slices.Sort(subs)
	if !slices.Equal(subs, []string{"stock", "webhook"}) {
		t.Errorf("subscribers %v", subs)
	}
	for _, d := range ds {
		if d.Status != lapse.DeliveryPending || d.Attempts != 0 || d.EventID != evs[0].ID || d.EventType != lapse.EventOrderCreated ||
			d.OrderNo != "DF-1" || !d.NextAttemptAt.Equal(base) || !d.CreatedAt.Equal(base) || d.LeaseUntil != nil || d.DoneAt != nil || d.ID == 0 {
			t.Errorf("new delivery = %+v", d)
		}
	}

	// A transition's events fan out too; a stale one writes no deliveries.
	p := plan(t, o, flows.Cancel, base.Add(time.Second))
	p.Outbox[0].Subscribers = []string{"stock"}
	stale := plan(t, o, flows.Pay, base.Add(time.Second))
	stale.Outbox[0].Subscribers = []string{"stock"}
	if _, err := s.OrderTransition(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.OrderTransitionMany(ctxT(t), []*lapse.OrderTransitionParams{stale}); err != nil || len(ids) != 0 {
		t.Fatalf("stale many = %v, %v", ids, err)
	}
	ds, _ = s.DeliveryList(ctxT(t), o.ID)
	if len(ds) != 3 || ds[2].EventType != flows.EventOrderClosed || ds[2].Subscriber != "stock" || !ds[2].NextAttemptAt.Equal(base.Add(time.Second)) {
		t.Errorf("after CANCEL: %d deliveries, last %+v", len(ds), ds[len(ds)-1])
	}

	// A transition's event without subscribers before one with (a flow's
	// close emitting an event no one takes, then its release): the second
	// fans out all the same.
	on := createWithSubs(t, s, "DF-N", base)
	pn := plan(t, on, flows.Cancel, base.Add(time.Second))
	released := lapse.NewOutboxEvent("order.released", on, pn)
	released.Subscribers = []string{"stock"}
	pn.Outbox = append(pn.Outbox, released)
	if _, err := s.OrderTransition(ctxT(t), pn); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.DeliveryList(ctxT(t), on.ID); err != nil || len(ds) != 1 || ds[0].EventType != "order.released" || ds[0].Subscriber != "stock" {
		t.Errorf("deliveries of an event with subscribers after one without = %+v, %v; want its one to stock", ds, err)
	}

	// Bulk creates, batch transitions and deadline changes fan out as well.
	var bulk []*lapse.OrderCreateParams
	for i := range 3 {
		bp := newOrder(orderNo("DFB", i), base.Add(time.Minute), base)
		bp.Outbox[0].Subscribers = []string{"nats"}
		bulk = append(bulk, bp)
	}
	if err := s.OrderCreateMany(ctxT(t), bulk); err != nil {
		t.Fatal(err)
	}
	var many []*lapse.OrderTransitionParams
	for i := range 3 {
		bo := mustGet(t, s, orderNo("DFB", i))
		mp := plan(t, bo, flows.Timeout, base.Add(time.Minute))
		mp.Outbox[0].Subscribers = []string{"nats", "stock"}
		many = append(many, mp)
	}
	if _, err := s.OrderTransitionMany(ctxT(t), many); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		bo := mustGet(t, s, orderNo("DFB", i))
		if ds, _ := s.DeliveryList(ctxT(t), bo.ID); len(ds) != 3 {
			t.Errorf("%s has %d deliveries, want 3", bo.OrderNo, len(ds))
		}
	}
	o2 := mustCreate(t, s, "DF-2", base.Add(time.Minute), base)
	after := *o2
	after.Version = 2
	ev := lapse.NewOutboxEvent(lapse.EventOrderDeadlineChanged, &after, nil)
	ev.Subscribers = []string{"webhook"}
	if _, err := s.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: o2.ID, FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: base.Add(time.Hour), At: base, Outbox: []lapse.OutboxEvent{ev}}); err != nil {
		t.Fatal(err)
	}
	if ds, _ := s.DeliveryList(ctxT(t), o2.ID); len(ds) != 1 || ds[0].EventType != lapse.EventOrderDeadlineChanged {
		t.Errorf("deadline change deliveries: %+v", ds)
	}
}

func testDeliveryClaim(t *testing.T, s lapse.Store) {
	for i := range 5 {
		createWithSubs(t, s, orderNo("DC", i), base.Add(time.Duration(i)*time.Second), "webhook", "nats")
	}
	// Not yet due at base - 1s; due up to +2s: DC-0..DC-2, webhook only, earliest first.
	if ds := claim(t, s, base.Add(-time.Second), "w1", 10, "webhook"); len(ds) != 0 {
		t.Errorf("claimed %d deliveries before they were due", len(ds))
	}
	now := base.Add(2 * time.Second)
	ds := claim(t, s, now, "w1", 2, "webhook")
	if len(ds) != 2 || ds[0].OrderNo != orderNo("DC", 0) || ds[1].OrderNo != orderNo("DC", 1) {
		t.Fatalf("claimed %v", ds)
	}
	d := ds[0]
	if d.Attempts != 1 || d.LeaseOwner != "w1" || d.LeaseUntil == nil || !d.LeaseUntil.Equal(now.Add(30*time.Second)) ||
		!d.NextAttemptAt.Equal(now.Add(30*time.Second)) || d.Subscriber != "webhook" || d.Status != lapse.DeliveryPending {
		t.Errorf("claimed delivery = %+v", d)
	}
	if d.Event == nil || d.Event.ID != d.EventID || d.Event.Type != lapse.EventOrderCreated || len(d.Event.Payload) == 0 || d.Event.OrderNo != d.OrderNo {
		t.Errorf("claimed delivery's event = %+v", d.Event)
	}
	rest := claim(t, s, now, "w2", 10, "webhook")
	if len(rest) != 1 || rest[0].OrderNo != orderNo("DC", 2) {
		t.Errorf("second claimer got %d deliveries, want DC-2 only", len(rest))
	}
	if nats := claim(t, s, now, "w2", 10, "nats", "other"); len(nats) != 3 {
		t.Errorf("nats claim got %d, want 3", len(nats))
	}
	// The lease expires: the delivery is due again and keeps its count.
	later := now.Add(31 * time.Second)
	again := claim(t, s, later, "w3", 10, "webhook")
	var retaken *lapse.Delivery
	for _, a := range again {
		if a.ID == d.ID {
			retaken = a
		}
	}
	if retaken == nil || retaken.Attempts != 2 || retaken.LeaseOwner != "w3" {
		t.Fatalf("after the lease expired: %+v", retaken)
	}
	// The first worker's lease is lost: its finish writes nothing.
	_, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w1", Attempt: 1, Status: lapse.DeliveryDone, At: later,
		Record: lapse.DeliveryAttempt{DeliveryID: d.ID, Attempt: 1, Worker: "w1", StartedAt: now, Outcome: lapse.OutcomeOK}})
	if !errors.Is(err, lapse.ErrLeaseLost) {
		t.Errorf("finish with a lost lease = %v, want ErrLeaseLost", err)
	}
	if got, _ := s.DeliveryGet(ctxT(t), d.ID); got.Status != lapse.DeliveryPending || got.Attempts != 2 {
		t.Errorf("after a lost-lease finish: %+v", got)
	}
	if _, err := s.DeliveryGet(ctxT(t), 1<<40); !errors.Is(err, lapse.ErrDeliveryNotFound) {
		t.Errorf("DeliveryGet(missing) = %v", err)
	}
}

func testDeliveryFinish(t *testing.T, s lapse.Store) {
	o := createWithSubs(t, s, "FN-1", base, "a", "b", "c")
	now := base.Add(time.Second)
	ds := claim(t, s, now, "w", 10, "a", "b", "c")
	if len(ds) != 3 {
		t.Fatalf("claimed %d", len(ds))
	}
	bySub := map[string]*lapse.Delivery{}
	for _, d := range ds {
		bySub[d.Subscriber] = d
	}
	finish := func(d *lapse.Delivery, p lapse.DeliveryFinishParams) *lapse.Delivery {
		t.Helper()
		p.ID, p.Owner, p.Attempt, p.At = d.ID, "w", d.Attempts, now.Add(time.Second)
		p.Record.DeliveryID, p.Record.Attempt, p.Record.Worker, p.Record.StartedAt = d.ID, d.Attempts, "w", now
		got, err := s.DeliveryFinish(ctxT(t), &p)
		if err != nil {
			t.Fatalf("DeliveryFinish(%s): %v", d.Subscriber, err)
		}
		return got
	}

	done := finish(bySub["a"], lapse.DeliveryFinishParams{Status: lapse.DeliveryDone, Record: lapse.DeliveryAttempt{Duration: 1500 * time.Microsecond, Outcome: lapse.OutcomeOK}})
	if done.Status != lapse.DeliveryDone || done.DoneAt == nil || !done.DoneAt.Equal(now.Add(time.Second)) || done.LeaseUntil != nil || done.LeaseOwner != "" || done.LastError != "" {
		t.Errorf("done delivery = %+v", done)
	}
	retry := now.Add(time.Minute)
	pend := finish(bySub["b"], lapse.DeliveryFinishParams{Status: lapse.DeliveryPending, NextAttemptAt: retry, Unknown: true, Error: "timeout after send",
		Record: lapse.DeliveryAttempt{Duration: time.Second, Outcome: lapse.OutcomeUnknown, Error: "timeout after send"}})
	if pend.Status != lapse.DeliveryPending || !pend.NextAttemptAt.Equal(retry) || !pend.Unknown || pend.LastError != "timeout after send" || pend.LeaseUntil != nil {
		t.Errorf("retrying delivery = %+v", pend)
	}
	if early := claim(t, s, retry.Add(-time.Microsecond), "w", 10, "b"); len(early) != 0 {
		t.Errorf("claimed a retry before its time")
	}
	if back := claim(t, s, retry, "w", 10, "b"); len(back) != 1 || back[0].Attempts != 2 || !back[0].Unknown {
		t.Errorf("retry claim = %+v", back)
	}

	dead := lapse.NewOutboxEvent(lapse.EventDeliveryDead, o, nil)
	dead.Subscribers = []string{"notify"}
	died := finish(bySub["c"], lapse.DeliveryFinishParams{Status: lapse.DeliveryDead, Error: "HTTP 400",
		Record: lapse.DeliveryAttempt{Outcome: lapse.OutcomeRefused, Error: "HTTP 400"},
		Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "delivery to c died: HTTP 400", DeliveryID: bySub["c"].ID, CreatedAt: now},
		Outbox: []lapse.OutboxEvent{dead}})
	if died.Status != lapse.DeliveryDead || died.LastError != "HTTP 400" || died.DoneAt != nil {
		t.Errorf("dead delivery = %+v", died)
	}
	bySubStatus, err := s.DeliveryCountBySubscriber(ctxT(t))
	var counted []string
	for _, c := range bySubStatus {
		counted = append(counted, fmt.Sprintf("%s %s %d", c.Subscriber, c.Status, c.N))
	}
	if want := []string{"b pending 1", "c dead 1", "notify pending 1"}; err != nil || !slices.Equal(counted, want) {
		t.Errorf("DeliveryCountBySubscriber = %q, %v; want %q (a is done)", counted, err, want)
	}
	reviews, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{Open: true, Limit: 10})
	if err != nil || len(reviews) != 1 || reviews[0].OrderNo != "FN-1" || reviews[0].DeliveryID != bySub["c"].ID || reviews[0].ResolvedAt != nil || reviews[0].ID == 0 {
		t.Errorf("reviews = %+v, %v", reviews, err)
	}
	if mine, _ := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID + 1000, Limit: 10}); len(mine) != 0 {
		t.Errorf("reviews of another order: %v", mine)
	}
	evs, _ := s.OutboxList(ctxT(t), o.ID)
	if len(evs) != 2 || evs[1].Type != lapse.EventDeliveryDead {
		t.Errorf("outbox after death: %+v", evs)
	}
	all, _ := s.DeliveryList(ctxT(t), o.ID)
	if len(all) != 4 || all[3].Subscriber != "notify" || all[3].EventType != lapse.EventDeliveryDead {
		t.Errorf("the dead event's delivery: %+v", all)
	}
	atts, err := s.DeliveryAttemptList(ctxT(t), o.ID)
	if err != nil || len(atts) != 3 {
		t.Fatalf("DeliveryAttemptList = %d, %v", len(atts), err)
	}
	if a := atts[0]; a.DeliveryID != bySub["a"].ID || a.Attempt != 1 || a.Worker != "w" || a.Outcome != lapse.OutcomeOK || a.Duration != 1500*time.Microsecond || !a.StartedAt.Equal(now) {
		t.Errorf("attempt row = %+v", a)
	}
	if a := atts[1]; a.Outcome != lapse.OutcomeUnknown || a.Error != "timeout after send" {
		t.Errorf("attempt row = %+v", a)
	}

	// Finishing twice, or a done delivery, is a lost lease.
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: done.ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryDone, At: now}); !errors.Is(err, lapse.ErrLeaseLost) {
		t.Errorf("finishing a done delivery = %v", err)
	}

	// Retry: only dead ones, with the schedule counted from now on.
	if _, err := s.DeliveryRetry(ctxT(t), &lapse.DeliveryRetryParams{ID: done.ID, At: now}); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("retrying a done delivery = %v", err)
	}
	if _, err := s.DeliveryRetry(ctxT(t), &lapse.DeliveryRetryParams{ID: 1 << 40, At: now}); !errors.Is(err, lapse.ErrDeliveryNotFound) {
		t.Errorf("retrying a missing delivery = %v", err)
	}
	revived, err := s.DeliveryRetry(ctxT(t), &lapse.DeliveryRetryParams{ID: died.ID, At: now.Add(time.Hour)})
	if err != nil || revived.Status != lapse.DeliveryPending || revived.RetryBase != 1 || revived.Failures() != 0 || !revived.NextAttemptAt.Equal(now.Add(time.Hour)) {
		t.Errorf("retried = %+v, %v", revived, err)
	}
	counts, err := s.DeliveryCount(ctxT(t))
	if err != nil || counts.Pending != 3 || counts.Dead != 0 || counts.OldestPending == nil {
		t.Errorf("DeliveryCount = %+v, %v; want 3 pending (b, c, notify)", counts, err)
	}
}

// testDeliveryRenew checks the heartbeat of attempts in flight: a renewal
// extends only the leases still held by that owner and attempt, never
// shortens one, keeps a renewed delivery from other claimers, and reports
// every lease it did not extend as lost, in the order asked.
func testDeliveryRenew(t *testing.T, s lapse.Store) {
	for i := range 4 {
		createWithSubs(t, s, orderNo("RN", i), base, "port")
	}
	now := base.Add(time.Second)
	ds := claim(t, s, now, "w1", 10, "port") // leased until now + 30s
	if len(ds) != 4 {
		t.Fatalf("claimed %d, want 4", len(ds))
	}
	leases := func(ds ...*lapse.Delivery) []lapse.DeliveryLease {
		var ls []lapse.DeliveryLease
		for _, d := range ds {
			ls = append(ls, lapse.DeliveryLease{ID: d.ID, Attempt: d.Attempts})
		}
		return ls
	}
	renew := func(owner string, until time.Time, ls []lapse.DeliveryLease) []int64 {
		t.Helper()
		lost, err := s.DeliveryRenew(ctxT(t), &lapse.DeliveryRenewParams{Owner: owner, Leases: ls, LeaseUntil: until})
		if err != nil {
			t.Fatalf("DeliveryRenew: %v", err)
		}
		return lost
	}
	leasedUntil := func(d *lapse.Delivery, owner string, until time.Time) {
		t.Helper()
		got, err := s.DeliveryGet(ctxT(t), d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.LeaseOwner != owner || got.LeaseUntil == nil || !got.LeaseUntil.Equal(until) || !got.NextAttemptAt.Equal(until) ||
			got.Status != lapse.DeliveryPending {
			t.Errorf("delivery %d = %+v, want pending, leased by %s until %v", d.ID, got, owner, until)
		}
	}

	if lost, err := s.DeliveryRenew(ctxT(t), &lapse.DeliveryRenewParams{Owner: "w1", LeaseUntil: now}); err != nil || len(lost) != 0 {
		t.Errorf("renewing nothing = %v, %v", lost, err)
	}
	// Renewed: leased for longer, and not due to anyone when the first
	// lease would have run out.
	until := now.Add(40 * time.Second)
	if lost := renew("w1", until, leases(ds...)); len(lost) != 0 {
		t.Errorf("renewing held leases lost %v", lost)
	}
	for _, d := range ds {
		leasedUntil(d, "w1", until)
	}
	if got := claim(t, s, now.Add(31*time.Second), "w2", 10, "port"); len(got) != 0 {
		t.Errorf("claimed %d renewed deliveries when their first lease ended", len(got))
	}
	// A renewal never shortens a lease.
	if lost := renew("w1", now.Add(35*time.Second), leases(ds[0])); len(lost) != 0 {
		t.Errorf("an earlier renewal lost %v", lost)
	}
	leasedUntil(ds[0], "w1", until)

	// Another owner, or another attempt, holds no lease: lost, and the lease
	// stays as it was.
	if lost := renew("w2", until.Add(time.Minute), leases(ds[1])); !slices.Equal(lost, []int64{ds[1].ID}) {
		t.Errorf("renewing another owner's lease: lost %v, want [%d]", lost, ds[1].ID)
	}
	if lost := renew("w1", until.Add(time.Minute), []lapse.DeliveryLease{{ID: ds[1].ID, Attempt: ds[1].Attempts + 1}}); !slices.Equal(lost, []int64{ds[1].ID}) {
		t.Errorf("renewing under another attempt: lost %v, want [%d]", lost, ds[1].ID)
	}
	leasedUntil(ds[1], "w1", until)

	// Finished, and taken over after the lease ran out: lost. A lease that
	// ran out but that no one took is still that attempt's, and renews.
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: ds[0].ID, Owner: "w1", Attempt: ds[0].Attempts,
		Status: lapse.DeliveryDone, At: now, Record: lapse.DeliveryAttempt{StartedAt: now, Outcome: lapse.OutcomeOK}}); err != nil {
		t.Fatal(err)
	}
	later := until.Add(time.Second)
	taken, err := s.DeliveryClaim(ctxT(t), &lapse.DeliveryClaimParams{Now: later, Owner: "w2", LeaseUntil: later.Add(30 * time.Second),
		Subscribers: []string{"port"}, Limit: 1})
	if err != nil || len(taken) != 1 || taken[0].Attempts != 2 {
		t.Fatalf("takeover claim = %+v, %v", taken, err)
	}
	var stale, kept *lapse.Delivery
	for _, d := range ds[1:] {
		switch {
		case d.ID == taken[0].ID:
			stale = d
		case kept == nil:
			kept = d
		}
	}
	if stale == nil || kept == nil {
		t.Fatalf("took over delivery %d, not one of w1's", taken[0].ID)
	}
	asked := leases(ds[0], stale, kept)
	if lost := renew("w1", later.Add(10*time.Second), asked); !slices.Equal(lost, []int64{ds[0].ID, stale.ID}) {
		t.Errorf("lost %v, want the finished %d and the taken %d, in that order", lost, ds[0].ID, stale.ID)
	}
	leasedUntil(stale, "w2", later.Add(30*time.Second))
	leasedUntil(kept, "w1", later.Add(10*time.Second))
	if got, _ := s.DeliveryGet(ctxT(t), ds[0].ID); got.Status != lapse.DeliveryDone || got.LeaseUntil != nil || got.LeaseOwner != "" {
		t.Errorf("a renewal touched a finished delivery: %+v", got)
	}
}

func testDeliveryClaimConcurrent(t *testing.T, s lapse.Store) {
	const n = 200
	var ps []*lapse.OrderCreateParams
	for i := range n {
		p := newOrder(orderNo("DCC", i), base.Add(time.Hour), base)
		p.Outbox[0].Subscribers = []string{"sink"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctxT(t), ps); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for {
				ds, err := s.DeliveryClaim(ctxT(t), &lapse.DeliveryClaimParams{Now: base, Owner: orderNo("w", w), LeaseUntil: base.Add(time.Minute), Subscribers: []string{"sink"}, Limit: 7})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d deliveries claimed, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("delivery %d claimed %d times under one lease", id, c)
		}
	}
}

func testEffectClaim(t *testing.T, s lapse.Store) {
	first, err := s.EffectClaim(ctxT(t), "stock", "ev-1", base)
	if err != nil || !first {
		t.Fatalf("first EffectClaim = %v, %v", first, err)
	}
	if again, err := s.EffectClaim(ctxT(t), "stock", "ev-1", base); err != nil || again {
		t.Errorf("second EffectClaim = %v, %v; want false", again, err)
	}
	if other, _ := s.EffectClaim(ctxT(t), "coupon", "ev-1", base); !other {
		t.Error("another consumer's claim of the same event was refused")
	}
	boom := errors.New("boom")
	err = s.Tx(ctxT(t), func(tx lapse.Store) error {
		if first, err := tx.EffectClaim(ctxT(t), "stock", "ev-2", base); err != nil || !first {
			t.Errorf("EffectClaim in Tx = %v, %v", first, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if first, _ := s.EffectClaim(ctxT(t), "stock", "ev-2", base); !first {
		t.Error("a rolled-back EffectClaim stuck")
	}
}

// testDeliveryClaimOrder checks that a subscriber gets the events of one
// order in order: a delivery is not claimed while an earlier delivery of the
// same order to the same subscriber is pending (leased or waiting for a
// retry). A dead one does not hold the next back.
func testDeliveryClaimOrder(t *testing.T, s lapse.Store) {
	o := createWithSubs(t, s, "FO-1", base, "port", "other")
	p := plan(t, o, flows.Cancel, base.Add(time.Second))
	p.Outbox[0].Subscribers = []string{"port", "other"}
	if _, err := s.OrderTransition(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	now := base.Add(2 * time.Second)
	first := claim(t, s, now, "w", 10, "port")
	if len(first) != 1 || first[0].EventType != lapse.EventOrderCreated {
		t.Fatalf("first claim = %+v, want order.created only", first)
	}
	// order.created fails and waits for a retry: order.closed must wait too.
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: first[0].ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryPending,
		NextAttemptAt: now.Add(time.Minute), Error: "503", At: now,
		Record: lapse.DeliveryAttempt{DeliveryID: first[0].ID, Attempt: 1, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeError}}); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, now.Add(time.Second), "w", 10, "port"); len(got) != 0 {
		t.Errorf("claimed %s while order.created was still pending", got[0].EventType)
	}
	// Another subscriber's deliveries of the same order are independent.
	if got := claim(t, s, now, "w", 10, "other"); len(got) != 1 || got[0].EventType != lapse.EventOrderCreated {
		t.Errorf("other subscriber claim = %+v", got)
	}
	// Once order.created is done, order.closed follows.
	retry := claim(t, s, now.Add(time.Minute), "w", 10, "port")
	if len(retry) != 1 || retry[0].EventType != lapse.EventOrderCreated {
		t.Fatalf("retry claim = %+v", retry)
	}
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: retry[0].ID, Owner: "w", Attempt: 2, Status: lapse.DeliveryDead, Error: "gone", At: now,
		Record: lapse.DeliveryAttempt{DeliveryID: retry[0].ID, Attempt: 2, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeRefused}}); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, now.Add(time.Minute), "w", 10, "port"); len(got) != 1 || got[0].EventType != flows.EventOrderClosed {
		t.Errorf("after order.created died: %+v, want order.closed", got)
	}
}

// testDeliveryChain checks that the events of one order reach a subscriber
// in the order they were written, however they were written: several in one
// create, in one bulk create, in one transition and in a batch of
// transitions, and across those writes. Later events are due earlier, so
// due order alone would deliver them backwards.
func testDeliveryChain(t *testing.T, s lapse.Store) {
	steps := func(o *lapse.Order, prefix string, n int, at time.Time) []lapse.OutboxEvent {
		var evs []lapse.OutboxEvent
		for i := range n {
			ev := lapse.NewOutboxEvent(fmt.Sprintf("%s.%d", prefix, i), o, nil)
			ev.CreatedAt = at.Add(-time.Duration(i) * time.Second)
			ev.Subscribers = []string{"sink"}
			evs = append(evs, ev)
		}
		return evs
	}
	want := map[string][]string{}
	expect := func(orderNo string, evs []lapse.OutboxEvent) {
		for _, ev := range evs {
			want[orderNo] = append(want[orderNo], ev.Type)
		}
	}

	one := newOrder("CH-ONE", base.Add(time.Hour), base)
	one.Outbox = append(one.Outbox, steps(one.Order, "create", 3, base)...)
	one.Outbox[0].Subscribers = []string{"sink"}
	if _, _, err := s.OrderCreate(ctxT(t), one); err != nil {
		t.Fatal(err)
	}
	expect("CH-ONE", one.Outbox)
	var bulk []*lapse.OrderCreateParams
	for _, no := range []string{"CH-BULK-1", "CH-BULK-2"} {
		p := newOrder(no, base.Add(time.Hour), base)
		p.Outbox = append(p.Outbox, steps(p.Order, "bulk", 3, base)...)
		p.Outbox[0].Subscribers = []string{"sink"}
		bulk = append(bulk, p)
		expect(no, p.Outbox)
	}
	if err := s.OrderCreateMany(ctxT(t), bulk); err != nil {
		t.Fatal(err)
	}

	later := base.Add(-time.Minute) // due before everything above
	o := mustGet(t, s, "CH-ONE")
	p := plan(t, o, flows.Cancel, later)
	p.Outbox[0].Subscribers = []string{"sink"}
	p.Outbox = append(steps(o, "cancel", 2, later), p.Outbox...)
	if _, err := s.OrderTransition(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	expect("CH-ONE", p.Outbox)
	var many []*lapse.OrderTransitionParams
	for _, no := range []string{"CH-BULK-1", "CH-BULK-2"} {
		o := mustGet(t, s, no)
		p := plan(t, o, flows.Cancel, later)
		p.Outbox[0].Subscribers = []string{"sink"}
		p.Outbox = append(steps(o, "many", 2, later), p.Outbox...)
		many = append(many, p)
		expect(no, p.Outbox)
	}
	if moved, err := s.OrderTransitionMany(ctxT(t), many); err != nil || len(moved) != 2 {
		t.Fatalf("OrderTransitionMany = %v, %v", moved, err)
	}

	got := map[string][]string{}
	now := base.Add(time.Hour)
	for round := 0; ; round++ {
		ds := claim(t, s, now, "w", 100, "sink")
		if len(ds) == 0 {
			break
		}
		if round > 20 {
			t.Fatalf("still claiming after %d rounds", round)
		}
		seen := map[string]bool{}
		for _, d := range ds {
			if seen[d.OrderNo] {
				t.Errorf("round %d claimed two deliveries of %s at once", round, d.OrderNo)
			}
			seen[d.OrderNo] = true
			got[d.OrderNo] = append(got[d.OrderNo], d.EventType)
			if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: d.Attempts,
				Status: lapse.DeliveryDone, At: now, Record: lapse.DeliveryAttempt{StartedAt: now, Outcome: lapse.OutcomeOK}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for no, w := range want {
		if !slices.Equal(got[no], w) {
			t.Errorf("%s delivered %v, want %v", no, got[no], w)
		}
	}
}
