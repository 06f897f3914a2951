package storetest

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// testDeliveryUnfinished checks the count of claims in a row whose attempts
// did not end through the subscriber: a claim adds one (a claim whose
// worker died is never finished), a finish cut short keeps it, any other
// finish sets it to 0, and so do a batch's done finish and an operator's
// retry. The deliverer tells a delivery whose attempts never end from one
// whose schedule was shortened under it by it.
func testDeliveryUnfinished(t *testing.T, s lapse.Store) {
	createWithSubs(t, s, "UF-1", base, "a", "b")
	now := base.Add(time.Second)
	var a, b *lapse.Delivery
	reclaim := func(sub string, want int) *lapse.Delivery {
		t.Helper()
		now = now.Add(time.Minute) // past the lease of the claim before
		ds := claim(t, s, now, "w", 10, sub)
		if len(ds) != 1 || ds[0].Unfinished != want {
			t.Fatalf("claim of %s: %+v; want one with Unfinished %d", sub, ds, want)
		}
		return ds[0]
	}
	finish := func(d *lapse.Delivery, status lapse.DeliveryStatus, cutShort bool, want int) {
		t.Helper()
		p := &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: d.Attempts, Status: status, At: now,
			NextAttemptAt: now, CutShort: cutShort, Error: "failed",
			Record: lapse.DeliveryAttempt{DeliveryID: d.ID, Attempt: d.Attempts, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeError}}
		got, err := s.DeliveryFinish(ctxT(t), p)
		if err != nil || got.Unfinished != want {
			t.Fatalf("DeliveryFinish(%s, cut short %v) = %+v, %v; want Unfinished %d", status, cutShort, got, err, want)
		}
		if read, err := s.DeliveryGet(ctxT(t), d.ID); err != nil || read.Unfinished != want {
			t.Fatalf("DeliveryGet after the finish = %+v, %v; want Unfinished %d", read, err, want)
		}
	}

	a = reclaim("a", 1)
	a = reclaim("a", 2) // the worker of the first claim died
	finish(a, lapse.DeliveryPending, true, 2)
	a = reclaim("a", 3)
	finish(a, lapse.DeliveryPending, false, 0)
	a = reclaim("a", 1)
	finish(a, lapse.DeliveryDead, true, 1)
	revived, err := s.DeliveryRetry(ctxT(t), &lapse.DeliveryRetryParams{ID: a.ID, At: now})
	if err != nil || revived.Unfinished != 0 {
		t.Fatalf("DeliveryRetry = %+v, %v; want Unfinished 0", revived, err)
	}
	a = reclaim("a", 1)
	finish(a, lapse.DeliveryDone, false, 0)

	b = reclaim("b", 1)
	b = reclaim("b", 2)
	lost, err := s.DeliveryDoneMany(ctxT(t), &lapse.DeliveryDoneManyParams{Owner: "w", At: now, Attempts: []lapse.DeliveryAttempt{
		{DeliveryID: b.ID, Attempt: b.Attempts, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeOK}}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("DeliveryDoneMany = %v, %v", lost, err)
	}
	if read, err := s.DeliveryGet(ctxT(t), b.ID); err != nil || read.Status != lapse.DeliveryDone || read.Unfinished != 0 {
		t.Fatalf("after DeliveryDoneMany: %+v, %v; want done with Unfinished 0", read, err)
	}
}
