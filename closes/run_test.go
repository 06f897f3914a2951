package closes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

func TestStart(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.order("S-1", "u1", "")
	v.order("S-2", "u1", "")
	v.order("S-3", "u1", "")
	v.pay("S-3")
	sel := &closes.Selector{OrderNos: []string{"S-2", "S-1", "S-3", "NOPE"}}

	var le *lapse.Error
	for _, c := range []struct {
		name   string
		sel    *closes.Selector
		reason string
		by     *lapse.AuditEntry
		field  string
	}{
		{"no reason", sel, "", alice, "reason"},
		{"a blank reason", sel, "  ", alice, "reason"},
		{"a reason of two lines", sel, "one\ntwo", alice, "reason"},
		{"a reason too long", sel, strings.Repeat("x", lapse.MaxReasonLen+1), alice, "reason"},
		{"no actor", sel, "outage", nil, "by"},
		{"an actor without a name", sel, "outage", &lapse.AuditEntry{ActorKind: "operator"}, "by"},
		{"an invalid selector", &closes.Selector{}, "outage", alice, "order_nos"},
		{"an unknown flow", &closes.Selector{UserID: "u1", Flow: "nope"}, "outage", alice, "flow"},
	} {
		if _, err := v.c.Start(ctx, c.sel, c.reason, c.by, nil, nil); !errors.As(err, &le) || le.Code != lapse.EINVALID || le.Field != c.field {
			t.Errorf("%s: Start = %v, want EINVALID about %s", c.name, err, c.field)
		}
	}
	for _, s := range []*closes.Selector{{OrderNos: []string{"S-3", "NOPE"}}, {UserID: "nobody"}} {
		_, err := v.c.Start(ctx, s, "outage", alice, nil, nil)
		if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.HasPrefix(lapse.ErrorMessage(err), "nothing to close: ") {
			t.Errorf("Start(%+v) = %v, want a conflict: nothing to close", s, err)
		}
	}
	if bs, _ := v.c.Batches(ctx, nil); len(bs) != 0 {
		t.Errorf("refused Starts made %d batches", len(bs))
	}

	b, err := v.c.Start(ctx, sel, "provider outage", alice, &lapse.Approval{ID: 42, Count: 2, CreatedAt: v.clk.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID == 0 || b.Status != lapse.CloseBatchRunning || b.Total != 2 || b.Reason != "provider outage" || b.CreatedBy != "operator:alice" ||
		b.ApprovalID != 42 || !b.CreatedAt.Equal(v.clk.Now()) || !b.FinishedAt.IsZero() {
		t.Errorf("Start = %+v", b)
	}
	var kept closes.Selector
	if err := json.Unmarshal(b.Selector, &kept); err != nil || strings.Join(kept.OrderNos, ",") != "S-2,S-1,S-3,NOPE" {
		t.Errorf("the batch keeps selector %s (%v), want it as given", b.Selector, err)
	}
	items := v.items(b.ID)
	if len(items) != 2 || items["S-1"].Status != lapse.CloseItemPending || items["S-2"].Status != lapse.CloseItemPending {
		t.Errorf("items = %v, want S-1 and S-2 pending", items)
	}
	if got, err := v.c.Batch(ctx, b.ID); err != nil || counts(got) != counts(b) {
		t.Errorf("Batch = %+v, %v", got, err)
	}
	if _, err := v.c.Batch(ctx, b.ID+100); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("Batch of an unknown id = %v, want ErrAccessNotFound", err)
	}
	if _, err := v.c.Run(ctx, b.ID+100, alice, nil); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("Run of an unknown id = %v, want ErrAccessNotFound", err)
	}

	// The audit log: the two refused Starts after validation, then the batch.
	rows, err := v.s.AuditList(ctx, &lapse.AuditListParams{Action: closes.ActionBatch})
	if err != nil || len(rows) != 3 {
		t.Fatalf("close.batch rows = %d, %v; want 3", len(rows), err)
	}
	for _, r := range rows[:2] {
		if r.Target != "close" || !strings.HasPrefix(r.Result, "nothing to close") || r.ActorName != "alice" {
			t.Errorf("refused Start's row = %+v", r)
		}
	}
	r := rows[2]
	if r.Target != "batch:"+strconv.FormatInt(b.ID, 10) || r.Batch != b.ID || r.Result != "ok" || r.ActorKind != "operator" || r.ActorID != "7" ||
		r.ActorName != "alice" || r.Role != "operator" || r.ClientAddr != "10.0.0.1" || r.Reason != "provider outage" ||
		r.ApprovalID != 42 || string(r.Params) != string(b.Selector) {
		t.Errorf("Start's row = %+v", r)
	}
	v.verifyAudit()
}

// TestStartApproved: a close carried out for an approval closes no more
// than was approved: not an order made after the request, and nothing at
// all when more orders than approved are left to close.
func TestStartApproved(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("A", "u1", 3)
	approved := &lapse.Approval{ID: 7, Count: 3, CreatedAt: v.clk.Now()}
	v.clk.Advance(time.Second)
	v.order("A-new", "u1", "")
	sel := &closes.Selector{UserID: "u1"}
	alice := &lapse.AuditEntry{ActorKind: "operator", ActorName: "alice"}

	fewer := *approved
	fewer.Count = 2
	_, err := v.c.Start(ctx, sel, "outage", alice, &fewer, nil)
	if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(lapse.ErrorMessage(err), "approval 7 was for 2 orders") {
		t.Errorf("Start of 3 orders approved for 2 = %v, want a conflict", err)
	}
	if bs, _ := v.c.Batches(ctx, nil); len(bs) != 0 {
		t.Fatalf("a refused Start made %+v", bs)
	}

	b, err := v.c.Start(ctx, sel, "outage", alice, approved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if items := v.items(b.ID); b.Total != 3 || b.ApprovalID != 7 || items["A-new"] != nil {
		t.Errorf("Start approved for 3 = %+v with items %v, want the 3 orders made before the request", b, items)
	}
	rows, err := v.s.AuditList(ctx, &lapse.AuditListParams{Action: closes.ActionBatch})
	if err != nil || len(rows) != 2 || !strings.Contains(rows[0].Result, "approval 7 was for 2 orders") || rows[0].ApprovalID != 7 || rows[1].Result != "ok" {
		t.Errorf("close.batch rows = %+v, %v; want the refusal, then the batch", rows, err)
	}

	// Only orders made since are left: nothing is closed.
	if _, err := v.c.Start(ctx, &closes.Selector{OrderNos: []string{"A-new"}}, "outage", alice, approved, nil); lapse.ErrorCode(err) != lapse.ECONFLICT ||
		!strings.Contains(lapse.ErrorMessage(err), "made after approval 7 was requested") {
		t.Errorf("Start of an order made after the request = %v, want a conflict saying so", err)
	}
}

// TestStartPreviewed: a close confirmed from a preview closes no more than
// the preview showed: not an order made after it, and nothing at all when
// more orders than it counted are left to close.
func TestStartPreviewed(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("A", "u1", 3)
	sel := &closes.Selector{UserID: "u1"}
	pv, err := v.c.Preview(ctx, sel)
	if err != nil || pv.Count != 3 || !pv.AsOf.Equal(v.clk.Now()) {
		t.Fatalf("Preview = %+v, %v; want 3 orders as of now", pv, err)
	}
	v.clk.Advance(time.Second)
	v.order("A-new", "u1", "")

	fewer := *pv
	fewer.Count = 2
	if _, err := v.c.Start(ctx, sel, "outage", alice, nil, &fewer); lapse.ErrorCode(err) != lapse.ECONFLICT ||
		!strings.Contains(lapse.ErrorMessage(err), "the preview showed 2 orders") {
		t.Errorf("Start of 3 orders previewed as 2 = %v, want a conflict", err)
	}
	if bs, _ := v.c.Batches(ctx, nil); len(bs) != 0 {
		t.Fatalf("a refused Start made %+v", bs)
	}
	for _, bad := range []*closes.Preview{{Count: 3}, {AsOf: pv.AsOf, Count: -1}} {
		var le *lapse.Error
		if _, err := v.c.Start(ctx, sel, "outage", alice, nil, bad); !errors.As(err, &le) || le.Code != lapse.EINVALID || le.Field != "preview" {
			t.Errorf("Start with preview %+v = %v, want invalid preview", bad, err)
		}
	}

	b, err := v.c.Start(ctx, sel, "outage", alice, nil, pv)
	if err != nil {
		t.Fatal(err)
	}
	if items := v.items(b.ID); b.Total != 3 || items["A-new"] != nil {
		t.Errorf("Start previewed as 3 = %+v with items %v, want the 3 orders made before the preview", b, items)
	}
	unnamed := *pv // a preview given back without its selection
	unnamed.Selection = ""
	if _, err := v.c.Start(ctx, &closes.Selector{OrderNos: []string{"A-new"}}, "outage", alice, nil, &unnamed); lapse.ErrorCode(err) != lapse.ECONFLICT ||
		!strings.Contains(lapse.ErrorMessage(err), "made after the preview") {
		t.Errorf("Start of an order made after the preview = %v, want a conflict saying so", err)
	}
}

// TestStartPreviewedOtherSelection: a preview's count is for the selection
// it read; a close confirmed from it with a selector that chooses other
// orders is refused, whatever their count, and one that chooses the same
// orders, spelled otherwise, is not.
func TestStartPreviewedOtherSelection(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("A", "u1", 2)
	v.orders("B", "u2", 2)
	pv, err := v.c.Preview(ctx, &closes.Selector{UserID: "u1"})
	if err != nil || pv.Count != 2 || len(pv.Selection) != 64 {
		t.Fatalf("Preview = %+v, %v; want 2 orders and a selection", pv, err)
	}
	var le *lapse.Error
	if _, err := v.c.Start(ctx, &closes.Selector{UserID: "u2"}, "outage", alice, nil, pv); !errors.As(err, &le) || le.Code != lapse.EINVALID || le.Field != "preview" {
		t.Errorf("Start of u2's orders from u1's preview = %v, want invalid preview", err)
	}
	if bs, _ := v.c.Batches(ctx, nil); len(bs) != 0 {
		t.Fatalf("a refused Start made %+v", bs)
	}

	nos := &closes.Selector{OrderNos: []string{"A-001", "B-002"}}
	from := v.clk.Now().Add(-time.Hour)
	to := v.clk.Now().Add(time.Hour)
	for _, c := range []struct{ previewed, confirmed *closes.Selector }{
		{nos, &closes.Selector{OrderNos: []string{"B-002", "A-001"}}},
		{&closes.Selector{From: &from, To: &to}, &closes.Selector{From: ptr(from.In(time.FixedZone("UTC+8", 8*3600))), To: ptr(to.In(time.FixedZone("UTC-5", -5*3600)))}},
	} {
		pv, err := v.c.Preview(ctx, c.previewed)
		if err != nil {
			t.Fatal(err)
		}
		b, err := v.c.Start(ctx, c.confirmed, "outage", alice, nil, pv)
		if err != nil || pv.Count == 0 || b.Total != pv.Count {
			t.Errorf("Start of %+v previewed as %+v = %+v, %v; want its %d orders", c.confirmed, c.previewed, b, err, pv.Count)
			continue
		}
		if _, err := v.c.Run(ctx, b.ID, alice, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestRun closes a batch of orders chosen by user: each once, by hand, with
// its stock and coupon given back once and an audit row each.
func TestRun(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	nos := v.orders("R", "u1", 230)
	withCoupon := []string{"R-231", "R-232"}
	v.order("R-231", "u1", "C-1")
	v.order("R-232", "u1", "C-2")
	nos = append(nos, withCoupon...)
	v.order("R-233", "u1", "")
	v.pay("R-233") // not chosen: paid
	v.order("X-1", "u2", "")
	if got := v.reserved(); got != 234 {
		t.Fatalf("reserved %d, want 234", got)
	}

	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "provider outage", alice, nil, nil)
	if err != nil || b.Total != int64(len(nos)) {
		t.Fatalf("Start = %+v, %v; want %d items", b, err, len(nos))
	}
	var seen []*lapse.CloseBatch
	done, err := v.c.Run(ctx, b.ID, alice, func(b *lapse.CloseBatch) { seen = append(seen, b) })
	if err != nil {
		t.Fatal(err)
	}
	want := "done total 232 closed 232 skipped 0 failed 0 finished"
	if counts(done) != want || !done.FinishedAt.Equal(v.clk.Now()) {
		t.Errorf("Run = %s at %v, want %s", counts(done), done.FinishedAt, want)
	}
	// Refreshed after 100 and 200 items (and what the other workers
	// settled meanwhile), then at the end.
	if len(seen) != 3 || seen[0].Status != lapse.CloseBatchRunning || seen[0].Closed < 100 || seen[1].Closed < 200 ||
		seen[1].Closed >= 232 || counts(seen[2]) != want {
		var got []string
		for _, b := range seen {
			got = append(got, counts(b))
		}
		t.Errorf("progress = %q; want 100, 200, then done", got)
	}
	if got, _ := v.c.Batch(ctx, b.ID); counts(got) != want {
		t.Errorf("Batch after Run = %s", counts(got))
	}
	v.drain()
	for _, no := range nos {
		v.closedOnce(no, alice)
	}
	if got := v.reserved(); got != 1 { // X-1's
		t.Errorf("reserved %d after the close, want 1", got)
	}
	for _, code := range []string{"C-1", "C-2"} {
		if c, _, err := v.e.Coupon(ctx, code); err != nil || c.Status != lapse.CouponAvailable {
			t.Errorf("coupon %s after the close = %+v, %v; want it available", code, c, err)
		}
	}
	for _, no := range []string{"R-233", "X-1"} {
		if o, _ := v.e.Order(ctx, no); o.State == flows.Closed {
			t.Errorf("%s, not chosen, was closed", no)
		}
	}

	rows := v.closeRows(b.ID)
	for _, no := range nos {
		rs := rows["order:"+no]
		if len(rs) != 1 || rs[0].Result != "ok" || rs[0].ActorName != "alice" || rs[0].ActorKind != "operator" ||
			rs[0].Reason != "provider outage" || rs[0].ClientAddr != "10.0.0.1" {
			t.Errorf("audit rows of %s = %+v, want one ok row of alice", no, rs)
		}
	}
	if len(rows) != len(nos) {
		t.Errorf("%d orders have close rows, want %d", len(rows), len(nos))
	}
	if n := v.verifyAudit(); n != int64(len(nos))+1 {
		t.Errorf("the audit log has %d rows, want %d", n, len(nos)+1)
	}

	// Run again: nothing to do, nothing changes.
	again, err := v.c.Run(ctx, b.ID, alice, nil)
	if err != nil || counts(again) != want || !again.FinishedAt.Equal(done.FinishedAt) {
		t.Errorf("Run of a done batch = %+v, %v", again, err)
	}
}

// TestRunPaidMeanwhile: an order paid after the batch was started is
// skipped, keeps its payment, and uses its stock up.
func TestRunPaidMeanwhile(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.order("M-1", "u1", "C-1")
	v.order("M-2", "u1", "C-2")
	b, err := v.c.Start(ctx, &closes.Selector{OrderNos: []string{"M-1", "M-2"}}, "stuck orders", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.pay("M-2")
	done, err := v.c.Run(ctx, b.ID, alice, nil)
	if err != nil || counts(done) != "done total 2 closed 1 skipped 1 failed 0 finished" {
		t.Fatalf("Run = %+v, %v", done, err)
	}
	it := v.items(b.ID)["M-2"]
	if it.Status != lapse.CloseItemSkipped || !strings.Contains(it.Detail, "PAID") {
		t.Errorf("M-2's item = %+v, want skipped as PAID", it)
	}
	v.drain()
	v.closedOnce("M-1", alice)
	o, _ := v.e.Order(ctx, "M-2")
	if o.State != flows.Paid || v.moves(o, lapse.StockConsume) != 1 || v.moves(o, lapse.StockRelease) != 0 {
		t.Errorf("M-2 = %s, consumed %d, released %d; want PAID with its stock used", o.State, v.moves(o, lapse.StockConsume), v.moves(o, lapse.StockRelease))
	}
	if c, _, _ := v.e.Coupon(ctx, "C-2"); c.Status != lapse.CouponUsed {
		t.Errorf("C-2 = %s, want used", c.Status)
	}
	rows := v.closeRows(b.ID)["order:M-2"]
	if len(rows) != 1 || !strings.Contains(rows[0].Result, "PAID") {
		t.Errorf("M-2's audit rows = %+v, want one naming PAID", rows)
	}
	v.verifyAudit()
}

// TestRunResumes stops a Run part way, as a killed process would, with one
// order closed whose item was not yet marked, and runs the batch again in
// another process.
func TestRunResumes(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	nos := v.orders("K", "u1", 250)
	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "provider outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Killed between a close's commit and its item's update: the close
	// and its audit row are there, the item is pending.
	entry := &lapse.AuditEntry{ActorKind: "operator", ActorID: "7", ActorName: "alice", Action: closes.ActionClose,
		Target: "order:K-250", Batch: b.ID, Reason: b.Reason}
	actx := engine.WithAudit(ctx, entry)
	if _, err := v.e.CloseOrder(actx, "K-250", b.Reason, engine.Actor{FiredBy: lapse.FiredByOperator, Name: "alice"}); err != nil ||
		!engine.AuditWritten(actx) {
		t.Fatalf("CloseOrder = %v, written %v", err, engine.AuditWritten(actx))
	}

	// Stopped after the first refresh.
	rctx, stop := context.WithCancel(ctx)
	part, err := v.c.Run(rctx, b.ID, alice, func(*lapse.CloseBatch) { stop() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped Run = %v, want context.Canceled", err)
	}
	if part.Status != lapse.CloseBatchRunning || part.Closed < 100 || part.Closed >= 250 {
		t.Fatalf("stopped Run left %s", counts(part))
	}
	if un, err := v.c.Unfinished(ctx); err != nil || len(un) != 1 || un[0].ID != b.ID {
		t.Fatalf("Unfinished = %v, %v", un, err)
	}

	w := v.reopen()
	found, err := w.c.FindRunning(ctx, &closes.Selector{UserID: "u1"})
	if err != nil || found == nil || found.ID != b.ID {
		t.Fatalf("FindRunning = %+v, %v", found, err)
	}
	done, err := w.c.Run(ctx, b.ID, cli, nil)
	if want := "done total 250 closed 250 skipped 0 failed 0 finished"; err != nil || counts(done) != want {
		t.Fatalf("resumed Run = %s, %v; want %s", counts(done), err, want)
	}
	w.drain()
	rows := w.closeRows(b.ID)
	for _, no := range nos {
		if no == "K-250" {
			w.closedOnce(no, alice)
		} else {
			o, _ := w.e.Order(ctx, no)
			trs, _ := w.e.Transitions(ctx, no)
			if o.State != flows.Closed || len(trs) != 2 || w.moves(o, lapse.StockRelease) != 1 {
				t.Errorf("%s = %s with %d transitions, %d releases", no, o.State, len(trs), w.moves(o, lapse.StockRelease))
			}
		}
		if rs := rows["order:"+no]; len(rs) != 1 || rs[0].Result != "ok" {
			t.Errorf("audit rows of %s = %+v, want one ok", no, rs)
		}
	}
	if got := w.reserved(); got != 0 {
		t.Errorf("reserved %d, want 0", got)
	}
	w.verifyAudit()
	if un, err := w.c.Unfinished(ctx); err != nil || len(un) != 0 {
		t.Errorf("Unfinished after the resumed Run = %v, %v", un, err)
	}
}

// TestRunAtOnce runs one batch from two goroutines of one process, and
// from two processes: on SQLite, and on PostgreSQL and MySQL, whose
// transactions run side by side, so that an item's settling and its
// batch's refreshes take turns under the batch's lock alone.
func TestRunAtOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		store        string
		twoProcesses bool
	}{
		{"one process", "sqlite", false},
		{"two processes", "sqlite", true},
		{"two processes on postgres", "postgres", true},
		{"two processes on mysql", "mysql", true},
	} {
		twoProcesses := c.twoProcesses
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var v *env
			if c.store == "sqlite" {
				v = newEnv(t)
			} else {
				v = newServerEnv(t, c.store)
			}
			ctx := ctxT(t)
			nos := v.orders("T", "u1", 120)
			b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "provider outage", alice, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			closers := []*closes.Closer{v.c, v.c}
			if twoProcesses {
				closers[1] = v.reopen().c
			}
			var wg sync.WaitGroup
			got := make([]*lapse.CloseBatch, 2)
			errs := make([]error, 2)
			for i, c := range closers {
				wg.Go(func() { got[i], errs[i] = c.Run(ctx, b.ID, alice, nil) })
			}
			wg.Wait()
			want := "done total 120 closed 120 skipped 0 failed 0 finished"
			for i := range got {
				if errs[i] != nil || counts(got[i]) != want {
					t.Errorf("Run %d = %+v, %v; want %s", i, got[i], errs[i], want)
				}
			}
			if final, _ := v.c.Batch(ctx, b.ID); counts(final) != want {
				t.Errorf("the batch is %s, want %s", counts(final), want)
			}
			v.drain()
			rows := v.closeRows(b.ID)
			for _, no := range nos {
				v.closedOnce(no, alice)
				if rs := rows["order:"+no]; len(rs) != 1 || rs[0].Result != "ok" {
					t.Errorf("audit rows of %s = %+v, want one ok", no, rs)
				}
				if it := v.items(b.ID)[no]; it.Status != lapse.CloseItemClosed {
					t.Errorf("item %s = %+v", no, it)
				}
			}
			if got := v.reserved(); got != 0 {
				t.Errorf("reserved %d, want 0", got)
			}
			v.verifyAudit()
		})
	}
}

// TestRunRetriesFailed: an item whose close failed is tried again by the
// next Run of the batch, which is running meanwhile.
func TestRunRetriesFailed(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("F", "u1", 3)
	b, err := v.c.Start(ctx, &closes.Selector{OrderNos: []string{"F-001", "F-002", "F-003"}}, "provider outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A failure as a Run records it.
	if err := v.s.CloseItemUpdate(ctx, &lapse.CloseItem{BatchID: b.ID, OrderNo: "F-002", Status: lapse.CloseItemFailed, Detail: "unavailable"}); err != nil {
		t.Fatal(err)
	}
	b.Status, b.Failed, b.FinishedAt = lapse.CloseBatchDone, 1, v.clk.Now()
	if err := v.s.CloseBatchUpdate(ctx, b); err != nil {
		t.Fatal(err)
	}
	var seen []string
	done, err := v.c.Run(ctx, b.ID, alice, func(b *lapse.CloseBatch) { seen = append(seen, counts(b)) })
	if want := "done total 3 closed 3 skipped 0 failed 0 finished"; err != nil || counts(done) != want {
		t.Fatalf("Run = %s, %v; want %s", counts(done), err, want)
	}
	if len(seen) != 2 || !strings.HasPrefix(seen[0], "running ") {
		t.Errorf("progress = %q; want running first", seen)
	}
	v.drain()
	for _, no := range []string{"F-001", "F-002", "F-003"} {
		v.closedOnce(no, alice)
	}
}

// TestRunSkipsAClosedOne: an order closed otherwise after the batch was
// started is skipped.
func TestRunSkipsAClosedOne(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("C", "u1", 2)
	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "stuck", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Fire(ctx, "C-001", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
		t.Fatal(err)
	}
	done, err := v.c.Run(ctx, b.ID, alice, nil)
	if err != nil || counts(done) != "done total 2 closed 1 skipped 1 failed 0 finished" {
		t.Fatalf("Run = %+v, %v", done, err)
	}
	if it := v.items(b.ID)["C-001"]; it.Status != lapse.CloseItemSkipped || !strings.Contains(it.Detail, "CLOSED") {
		t.Errorf("C-001's item = %+v, want skipped as CLOSED", it)
	}
	v.drain()
	o, _ := v.e.Order(ctx, "C-001")
	if o.FiredBy != lapse.FiredByApp || v.moves(o, lapse.StockRelease) != 1 {
		t.Errorf("C-001 = %+v, want cancelled by the app, released once", o)
	}
}

// TestRunFinishes: a batch whose items were all settled by a Run that died
// before it wrote the batch's end is finished by the next Run, with its
// counts as the items have them.
func TestRunFinishes(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("E", "u1", 2)
	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "stuck", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, err := v.c.Run(ctx, b.ID, alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := *b // running, nothing counted
	if err := v.s.CloseBatchUpdate(ctx, &stale); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(time.Minute)
	again, err := v.reopen().c.Run(ctx, b.ID, cli, nil)
	if err != nil || counts(again) != counts(done) || !again.FinishedAt.Equal(v.clk.Now()) {
		t.Errorf("Run of a batch left running = %+v, %v; want %s", again, err, counts(done))
	}
	v.drain()
	v.closedOnce("E-001", alice)
	v.closedOnce("E-002", alice)
}
