package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// newApproval builds a pending request for a refund of target made at at.
func newApproval(target string, at time.Time) *lapse.Approval {
	return &lapse.Approval{Action: "refund.create", Target: target, Amount: 50000, Currency: "CNY",
		Request: []byte(`{"amount": 50000,  "reason":"broken" , "a":1}`), Reason: "the customer asked", MakerID: 7, MakerName: "alice",
		CreatedAt: at, ExpiresAt: at.Add(24 * time.Hour), Status: lapse.ApprovalPending}
}

func mustApproval(t *testing.T, s lapse.AccessStore, a *lapse.Approval) *lapse.Approval {
	t.Helper()
	got, err := s.ApprovalCreate(ctxT(t), a)
	if err != nil {
		t.Fatalf("ApprovalCreate %s: %v", a.Target, err)
	}
	return got
}

func approvalIDs(as []*lapse.Approval) []int64 {
	var ids []int64
	for _, a := range as {
		ids = append(ids, a.ID)
	}
	return ids
}

func testApproval(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	if _, err := s.ApprovalGet(ctx, 1); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("ApprovalGet of an unknown id = %v, want ErrAccessNotFound", err)
	}
	refund := newApproval("order:A-1", base)
	refund.ID = 1000 // ignored
	closing := &lapse.Approval{Action: "order.close", Target: "batch", Count: 250, Request: []byte(`{"order_nos":["A-1"]}`),
		MakerID: 8, MakerName: "bob", CreatedAt: base, ExpiresAt: base.Add(time.Hour), Status: lapse.ApprovalPending}
	for _, a := range []*lapse.Approval{refund, closing} {
		got := mustApproval(t, s, a)
		want := *a
		want.ID = got.ID
		if got.ID <= 0 || got.ID == 1000 || fmt.Sprint(*got) != fmt.Sprint(want) {
			t.Errorf("ApprovalCreate returned\n%+v\nwant\n%+v", *got, want)
		}
		if read, err := s.ApprovalGet(ctx, got.ID); err != nil || fmt.Sprint(*read) != fmt.Sprint(want) {
			t.Errorf("ApprovalGet = %+v, %v; want %+v", read, err, want)
		}
	}
}

func testApprovalList(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	if as, err := s.ApprovalList(ctx, &lapse.ApprovalListParams{}); err != nil || len(as) != 0 {
		t.Errorf("ApprovalList of none = %v, %v", approvalIDs(as), err)
	}
	var ids []int64 // by age
	for i := range 5 {
		ids = append(ids, mustApproval(t, s, newApproval(fmt.Sprintf("order:L-%d", i), base.Add(time.Duration(i)*time.Minute))).ID)
	}
	for _, id := range []int64{ids[1], ids[3]} {
		if _, err := s.ApprovalDecide(ctx, &lapse.ApprovalDecideParams{ID: id, From: lapse.ApprovalPending, To: lapse.ApprovalRejected,
			ApproverID: 9, ApproverName: "carol", DecidedAt: base.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		p    lapse.ApprovalListParams
		want []int64
	}{
		{lapse.ApprovalListParams{}, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{lapse.ApprovalListParams{Limit: -1}, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{lapse.ApprovalListParams{Status: lapse.ApprovalPending}, []int64{ids[4], ids[2], ids[0]}},
		{lapse.ApprovalListParams{Status: lapse.ApprovalRejected}, []int64{ids[3], ids[1]}},
		{lapse.ApprovalListParams{Status: lapse.ApprovalExpired}, nil},
		{lapse.ApprovalListParams{Limit: 2}, []int64{ids[4], ids[3]}},
		{lapse.ApprovalListParams{Before: ids[3]}, []int64{ids[2], ids[1], ids[0]}},
		{lapse.ApprovalListParams{Before: ids[3], Limit: 2}, []int64{ids[2], ids[1]}},
		{lapse.ApprovalListParams{Status: lapse.ApprovalPending, Before: ids[4], Limit: 1}, []int64{ids[2]}},
		{lapse.ApprovalListParams{Before: ids[0]}, nil},
	} {
		as, err := s.ApprovalList(ctx, &c.p)
		if err != nil || fmt.Sprint(approvalIDs(as)) != fmt.Sprint(c.want) {
			t.Errorf("ApprovalList(%+v) = %v, %v; want %v", c.p, approvalIDs(as), err, c.want)
		}
	}
	as, err := s.ApprovalList(ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalRejected, Limit: 1})
	if want, _ := s.ApprovalGet(ctx, ids[3]); err != nil || len(as) != 1 || fmt.Sprint(*as[0]) != fmt.Sprint(*want) {
		t.Errorf("ApprovalList of rejected = %+v, %v; want the whole request %+v", values(as), err, want)
	}
}

func testApprovalDecide(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	a := mustApproval(t, s, newApproval("order:D-1", base))
	approve := &lapse.ApprovalDecideParams{ID: a.ID, From: lapse.ApprovalPending, To: lapse.ApprovalApproved,
		ApproverID: 9, ApproverName: "carol", DecidedAt: base.Add(time.Minute)}
	want := *a
	want.Status, want.ApproverID, want.ApproverName, want.DecidedAt = lapse.ApprovalApproved, 9, "carol", base.Add(time.Minute)
	if got, err := s.ApprovalDecide(ctx, approve); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("ApprovalDecide = %+v, %v; want\n%+v", got, err, want)
	}
	// Not pending any more: the same move again is stale and writes nothing.
	again := *approve
	again.ApproverID, again.ApproverName, again.DecidedAt, again.Result = 10, "dave", base.Add(time.Hour), "again"
	if _, err := s.ApprovalDecide(ctx, &again); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("ApprovalDecide from a status it is not in = %v, want ErrStale", err)
	}
	if got, err := s.ApprovalGet(ctx, a.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("after a stale decision: %+v, %v; want %+v", got, err, want)
	}
	done := &lapse.ApprovalDecideParams{ID: a.ID, From: lapse.ApprovalApproved, To: lapse.ApprovalExecuted,
		ApproverID: 9, ApproverName: "carol", DecidedAt: base.Add(2 * time.Minute), Result: "refund r-1 requested"}
	want.Status, want.DecidedAt, want.Result = lapse.ApprovalExecuted, done.DecidedAt, done.Result
	if got, err := s.ApprovalDecide(ctx, done); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("ApprovalDecide to executed = %+v, %v; want\n%+v", got, err, want)
	}
	missing := *approve
	missing.ID = a.ID + 1000
	if _, err := s.ApprovalDecide(ctx, &missing); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("ApprovalDecide of an unknown id = %v, want ErrAccessNotFound", err)
	}
}

// testApprovalDecideConcurrent: of operators deciding one pending request
// at once, exactly one does.
func testApprovalDecideConcurrent(t *testing.T, s accessStore) {
	a := mustApproval(t, s, newApproval("order:C-1", base))
	const n = 8
	var (
		wg     sync.WaitGroup
		wins   atomic.Int32
		winner atomic.Pointer[lapse.Approval]
	)
	for i := range n {
		wg.Go(func() {
			to := lapse.ApprovalApproved
			if i%2 == 1 {
				to = lapse.ApprovalRejected
			}
			got, err := s.ApprovalDecide(ctxT(t), &lapse.ApprovalDecideParams{ID: a.ID, From: lapse.ApprovalPending, To: to,
				ApproverID: int64(100 + i), ApproverName: fmt.Sprintf("op-%d", i), DecidedAt: base.Add(time.Duration(i) * time.Second)})
			switch {
			case err == nil:
				wins.Add(1)
				winner.Store(got)
			case !errors.Is(err, lapse.ErrStale):
				t.Errorf("ApprovalDecide: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d of %d concurrent decisions won, want exactly 1", wins.Load(), n)
	}
	if got, err := s.ApprovalGet(ctxT(t), a.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(*winner.Load()) {
		t.Errorf("ApprovalGet = %+v, %v; want the winner's decision %+v", got, err, winner.Load())
	}
}
