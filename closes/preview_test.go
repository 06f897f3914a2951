package closes_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// previewOrders creates, an hour apart from t0: u1's unpaid P-1, paid P-2,
// unpaid membership M-1, unpaid P-3; then u2's unpaid P-4 and 12 unpaid
// Q-… orders at t0+5h.
func previewOrders(t *testing.T, v *env) {
	t.Helper()
	v.order("P-1", "u1", "C-1")
	v.clk.Advance(time.Hour)
	v.order("P-2", "u1", "")
	v.pay("P-2")
	v.clk.Advance(time.Hour)
	if _, _, err := v.e.CreateOrder(ctxT(t), &lapse.OrderCreate{OrderNo: "M-1", Flow: "membership", UserID: "u1",
		Amount: 9900, Currency: "CNY"}, app); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(time.Hour)
	v.order("P-3", "u1", "")
	v.clk.Advance(time.Hour)
	v.order("P-4", "u2", "")
	v.clk.Advance(time.Hour)
	v.orders("Q", "u3", 12)
}

// ns is *t plus n nanoseconds.
func ns(t *time.Time, n int) *time.Time {
	x := t.Add(time.Duration(n))
	return &x
}

func orderNos(os []*lapse.Order) []string {
	var nos []string
	for _, o := range os {
		nos = append(nos, o.OrderNo)
	}
	return nos
}

func TestPreview(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	previewOrders(t, v)
	ctx := ctxT(t)
	at := func(h int) *time.Time { x := t0.Add(time.Duration(h) * time.Hour); return &x }
	for _, c := range []struct {
		name    string
		sel     *closes.Selector
		count   int64
		skipped int64
		sample  []string
	}{
		{"by user", &closes.Selector{UserID: "u1"}, 3, 1, []string{"P-3", "M-1", "P-1"}},
		{"by user and flow", &closes.Selector{UserID: "u1", Flow: "checkout"}, 2, 1, []string{"P-3", "P-1"}},
		{"by user, none closable", &closes.Selector{UserID: "u1", Flow: "groupbuy"}, 0, 0, nil},
		{"by range", &closes.Selector{From: at(0), To: at(4)}, 3, 1, []string{"P-3", "M-1", "P-1"}},
		{"by range, to exclusive", &closes.Selector{From: at(0), To: at(3)}, 2, 1, []string{"M-1", "P-1"}},
		{"by range, from inclusive", &closes.Selector{From: at(3), To: at(5)}, 2, 0, []string{"P-4", "P-3"}},
		// Bounds finer than a store keeps times are taken as given: P-3,
		// created at 3h, is before a from a nanosecond later, and before
		// a to a nanosecond later.
		{"by range, from a nanosecond after an order", &closes.Selector{From: ns(at(3), 1), To: at(5)}, 1, 0, []string{"P-4"}},
		{"by range, to a nanosecond after an order", &closes.Selector{From: at(0), To: ns(at(3), 1)}, 3, 1, []string{"P-3", "M-1", "P-1"}},
		{"by range and flow", &closes.Selector{From: at(0), To: at(4), Flow: "membership"}, 1, 0, []string{"M-1"}},
		{"a sample of ten", &closes.Selector{UserID: "u3"}, 12, 0,
			[]string{"Q-012", "Q-011", "Q-010", "Q-009", "Q-008", "Q-007", "Q-006", "Q-005", "Q-004", "Q-003"}},
		{"by order numbers", &closes.Selector{OrderNos: []string{"P-4", "NOPE", "P-2", "P-1"}}, 2, 2, []string{"P-4", "P-1"}},
		{"by order numbers and flow", &closes.Selector{OrderNos: []string{"M-1", "P-1"}, Flow: "membership"}, 1, 1, []string{"M-1"}},
	} {
		p, err := v.c.Preview(ctx, c.sel)
		if err != nil {
			t.Errorf("%s: Preview = %v", c.name, err)
			continue
		}
		if p.Count != c.count || p.Skipped != c.skipped || !slices.Equal(orderNos(p.Sample), c.sample) {
			t.Errorf("%s: Preview = count %d skipped %d sample %v; want %d, %d, %v", c.name, p.Count, p.Skipped, orderNos(p.Sample),
				c.count, c.skipped, c.sample)
		}
	}

	var le *lapse.Error
	if _, err := v.c.Preview(ctx, &closes.Selector{UserID: "u1", Flow: "nope"}); !errors.As(err, &le) || le.Field != "flow" {
		t.Errorf("Preview of an unknown flow = %v, want an EINVALID error about flow", err)
	}
	if _, err := v.c.Preview(ctx, &closes.Selector{}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("Preview of nothing = %v, want EINVALID", err)
	}
	// Nothing changed.
	for _, no := range []string{"P-1", "P-3", "P-4", "M-1"} {
		if o, err := v.e.Order(ctx, no); err != nil || o.State == flows.Closed || o.State == flows.Cancelled {
			t.Errorf("%s after previews = %+v, %v", no, o, err)
		}
	}
	if bs, err := v.c.Batches(ctx, nil); err != nil || len(bs) != 0 {
		t.Errorf("Batches after previews = %d, %v", len(bs), err)
	}
}

// TestPreviewPages reads more orders than one page.
func TestPreviewPages(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	const n = 1100
	ps := make([]*lapse.OrderCreateParams, 0, n)
	for i := range n {
		at := t0.Add(time.Duration(i%7) * time.Second) // ties in created_at, ordered by id
		ps = append(ps, &lapse.OrderCreateParams{Order: &lapse.Order{OrderNo: fmt.Sprintf("N-%04d", i), Flow: "checkout",
			State: flows.Unpaid, UserID: "bulk", Amount: 1, Currency: "CNY", CreatedAt: at, UpdatedAt: at}})
	}
	// A paid one among them, by state.
	ps[500].Order.State = flows.Paid
	if err := v.s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	p, err := v.c.Preview(ctx, &closes.Selector{UserID: "bulk"})
	if err != nil || p.Count != n-1 || p.Skipped != 1 || len(p.Sample) != 10 {
		t.Fatalf("Preview = %+v, %v; want %d closable, 1 skipped", p, err, n-1)
	}
}

// TestPreviewLeavesGroupBuys: an open group buy has a deadline, but the
// event it fires settles the group and charges its members; a manual close
// of a user's orders leaves it alone.
func TestPreviewLeavesGroupBuys(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.order("P-1", "u1", "")
	if _, _, err := v.e.CreateOrder(ctxT(t), &lapse.OrderCreate{OrderNo: "G-1", Flow: "groupbuy", UserID: "u1",
		Amount: 500, Currency: "CNY"}, app); err != nil {
		t.Fatal(err)
	}
	for _, sel := range []*closes.Selector{{UserID: "u1"}, {OrderNos: []string{"G-1", "P-1"}}} {
		p, err := v.c.Preview(ctxT(t), sel)
		if err != nil || p.Count != 1 || p.Skipped != 1 || !slices.Equal(orderNos(p.Sample), []string{"P-1"}) {
			t.Errorf("Preview(%+v) = %+v, %v; want P-1 alone, G-1 skipped", sel, p, err)
		}
	}
}

// TestPreviewSince: the preview of a close confirmed from an earlier
// preview counts what Start given it would close now: the orders counted
// then that are still closable, not those made or changed since; and it
// refuses another selection's preview, as Start does.
func TestPreviewSince(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.order("S-1", "u", "")
	v.order("S-2", "u", "")
	v.order("S-3", "u", "")
	sel := &closes.Selector{UserID: "u"}
	first, err := v.c.Preview(ctx, sel)
	if err != nil || first.Count != 3 {
		t.Fatalf("Preview = %+v, %v", first, err)
	}
	v.clk.Advance(time.Second)
	v.pay("S-1")
	v.order("S-4", "u", "")
	if _, _, err := v.e.SetDeadline(ctx, "S-2", engine.DeadlineChange{ExtendBy: time.Hour, By: app}); err != nil {
		t.Fatal(err)
	}
	p, err := v.c.PreviewSince(ctx, sel, first)
	if err != nil || p.Count != 1 || p.Skipped != 3 || !slices.Equal(orderNos(p.Sample), []string{"S-3"}) || !p.AsOf.Equal(v.clk.Now()) ||
		p.Selection != sel.Selection() {
		t.Errorf("PreviewSince = %+v, %v; want S-3 alone as of now", p, err)
	}
	if p, err := v.c.PreviewSince(ctx, sel, nil); err != nil || p.Count != 3 || p.Skipped != 1 {
		t.Errorf("PreviewSince of no preview = %+v, %v; want the 3 closable now", p, err)
	}
	other := *first
	other.Selection = (&closes.Selector{UserID: "someone else"}).Selection()
	var le *lapse.Error
	if _, err := v.c.PreviewSince(ctx, sel, &other); !errors.As(err, &le) || le.Field != "preview" {
		t.Errorf("PreviewSince of another selection's preview = %v, want EINVALID about preview", err)
	}
}
