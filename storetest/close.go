package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

func newBatch(reason string) *lapse.CloseBatch {
	return &lapse.CloseBatch{Selector: []byte(`{"order_nos": ["CB-2","CB-1"],  "user_id":null}`), Reason: reason,
		CreatedBy: "operator:alice", ApprovalID: 3, CreatedAt: base, Status: lapse.CloseBatchRunning, Total: 3}
}

func mustBatch(t *testing.T, s lapse.AccessStore, b *lapse.CloseBatch, orderNos ...string) *lapse.CloseBatch {
	t.Helper()
	got, err := s.CloseBatchCreate(ctxT(t), b, orderNos)
	if err != nil {
		t.Fatalf("CloseBatchCreate %s: %v", b.Reason, err)
	}
	return got
}

func batchIDs(bs []*lapse.CloseBatch) []int64 {
	var ids []int64
	for _, b := range bs {
		ids = append(ids, b.ID)
	}
	return ids
}

func itemString(its []*lapse.CloseItem) string {
	var out []string
	for _, it := range its {
		out = append(out, fmt.Sprintf("%d/%s:%s:%s", it.BatchID, it.OrderNo, it.Status, it.Detail))
	}
	return fmt.Sprint(out)
}

func testCloseBatch(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	if _, err := s.CloseBatchGet(ctx, 1); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("CloseBatchGet of an unknown id = %v, want ErrAccessNotFound", err)
	}
	in := newBatch("first")
	in.ID = 1000 // ignored
	first := mustBatch(t, s, in, "CB-3", "CB-1", "CB-2")
	want := *in
	want.ID = first.ID
	if first.ID <= 0 || first.ID == 1000 || fmt.Sprint(*first) != fmt.Sprint(want) {
		t.Errorf("CloseBatchCreate returned\n%+v\nwant\n%+v", *first, want)
	}
	if got, err := s.CloseBatchGet(ctx, first.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("CloseBatchGet = %+v, %v; want %+v", got, err, want)
	}
	empty := newBatch("empty")
	empty.Selector, empty.ApprovalID, empty.Total = nil, 0, 0
	second := mustBatch(t, s, empty)
	if its, err := s.CloseItemList(ctx, second.ID, "", "", 0); err != nil || len(its) != 0 {
		t.Errorf("items of a batch of none = %s, %v", itemString(its), err)
	}

	// Status, counts and FinishedAt are written; nothing else.
	done := *first
	done.Status, done.Total, done.Closed, done.Skipped, done.Failed, done.FinishedAt = lapse.CloseBatchDone, 4, 1, 2, 1, base.Add(time.Minute)
	changed := done
	changed.Selector, changed.Reason, changed.CreatedBy, changed.ApprovalID, changed.CreatedAt = []byte(`{}`), "other", "cli:root", 9, base.Add(time.Hour)
	if err := s.CloseBatchUpdate(ctx, &changed); err != nil {
		t.Fatalf("CloseBatchUpdate: %v", err)
	}
	if got, err := s.CloseBatchGet(ctx, first.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(done) {
		t.Errorf("CloseBatchGet after CloseBatchUpdate =\n%+v, %v\nwant\n%+v", got, err, done)
	}
	// Zero values, the time too, are written back as zero.
	rerun := *first
	if err := s.CloseBatchUpdate(ctx, &rerun); err != nil {
		t.Fatalf("CloseBatchUpdate back to running: %v", err)
	}
	if got, err := s.CloseBatchGet(ctx, first.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(rerun) {
		t.Errorf("CloseBatchGet after CloseBatchUpdate back to running =\n%+v, %v\nwant\n%+v", got, err, rerun)
	}
	if err := s.CloseBatchUpdate(ctx, &done); err != nil {
		t.Fatalf("CloseBatchUpdate: %v", err)
	}
	missing := done
	missing.ID = second.ID + 1000
	if err := s.CloseBatchUpdate(ctx, &missing); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("CloseBatchUpdate of an unknown id = %v, want ErrAccessNotFound", err)
	}

	for _, c := range []struct {
		p    lapse.CloseBatchListParams
		want []int64
	}{
		{lapse.CloseBatchListParams{}, []int64{second.ID, first.ID}},
		{lapse.CloseBatchListParams{Limit: -1}, []int64{second.ID, first.ID}},
		{lapse.CloseBatchListParams{Limit: 1}, []int64{second.ID}},
		{lapse.CloseBatchListParams{Status: lapse.CloseBatchDone}, []int64{first.ID}},
		{lapse.CloseBatchListParams{Status: lapse.CloseBatchRunning, Limit: 5}, []int64{second.ID}},
		{lapse.CloseBatchListParams{Before: second.ID}, []int64{first.ID}},
		{lapse.CloseBatchListParams{Before: second.ID, Limit: 1}, []int64{first.ID}},
		{lapse.CloseBatchListParams{Before: first.ID}, nil},
		{lapse.CloseBatchListParams{Status: lapse.CloseBatchRunning, Before: second.ID}, nil},
		{lapse.CloseBatchListParams{Status: lapse.CloseBatchDone, Before: second.ID}, []int64{first.ID}},
	} {
		bs, err := s.CloseBatchList(ctx, &c.p)
		if err != nil || fmt.Sprint(batchIDs(bs)) != fmt.Sprint(c.want) {
			t.Errorf("CloseBatchList(%+v) = %v, %v; want %v", c.p, batchIDs(bs), err, c.want)
		}
	}
	if bs, err := s.CloseBatchList(ctx, &lapse.CloseBatchListParams{Status: lapse.CloseBatchDone}); err != nil || len(bs) != 1 ||
		fmt.Sprint(*bs[0]) != fmt.Sprint(done) {
		t.Errorf("CloseBatchList of done = %+v, %v; want the whole batch %+v", values(bs), err, done)
	}
}

func testCloseItems(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	// Given out of order, and one twice: one item per order number.
	b := mustBatch(t, s, newBatch("items"), "CI-004", "CI-002", "CI-005", "CI-001", "CI-003", "CI-002")
	other := mustBatch(t, s, newBatch("other"), "CI-001")
	list := func(status lapse.CloseItemStatus, after string, limit int) string {
		t.Helper()
		its, err := s.CloseItemList(ctx, b.ID, status, after, limit)
		if err != nil {
			t.Fatalf("CloseItemList: %v", err)
		}
		return itemString(its)
	}
	item := func(no string, status lapse.CloseItemStatus, detail string) string {
		return fmt.Sprintf("%d/%s:%s:%s", b.ID, no, status, detail)
	}
	pending := func(nos ...string) string {
		var out []string
		for _, no := range nos {
			out = append(out, item(no, lapse.CloseItemPending, ""))
		}
		return fmt.Sprint(out)
	}
	if got, want := list("", "", 0), pending("CI-001", "CI-002", "CI-003", "CI-004", "CI-005"); got != want {
		t.Errorf("CloseItemList = %s, want %s", got, want)
	}
	if got, want := list(lapse.CloseItemPending, "CI-002", 2), pending("CI-003", "CI-004"); got != want {
		t.Errorf("CloseItemList after CI-002, 2 = %s, want %s", got, want)
	}
	if got, want := list("", "CI-004", -1), pending("CI-005"); got != want {
		t.Errorf("CloseItemList after CI-004 = %s, want %s", got, want)
	}

	for _, it := range []*lapse.CloseItem{
		{BatchID: b.ID, OrderNo: "CI-002", Status: lapse.CloseItemClosed},
		{BatchID: b.ID, OrderNo: "CI-004", Status: lapse.CloseItemSkipped, Detail: "already CLOSED"},
		{BatchID: b.ID, OrderNo: "CI-005", Status: lapse.CloseItemFailed, Detail: "lapse: order changed concurrently"},
	} {
		if err := s.CloseItemUpdate(ctx, it); err != nil {
			t.Fatalf("CloseItemUpdate %s: %v", it.OrderNo, err)
		}
	}
	if got, want := list(lapse.CloseItemPending, "", 0), pending("CI-001", "CI-003"); got != want {
		t.Errorf("pending after updates = %s, want %s", got, want)
	}
	want := fmt.Sprint([]string{item("CI-001", lapse.CloseItemPending, ""), item("CI-002", lapse.CloseItemClosed, ""),
		item("CI-003", lapse.CloseItemPending, ""), item("CI-004", lapse.CloseItemSkipped, "already CLOSED"),
		item("CI-005", lapse.CloseItemFailed, "lapse: order changed concurrently")})
	if got := list("", "", 0); got != want {
		t.Errorf("CloseItemList after updates = %s, want %s", got, want)
	}
	if got, want := list(lapse.CloseItemFailed, "", 10), fmt.Sprint([]string{item("CI-005", lapse.CloseItemFailed, "lapse: order changed concurrently")}); got != want {
		t.Errorf("failed items = %s, want %s", got, want)
	}

	counts := func(id int64) string {
		t.Helper()
		n, err := s.CloseItemCount(ctx, id)
		if err != nil {
			t.Fatalf("CloseItemCount: %v", err)
		}
		var out []string // statuses without items may be absent or zero
		for _, st := range []lapse.CloseItemStatus{lapse.CloseItemPending, lapse.CloseItemClosed, lapse.CloseItemSkipped, lapse.CloseItemFailed} {
			out = append(out, fmt.Sprintf("%s=%d", st, n[st]))
			delete(n, st)
		}
		if len(n) > 0 {
			t.Errorf("CloseItemCount has statuses of no item: %v", n)
		}
		return fmt.Sprint(out)
	}
	if got := counts(b.ID); got != "[pending=2 closed=1 skipped=1 failed=1]" {
		t.Errorf("CloseItemCount = %s", got)
	}
	if got := counts(other.ID); got != "[pending=1 closed=0 skipped=0 failed=0]" {
		t.Errorf("CloseItemCount of the other batch = %s; updates of one batch's items changed it", got)
	}
	if err := s.CloseItemUpdate(ctx, &lapse.CloseItem{BatchID: b.ID, OrderNo: "CI-009", Status: lapse.CloseItemClosed}); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("CloseItemUpdate of an unknown item = %v, want ErrAccessNotFound", err)
	}
	if err := s.CloseItemUpdate(ctx, &lapse.CloseItem{BatchID: other.ID + 1000, OrderNo: "CI-001", Status: lapse.CloseItemClosed}); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("CloseItemUpdate of an unknown batch = %v, want ErrAccessNotFound", err)
	}
}
