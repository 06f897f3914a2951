package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// withStore is a store with a lapse.OrderCreateWither, which it writes as
// the interface says, in a transaction of the store below, and records.
type withStore struct {
	lapse.Store
	calls *[]lapse.OrderCreateWith
}

func (s withStore) OrderCreateWith(ctx context.Context, p *lapse.OrderCreateParams, w lapse.OrderCreateWith) (o *lapse.Order, created bool, err error) {
	*s.calls = append(*s.calls, w)
	err = s.Store.Tx(ctx, func(tx lapse.Store) error {
		o, created, err = tx.OrderCreate(ctx, p)
		if err != nil || !created {
			return err
		}
		if len(w.Reserve) > 0 {
			if err := tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: w.Reserve, At: p.Order.CreatedAt}); err != nil {
				return err
			}
		}
		if w.Audit != nil {
			return lapse.AuditAppend(ctx, tx.(lapse.AccessStore), w.Audit)
		}
		return nil
	})
	return o, created, err
}

// TestCreateOrderWith: the engine hands a store that has a
// lapse.OrderCreateWither the creations it can write alone, without a
// transaction of the engine's: audited ones, with the row Tx would have
// appended (the clock's time, "ok"), and those that hold stock only, with
// their lines as StockLines makes them; a missing SKU is the same conflict
// as in a transaction. A creation that is neither, or holds a coupon too,
// or whose row is of a close batch, is written as before.
func TestCreateOrderWith(t *testing.T) {
	var calls []lapse.OrderCreateWith
	s := withStore{openSQLite(t), &calls}
	clk := lapse.NewManualClock(t0)
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, StockLedger: true, CouponLedger: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for _, sku := range []string{"tea", "cup"} {
		if _, err := e.SetStock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.CreateCoupon(ctx, "C-1"); err != nil {
		t.Fatal(err)
	}
	entry := func(target string, batch int64) *lapse.AuditEntry {
		return &lapse.AuditEntry{ActorKind: "key", ActorID: "1", ActorName: "svc", Role: "service", Action: "order.create", Target: target, Batch: batch}
	}
	req := func(no string, items []lapse.Item, coupon string) *lapse.OrderCreate {
		r := checkout(no, time.Hour)
		r.Items, r.Coupon = items, coupon
		return r
	}
	two := []lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "cup", Qty: 2}, {SKU: "tea", Qty: 1}}
	for _, c := range []struct {
		name   string
		req    *lapse.OrderCreate
		audit  *lapse.AuditEntry
		with   bool
		lines  string // the reservation handed over
		reason string // a failure, by the end of its message
	}{
		{"audited", req("W-1", nil, ""), entry("order:W-1", 0), true, "[]", ""},
		{"plain", req("W-2", nil, ""), nil, false, "", ""},
		{"stock", req("W-3", two, ""), nil, true, "[{cup 2} {tea 2}]", ""},
		{"stock, audited", req("W-4", two, ""), entry("order:W-4", 0), true, "[{cup 2} {tea 2}]", ""},
		{"stock and a coupon", req("W-5", two, "C-1"), entry("order:W-5", 0), false, "", ""},
		{"a close batch's row", req("W-6", nil, ""), entry("order:W-6", 7), false, "", ""},
		{"a missing SKU", req("W-7", []lapse.Item{{SKU: "mug", Qty: 1}}, ""), entry("order:W-7", 0), true, "[{mug 1}]",
			`no stock record for sku "mug"; set it with PUT /v1/stock/{sku} first`},
	} {
		calls = calls[:0]
		cctx := ctx
		if c.audit != nil {
			cctx = engine.WithAudit(ctx, c.audit)
		}
		clk.Advance(time.Second)
		o, created, err := e.CreateOrder(cctx, c.req, app)
		if c.reason != "" {
			if lapse.ErrorCode(err) != lapse.ECONFLICT || !errors.Is(err, lapse.ErrStockNotFound) || !strings.HasSuffix(err.Error(), c.reason) || created {
				t.Errorf("%s: CreateOrder = %v, %v; want ECONFLICT %q", c.name, created, err, c.reason)
			}
		} else if err != nil || !created || o.OrderNo != c.req.OrderNo {
			t.Errorf("%s: CreateOrder = %+v, %v, %v", c.name, o, created, err)
		}
		if (len(calls) == 1) != c.with {
			t.Errorf("%s: %d calls of OrderCreateWith; want them %v", c.name, len(calls), c.with)
			continue
		}
		if !c.with {
			continue
		}
		w := calls[0]
		if got := fmt.Sprint(w.Reserve); got != c.lines && !(c.lines == "[]" && w.Reserve == nil) {
			t.Errorf("%s: reserved %s; want %s", c.name, got, c.lines)
		}
		switch {
		case c.audit == nil && w.Audit != nil:
			t.Errorf("%s: an audit row %+v for a creation that is not audited", c.name, w.Audit)
		case c.audit != nil && (w.Audit == nil || w.Audit.Target != c.audit.Target || w.Audit.Result != "ok" || !w.Audit.At.Equal(clk.Now())):
			t.Errorf("%s: audit row %+v; want %s, ok, at %v", c.name, w.Audit, c.audit.Target, clk.Now())
		}
		if c.audit != nil && engine.AuditWritten(cctx) != (c.reason == "") {
			t.Errorf("%s: AuditWritten = %v", c.name, engine.AuditWritten(cctx))
		}
	}
	st, err := e.Stock(ctx, "tea")
	if err != nil || st.Reserved != 6 {
		t.Errorf("Stock(tea) = %+v, %v; want 6 reserved, by W-3, W-4 and W-5", st, err)
	}
}
