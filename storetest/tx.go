package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testTxNested checks that a nested Tx is a savepoint: an error from its fn
// undoes its writes and only those, even when a statement inside it failed,
// and the outer transaction goes on to commit the rest. Engine code relies
// on it to try a change inside a caller's transaction and go on without it.
func testTxNested(t *testing.T, s lapse.Store) {
	boom := errors.New("boom")
	first := newOrder("TN-1", base.Add(time.Minute), base)
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctxT(t), first); err != nil {
			return err
		}
		err := tx.Tx(ctxT(t), func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-2", base.Add(time.Minute), base)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("nested Tx = %v, want fn's error", err)
		}
		// A failed statement inside the nested Tx (the event id is taken)
		// is undone with it, and leaves the outer transaction usable.
		clash := newOrder("TN-3", base.Add(time.Minute), base)
		clash.Outbox[0].ID = first.Outbox[0].ID
		err = tx.Tx(ctxT(t), func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-4", base.Add(time.Minute), base)); err != nil {
				return err
			}
			_, _, err := tx.OrderCreate(ctxT(t), clash)
			return err
		})
		if err == nil {
			t.Error("nested Tx with a clashing event id succeeded")
		}
		if _, err := tx.OrderGet(ctxT(t), "TN-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("inside the outer Tx, TN-2 of a failed nested Tx = %v, want not found", err)
		}
		// A nested Tx that succeeds keeps its writes.
		return tx.Tx(ctxT(t), func(tx lapse.Store) error {
			_, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-5", base.Add(time.Minute), base))
			return err
		})
	})
	if err != nil {
		t.Fatalf("outer Tx = %v, want it to commit", err)
	}
	for _, no := range []string{"TN-1", "TN-5"} {
		mustGet(t, s, no)
	}
	for _, no := range []string{"TN-2", "TN-3", "TN-4"} {
		if _, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s of a failed nested Tx = %v, want not found", no, err)
		}
	}
}

// testTxRefusals checks that the refusals methods document (a sentinel, a
// conflict, a row that exists already) leave a transaction usable: the
// caller may go on and commit the rest. Each refusal writes nothing.
func testTxRefusals(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: 1, At: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CouponCreate(ctx, &lapse.CouponCreateParams{Code: "TAKEN", At: base}); err != nil {
		t.Fatal(err)
	}
	o := createWithSubs(t, s, "TR-1", base, "webhook")
	g := mustCreate(t, s, "TR-G", base.Add(time.Hour), base)
	if _, _, err := s.GroupMemberAdd(ctx, newMember(o, "u1")); err != nil {
		t.Fatal(err)
	}
	pay, _, err := s.PaymentCreate(ctx, newPayment(o, "txn-tr", base))
	if err != nil {
		t.Fatal(err)
	}
	refund := &lapse.OrderRefund{OrderID: o.ID, OrderNo: o.OrderNo, PaymentID: pay.ID, Provider: "sandbox", TxnID: "txn-tr",
		Amount: 1, Currency: o.Currency, Key: "refund-tr", Status: lapse.OrderRefundRequested, CreatedAt: base}
	if _, _, err := s.OrderRefundCreate(ctx, refund); err != nil {
		t.Fatal(err)
	}
	cards, _, err := s.CardIssue(ctx, newCards(o, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CardUse(ctx, &lapse.CardUseParams{CardID: cards[0].ID, Key: "visit-tr", At: base}); err != nil {
		t.Fatal(err)
	}
	ds := claim(t, s, base, "w", 1, "webhook")
	if len(ds) != 1 {
		t.Fatalf("claimed %d deliveries, want 1", len(ds))
	}
	if _, err := s.EffectClaim(ctx, "stock", "e-1", base); err != nil {
		t.Fatal(err)
	}
	resolved := addReview(t, s, o, 0, "resolved", base)
	if _, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: resolved.ID, At: base, By: "storetest"}); err != nil {
		t.Fatal(err)
	}

	is := func(want error) func(error) bool { return func(err error) bool { return errors.Is(err, want) } }
	conflict := func(err error) bool { return lapse.ErrorCode(err) == lapse.ECONFLICT }
	notCreated := func(created bool, err error) error {
		if err == nil && created {
			return errors.New("created it again")
		}
		return err
	}
	refusals := []struct {
		name string
		ok   func(error) bool
		call func(tx lapse.Store) error
	}{
		{"stock short", is(lapse.ErrStockShort), func(tx lapse.Store) error {
			return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 2}}, At: base})
		}},
		{"stock not found", is(lapse.ErrStockNotFound), func(tx lapse.Store) error {
			return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockRelease, Lines: []lapse.Item{{SKU: "nope", Qty: 1}}, At: base})
		}},
		{"stock reserved", is(lapse.ErrStockReserved), func(tx lapse.Store) error {
			if err := tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}}, At: base}); err != nil {
				return err
			}
			_, err := tx.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: 0, At: base})
			return err
		}},
		{"coupon exists", is(lapse.ErrCouponExists), func(tx lapse.Store) error {
			_, err := tx.CouponCreate(ctx, &lapse.CouponCreateParams{Code: "TAKEN", At: base})
			return err
		}},
		{"coupon not found", is(lapse.ErrCouponNotFound), func(tx lapse.Store) error {
			_, err := tx.CouponMove(ctx, &lapse.CouponMoveParams{Code: "NOPE", OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponLock, At: base})
			return err
		}},
		{"coupon unavailable", is(lapse.ErrCouponUnavailable), func(tx lapse.Store) error {
			_, err := tx.CouponMove(ctx, &lapse.CouponMoveParams{Code: "TAKEN", OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponUnlock, At: base})
			return err
		}},
		{"order exists", is(nil), func(tx lapse.Store) error {
			_, created, err := tx.OrderCreate(ctx, newOrder("TR-1", base.Add(time.Hour), base))
			return notCreated(created, err)
		}},
		{"orders exist", conflict, func(tx lapse.Store) error {
			return tx.OrderCreateMany(ctx, []*lapse.OrderCreateParams{newOrder("TR-3", base.Add(time.Hour), base), newOrder("TR-1", base.Add(time.Hour), base)})
		}},
		{"transition stale", is(lapse.ErrStale), func(tx lapse.Store) error {
			p := plan(t, o, flows.Cancel, base)
			p.FromVersion++
			_, err := tx.OrderTransition(ctx, p)
			return err
		}},
		{"deadline stale", is(lapse.ErrStale), func(tx lapse.Store) error {
			_, err := tx.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version + 1,
				DeadlineAt: base.Add(2 * time.Hour), At: base})
			return err
		}},
		{"payment exists", is(nil), func(tx lapse.Store) error {
			_, created, err := tx.PaymentCreate(ctx, newPayment(o, "txn-tr", base))
			return notCreated(created, err)
		}},
		{"payment stale", is(lapse.ErrStale), func(tx lapse.Store) error {
			_, err := tx.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: lapse.PaymentRefunded, To: lapse.PaymentReview, At: base})
			return err
		}},
		{"payment not found", is(lapse.ErrPaymentNotFound), func(tx lapse.Store) error {
			_, err := tx.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID + 100, From: lapse.PaymentLate, To: lapse.PaymentReview, At: base})
			return err
		}},
		{"refund exists", is(nil), func(tx lapse.Store) error {
			_, created, err := tx.OrderRefundCreate(ctx, refund)
			return notCreated(created, err)
		}},
		{"refund stale", is(lapse.ErrStale), func(tx lapse.Store) error {
			_, err := tx.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: 1000, From: lapse.OrderRefundRequested, To: lapse.OrderRefundFailed, At: base})
			return err
		}},
		{"member exists", is(nil), func(tx lapse.Store) error {
			_, created, err := tx.GroupMemberAdd(ctx, newMember(o, "u1"))
			return notCreated(created, err)
		}},
		{"member key taken", conflict, func(tx lapse.Store) error {
			m := newMember(g, "u2")
			m.Key = newMember(o, "u1").Key
			_, _, err := tx.GroupMemberAdd(ctx, m)
			return err
		}},
		{"member stale", is(lapse.ErrStale), func(tx lapse.Store) error {
			_, err := tx.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: 1000, From: lapse.ChargePending, To: lapse.ChargeCharging, At: base})
			return err
		}},
		{"cards exist", is(nil), func(tx lapse.Store) error {
			_, created, err := tx.CardIssue(ctx, newCards(o, 1))
			return notCreated(created, err)
		}},
		{"cards of no order", is(lapse.ErrOrderNotFound), func(tx lapse.Store) error {
			p := newCards(o, 1)
			p.OrderID += 1000
			for _, c := range p.Cards {
				c.OrderID = p.OrderID
			}
			_, _, err := tx.CardIssue(ctx, p)
			return err
		}},
		{"card used up", is(lapse.ErrStale), func(tx lapse.Store) error {
			_, err := tx.CardUse(ctx, visit(cards[0].ID))
			return err
		}},
		{"card not found", is(lapse.ErrCardNotFound), func(tx lapse.Store) error {
			_, err := tx.CardUse(ctx, visit(cards[1].ID+1000))
			return err
		}},
		{"card visit key taken", is(lapse.ErrCardVisitExists), func(tx lapse.Store) error {
			_, err := tx.CardUse(ctx, &lapse.CardUseParams{CardID: cards[1].ID, Key: "visit-tr", At: base})
			return err
		}},
		{"effect claimed", is(nil), func(tx lapse.Store) error {
			first, err := tx.EffectClaim(ctx, "stock", "e-1", base)
			return notCreated(first, err)
		}},
		{"lease lost", is(lapse.ErrLeaseLost), func(tx lapse.Store) error {
			_, err := tx.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: ds[0].ID, Owner: "other", Attempt: ds[0].Attempts,
				Status: lapse.DeliveryDone, At: base, Record: lapse.DeliveryAttempt{Worker: "other", StartedAt: base, Outcome: lapse.OutcomeOK}})
			return err
		}},
		{"retry of a pending delivery", conflict, func(tx lapse.Store) error {
			_, err := tx.DeliveryRetry(ctx, &lapse.DeliveryRetryParams{ID: ds[0].ID, At: base})
			return err
		}},
		{"retry of no delivery", is(lapse.ErrDeliveryNotFound), func(tx lapse.Store) error {
			_, err := tx.DeliveryRetry(ctx, &lapse.DeliveryRetryParams{ID: ds[0].ID + 1000, At: base})
			return err
		}},
		{"review resolved", is(lapse.ErrReviewResolved), func(tx lapse.Store) error {
			_, err := tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: resolved.ID, At: base, By: "storetest"})
			return err
		}},
		{"review not found", is(lapse.ErrReviewNotFound), func(tx lapse.Store) error {
			_, err := tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: resolved.ID + 1000, At: base, By: "storetest"})
			return err
		}},
	}
	err = s.Tx(ctx, func(tx lapse.Store) error {
		for _, r := range refusals {
			if err := r.call(tx); !r.ok(err) {
				t.Errorf("%s = %v", r.name, err)
			}
		}
		_, _, err := tx.OrderCreate(ctx, newOrder("TR-2", base.Add(time.Hour), base))
		return err
	})
	if err != nil {
		t.Fatalf("Tx after refusals = %v, want it to commit", err)
	}
	mustGet(t, s, "TR-2")
	if _, err := s.OrderGet(ctx, "TR-3"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("a refused bulk create wrote TR-3: %v", err)
	}
	if st := stockOf(t, s, "tea"); st.OnHand != 1 || st.Reserved != 1 {
		t.Errorf("tea = %+v, want the reserve that passed and no refused change", st)
	}
	if got := mustGet(t, s, "TR-1"); got.Version != o.Version || got.State != o.State {
		t.Errorf("refused changes moved TR-1 to %s v%d", got.State, got.Version)
	}
	if c, err := s.CardGet(ctx, cards[1].ID); err != nil || c.Used != 0 {
		t.Errorf("card of a refused visit = %+v, %v; want it unused", c, err)
	}
}

// testTxPanic: a panic in fn rolls the transaction back and panics on, and
// gives back what the transaction held: done more times than any pool has
// connections (or SQLite has writers), later work still gets through.
func testTxPanic(t *testing.T, s lapse.Store) {
	for i := range 20 {
		no := orderNo("TP", i)
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("Tx recovered %v, want the panic of fn", r)
				}
			}()
			_ = s.Tx(ctxT(t), func(tx lapse.Store) error {
				if _, _, err := tx.OrderCreate(ctxT(t), newOrder(no, base.Add(time.Hour), base)); err != nil {
					t.Error(err)
				}
				panic("boom")
			})
		}()
		if _, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Fatalf("order written in a panicking Tx: %v", err)
		}
	}
	mustCreate(t, s, "TP-after", base.Add(time.Hour), base)
}
