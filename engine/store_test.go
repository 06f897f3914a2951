package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestStoreValidates checks that the engine's store, the one its services
// and its handlers write through, applies the root package's rules before
// its store sees a call: what they refuse is EINVALID and writes nothing,
// inside Tx as well, and what they accept reaches the store.
func TestStoreValidates(t *testing.T) {
	t.Parallel()
	raw := openSQLite(t)
	e := newEngine(t, raw, lapse.NewManualClock(t0))
	s := e.Store()
	ctx := ctxT(t)
	o := create(t, e, checkout("SV-1", time.Hour))
	if _, err := raw.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: 10, At: t0}); err != nil {
		t.Fatal(err)
	}
	ev := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	twice := ev
	twice.Subscribers = []string{"stock", "stock"}
	newOrder := func(orderNo string, evs ...lapse.OutboxEvent) *lapse.OrderCreateParams {
		x := *o
		x.OrderNo = orderNo
		return &lapse.OrderCreateParams{Order: &x, Log: lapse.TransitionRecord{ToState: o.State, Event: lapse.EventCreate, CreatedAt: t0}, Outbox: evs}
	}
	idInUpperCase := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	idInUpperCase.ID = strings.ToUpper(idInUpperCase.ID)

	refused := map[string]func(s lapse.Store) error{
		"stock lines unsorted": func(s lapse.Store) error {
			return s.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "cup", Qty: 1}}, At: t0})
		},
		"stock sku twice": func(s lapse.Store) error {
			return s.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "tea", Qty: 1}}, At: t0})
		},
		"stock on-hand negative": func(s lapse.Store) error {
			_, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: -1, At: t0})
			return err
		},
		"coupon move without order_no": func(s lapse.Store) error {
			_, err := s.CouponMove(ctx, &lapse.CouponMoveParams{Code: "SAVE", OrderID: o.ID, Kind: lapse.CouponLock, At: t0})
			return err
		},
		"subscriber twice": func(s lapse.Store) error {
			_, _, err := s.OrderCreate(ctx, newOrder("SV-2", twice))
			return err
		},
		"event id in upper case": func(s lapse.Store) error {
			return s.OrderCreateMany(ctx, []*lapse.OrderCreateParams{newOrder("SV-3", idInUpperCase)})
		},
		"one order twice in a batch": func(s lapse.Store) error {
			p := lapse.OrderTransitionParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version, ToState: "CLOSED", Event: "CANCEL", At: t0}
			q := p
			_, err := s.OrderTransitionMany(ctx, []*lapse.OrderTransitionParams{&p, &q})
			return err
		},
		"cards of two orders": func(s lapse.Store) error {
			_, _, err := s.CardIssue(ctx, &lapse.CardIssueParams{OrderID: o.ID, Cards: []*lapse.Card{{OrderID: o.ID}, {OrderID: o.ID + 1}}})
			return err
		},
		"prune without a cut-off": func(s lapse.Store) error {
			_, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Limit: 10})
			return err
		},
		"claim of no flows": func(s lapse.Store) error {
			_, err := s.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: t0, Limit: 10})
			return err
		},
		"delivery finish of an unknown status": func(s lapse.Store) error {
			_, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: "lost", At: t0})
			return err
		},
	}
	for name, call := range refused {
		if err := call(s); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s: %v, want an EINVALID error", name, err)
		}
		boom := errors.New("boom")
		err := s.Tx(ctx, func(tx lapse.Store) error {
			if err := call(tx); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("%s inside Tx: %v, want an EINVALID error", name, err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("%s: Tx = %v", name, err)
		}
	}
	if st, err := raw.StockGet(ctx, "tea"); err != nil || st.Reserved != 0 || st.OnHand != 10 {
		t.Errorf("tea = %+v, %v; want nothing moved", st, err)
	}
	for _, no := range []string{"SV-2", "SV-3"} {
		if _, err := raw.OrderGet(ctx, no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s: %v, want not found", no, err)
		}
	}
	if got, _ := raw.OrderGet(ctx, "SV-1"); got.Version != o.Version {
		t.Errorf("SV-1 moved to version %d", got.Version)
	}

	// What the rules accept reaches the store.
	lines, err := lapse.StockLines([]lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "tea", Qty: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: lines, At: t0}); err != nil {
		t.Fatal(err)
	}
	if st, _ := raw.StockGet(ctx, "tea"); st.Reserved != 3 {
		t.Errorf("tea reserved %d, want 3", st.Reserved)
	}
}
