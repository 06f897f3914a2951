package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// prunePass runs OutboxPrune from the start until it says it read to the
// end, limit events a step, and returns how many it deleted.
func prunePass(t *testing.T, s lapse.Store, before time.Time, limit int) int {
	t.Helper()
	n, err := pass(ctxT(t), s, before, limit)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pass(ctx context.Context, s lapse.Store, before time.Time, limit int) (int, error) {
	deleted, from := 0, int64(0)
	for step := 0; ; step++ {
		if step > 10_000 {
			return deleted, fmt.Errorf("OutboxPrune has not reached the end after %d steps (at %d)", step, from)
		}
		got, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: before, Now: before, From: from, Limit: limit})
		if err != nil {
			return deleted, fmt.Errorf("OutboxPrune(from %d) = %w", from, err)
		}
		if got.Next != 0 && got.Next <= from {
			return deleted, fmt.Errorf("OutboxPrune(from %d) goes on from %d: a pass must move forward", from, got.Next)
		}
		deleted += got.Deleted
		if from = got.Next; from == 0 {
			return deleted, nil
		}
	}
}

// deliverAll claims every due delivery of subs at now and finishes each as
// done, with its attempt row.
func deliverAll(t *testing.T, s lapse.Store, now time.Time, subs ...string) {
	t.Helper()
	for {
		ds := claim(t, s, now, "w", 100, subs...)
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: d.Attempts, Status: lapse.DeliveryDone, At: now,
				Record: lapse.DeliveryAttempt{DeliveryID: d.ID, Attempt: d.Attempts, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeOK}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// kept reports what is left of an order's events, deliveries and attempts.
func kept(t *testing.T, s lapse.Store, o *lapse.Order) string {
	t.Helper()
	evs, err1 := s.OutboxList(ctxT(t), o.ID)
	ds, err2 := s.DeliveryList(ctxT(t), o.ID)
	as, err3 := s.DeliveryAttemptList(ctxT(t), o.ID)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d events, %d deliveries, %d attempts", len(evs), len(ds), len(as))
}

// testOutboxPrune checks what a pass of OutboxPrune deletes: an event
// created before the cut-off whose deliveries are all done, or that has
// none, with its deliveries, attempts and effect rows; and what it keeps:
// an event with a delivery pending or dead, an event of an order that went
// to review (all of them), an event not old enough, the order and its
// transition log. A pass in steps of one event deletes the same.
func testOutboxPrune(t *testing.T, s lapse.Store) {
	old, cut := base, base.Add(time.Hour)
	done := createWithSubs(t, s, "PR-done", old, "a", "b") // both delivered: goes
	quiet := createWithSubs(t, s, "PR-quiet", old)         // no subscriber: goes
	pending := createWithSubs(t, s, "PR-pending", old, "a", "slow")
	reviewed := createWithSubs(t, s, "PR-reviewed", old, "a", "c")
	young := createWithSubs(t, s, "PR-young", cut, "a") // created at the cut-off: stays
	// PR-pending's second event is delivered to a; its first never is to
	// slow.
	p := plan(t, pending, flows.Cancel, old.Add(time.Minute))
	p.Outbox[0].Subscribers = []string{"a"}
	if _, err := s.OrderTransition(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	now := cut.Add(time.Minute)
	deliverAll(t, s, now, "a", "b")
	// c dies on PR-reviewed, which goes to review.
	ds := claim(t, s, now, "w", 10, "c")
	if len(ds) != 1 {
		t.Fatalf("claimed %+v for c", ds)
	}
	if _, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: ds[0].ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryDead, Error: "HTTP 400", At: now,
		Record: lapse.DeliveryAttempt{DeliveryID: ds[0].ID, Attempt: 1, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeRefused, Error: "HTTP 400"},
		Review: &lapse.Review{OrderID: reviewed.ID, OrderNo: reviewed.OrderNo, Reason: "delivery to c died", DeliveryID: ds[0].ID, CreatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	// Effects of a's deliveries of PR-done and PR-pending.
	evsDone, _ := s.OutboxList(ctxT(t), done.ID)
	evsPending, _ := s.OutboxList(ctxT(t), pending.ID)
	if len(evsDone) != 1 || len(evsPending) != 2 {
		t.Fatalf("events: %d of PR-done, %d of PR-pending", len(evsDone), len(evsPending))
	}
	for _, id := range []string{evsDone[0].ID, evsPending[0].ID, evsPending[1].ID} {
		if first, err := s.EffectClaim(ctxT(t), "a", id, now); err != nil || !first {
			t.Fatalf("EffectClaim(a, %s) = %v, %v", id, first, err)
		}
	}
	// Another consumer's effect of PR-done's event, by no delivery of it.
	if first, err := s.EffectClaim(ctxT(t), "elsewhere", evsDone[0].ID, now); err != nil || !first {
		t.Fatal(first, err)
	}

	before := map[*lapse.Order]string{}
	for _, o := range []*lapse.Order{done, quiet, pending, reviewed, young} {
		before[o] = kept(t, s, o)
	}
	boom := errors.New("boom")
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		got, err := tx.OutboxPrune(ctxT(t), &lapse.OutboxPruneParams{Before: cut, Now: cut, Limit: 1000})
		if err != nil {
			return err
		}
		if got.Deleted != 3 {
			t.Errorf("OutboxPrune in Tx deleted %d, want 3", got.Deleted)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v", err)
	}
	for o, was := range before {
		if now := kept(t, s, o); now != was {
			t.Errorf("%s after a prune that rolled back: %s, want %s", o.OrderNo, now, was)
		}
	}

	if n := prunePass(t, s, cut, 1); n != 3 {
		t.Errorf("a pass in steps of 1 deleted %d events, want 3 (PR-done's, PR-quiet's, PR-pending's second)", n)
	}
	for o, want := range map[*lapse.Order]string{
		done:     "0 events, 0 deliveries, 0 attempts",
		quiet:    "0 events, 0 deliveries, 0 attempts",
		pending:  "1 events, 2 deliveries, 1 attempts", // the first event (a done, slow pending) stays whole
		reviewed: before[reviewed],
		young:    before[young],
	} {
		if got := kept(t, s, o); got != want {
			t.Errorf("%s after the pass: %s, want %s", o.OrderNo, got, want)
		}
	}
	for _, o := range []*lapse.Order{done, quiet} {
		if _, err := s.OrderGet(ctxT(t), o.OrderNo); err != nil {
			t.Errorf("OrderGet(%s) after the pass = %v", o.OrderNo, err)
		}
		if log, err := s.TransitionList(ctxT(t), o.ID); err != nil || len(log) == 0 {
			t.Errorf("the log of %s after the pass: %d rows, %v", o.OrderNo, len(log), err)
		}
	}
	// The effect rows of the deleted deliveries went with them; the others stay.
	for id, want := range map[string]bool{evsDone[0].ID: true, evsPending[0].ID: false, evsPending[1].ID: true} {
		if first, err := s.EffectClaim(ctxT(t), "a", id, now); err != nil || first != want {
			t.Errorf("EffectClaim(a, %s) after the pass = %v, %v; want %v", id, first, err, want)
		}
	}
	if first, err := s.EffectClaim(ctxT(t), "elsewhere", evsDone[0].ID, now); err != nil || first {
		t.Errorf("EffectClaim(elsewhere) after the pass = %v, %v: an effect of no deleted delivery went", first, err)
	}
	// Nothing is left to delete; what stays still works.
	if n := prunePass(t, s, cut, 1000); n != 0 {
		t.Errorf("a second pass deleted %d", n)
	}
	deliverAll(t, s, now, "slow")
	if n := prunePass(t, s, cut, 1000); n != 1 {
		t.Errorf("once slow has PR-pending's event, a pass deleted %d, want 1", n)
	}
	if got := kept(t, s, pending); got != "0 events, 0 deliveries, 0 attempts" {
		t.Errorf("PR-pending after slow had it: %s", got)
	}
	// A new event of an order whose deliveries went is delivered as any.
	p = plan(t, done, flows.Cancel, now)
	p.Outbox[0].Subscribers = []string{"a"}
	if _, err := s.OrderTransition(ctxT(t), p); err != nil {
		t.Fatalf("a transition of PR-done after its events went: %v", err)
	}
	if ds := claim(t, s, now, "w", 10, "a"); len(ds) != 1 || ds[0].OrderNo != done.OrderNo {
		t.Errorf("claimed %+v after the pass, want PR-done's new event", ds)
	}
}

// testOutboxPruneConcurrent checks that pruners running at once delete each
// event once, between them all, without an error.
func testOutboxPruneConcurrent(t *testing.T, s lapse.Store) {
	const n = 120
	var ps []*lapse.OrderCreateParams
	for i := range n {
		p := newOrder(orderNo("PC", i), base.Add(time.Hour), base)
		p.Outbox[0].Subscribers = []string{"a"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctxT(t), ps); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, s, base.Add(time.Minute), "a")
	var wg sync.WaitGroup
	counts := make([]int, 4)
	for i := range counts {
		wg.Go(func() {
			var err error
			if counts[i], err = pass(ctxT(t), s, base.Add(time.Hour), 7); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	total := 0
	for _, c := range counts {
		total += c
	}
	// A pruner leaves what another holds; a last pass takes what they left.
	total += prunePass(t, s, base.Add(time.Hour), 1000)
	if total != n {
		t.Errorf("pruners deleted %d events in all (per pruner %v, then a last pass), want %d", total, counts, n)
	}
	for i := range n {
		o, err := s.OrderGet(ctxT(t), orderNo("PC", i))
		if err != nil {
			t.Fatal(err)
		}
		if got := kept(t, s, o); got != "0 events, 0 deliveries, 0 attempts" {
			t.Errorf("%s after the pruners: %s", o.OrderNo, got)
		}
	}
}
