package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testDeliveryDoneMany checks the finish of many delivered attempts at once:
// each one whose lease is held becomes done with its attempt row, as
// DeliveryFinish would make it; the others are returned as lost, in the
// order given, and get nothing; a delivery chained after one that is done
// becomes claimable; inside a Tx that fails, nothing is recorded.
func testDeliveryDoneMany(t *testing.T, s lapse.Store) {
	var orders []*lapse.Order
	for i := range 4 {
		orders = append(orders, createWithSubs(t, s, orderNo("DM", i), base, "nats"))
	}
	// DM-0 has a second event for nats, chained after its first.
	p := plan(t, orders[0], flows.Cancel, base)
	p.Outbox[0].Subscribers = []string{"nats"}
	if _, err := s.OrderTransition(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	now := base.Add(time.Second)
	ds := claim(t, s, now, "w", 10, "nats")
	if len(ds) != 4 {
		t.Fatalf("claimed %d, want the first delivery of each order", len(ds))
	}
	byOrder := map[string]*lapse.Delivery{}
	for _, d := range ds {
		byOrder[d.OrderNo] = d
	}
	d0, d1, d2, d3 := byOrder["DM-00000"], byOrder["DM-00001"], byOrder["DM-00002"], byOrder["DM-00003"]
	if d0 == nil || d1 == nil || d2 == nil || d3 == nil {
		t.Fatalf("claimed %+v", ds)
	}
	// DM-1's last outcome was unknown: done clears it. DM-3 is done already.
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: d1.ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryPending,
		NextAttemptAt: now, Unknown: true, Error: "timeout after send", At: now,
		Record: lapse.DeliveryAttempt{DeliveryID: d1.ID, Attempt: 1, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeUnknown}}); err != nil {
		t.Fatal(err)
	}
	again := claim(t, s, now, "w", 10, "nats")
	if len(again) != 1 || again[0].ID != d1.ID || again[0].Attempts != 2 || !again[0].Unknown {
		t.Fatalf("claimed again %+v", again)
	}
	d1 = again[0]
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: d3.ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryDone, At: now,
		Record: lapse.DeliveryAttempt{DeliveryID: d3.ID, Attempt: 1, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeOK}}); err != nil {
		t.Fatal(err)
	}

	if lost, err := s.DeliveryDoneMany(ctxT(t), &lapse.DeliveryDoneManyParams{Owner: "w", At: now}); err != nil || len(lost) != 0 {
		t.Errorf("DeliveryDoneMany(none) = %v, %v", lost, err)
	}
	at := now.Add(time.Second)
	rec := func(d *lapse.Delivery, attempt int, outcome string) lapse.DeliveryAttempt {
		return lapse.DeliveryAttempt{DeliveryID: d.ID, Attempt: attempt, Worker: "w-1", StartedAt: now, Duration: 2500 * time.Microsecond, Outcome: outcome}
	}
	all := &lapse.DeliveryDoneManyParams{Owner: "w", At: at, Attempts: []lapse.DeliveryAttempt{
		rec(d3, 1, lapse.OutcomeOK),      // done already
		rec(d0, 1, lapse.OutcomeOK),      // held
		rec(d2, 2, lapse.OutcomeOK),      // not the attempt it runs
		rec(d1, 2, lapse.OutcomeApplied), // held
	}}

	// In a transaction that fails, nothing is recorded.
	boom := errors.New("boom")
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, err := tx.DeliveryDoneMany(ctxT(t), all); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v", err)
	}
	if got, _ := s.DeliveryGet(ctxT(t), d0.ID); got.Status != lapse.DeliveryPending {
		t.Errorf("after a rolled back DeliveryDoneMany: %+v", got)
	}

	lost, err := s.DeliveryDoneMany(ctxT(t), all)
	if err != nil || !slices.Equal(lost, []int64{d3.ID, d2.ID}) {
		t.Fatalf("DeliveryDoneMany = %v, %v; want lost %v", lost, err, []int64{d3.ID, d2.ID})
	}
	for _, d := range []*lapse.Delivery{d0, d1} {
		got, err := s.DeliveryGet(ctxT(t), d.ID)
		if err != nil || got.Status != lapse.DeliveryDone || got.DoneAt == nil || !got.DoneAt.Equal(at) || !got.UpdatedAt.Equal(at) ||
			got.LeaseUntil != nil || got.LeaseOwner != "" || got.Unknown || got.LastError != "" || got.Attempts != d.Attempts {
			t.Errorf("done delivery %s = %+v, %v", d.OrderNo, got, err)
		}
	}
	if got, _ := s.DeliveryGet(ctxT(t), d2.ID); got.Status != lapse.DeliveryPending || got.LeaseOwner != "w" {
		t.Errorf("the delivery whose lease was not held = %+v", got)
	}
	atts, err := s.DeliveryAttemptList(ctxT(t), orders[1].ID)
	if err != nil || len(atts) != 2 {
		t.Fatalf("attempts of DM-1 = %+v, %v", atts, err)
	}
	if a := atts[1]; a.DeliveryID != d1.ID || a.Attempt != 2 || a.Worker != "w-1" || !a.StartedAt.Equal(now) || a.Duration != 2500*time.Microsecond ||
		a.Outcome != lapse.OutcomeApplied || a.Error != "" {
		t.Errorf("attempt row = %+v", a)
	}
	for i, n := range []int{1, 0, 1} { // DM-0, DM-2, DM-3
		o := orders[[]int{0, 2, 3}[i]]
		if atts, _ := s.DeliveryAttemptList(ctxT(t), o.ID); len(atts) != n {
			t.Errorf("%s has %d attempt rows, want %d", o.OrderNo, len(atts), n)
		}
	}

	// DM-0's second event is next in its chain.
	next := claim(t, s, at, "w", 10, "nats")
	if len(next) != 1 || next[0].OrderNo != "DM-00000" || next[0].EventType != flows.EventOrderClosed {
		t.Errorf("after DM-0's first delivery was done, claimed %+v", next)
	}
}
