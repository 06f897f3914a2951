package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testPayRacesClose pays due orders while two claimers, as two processes
// would, close them: each order is PAID by its payment or CLOSED once,
// never both, and carries the log row and the event of that one
// transition only (S2, S6). A payment that lost writes nothing.
func testPayRacesClose(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	const n = 60
	deadline, paidAt, now := base.Add(30*time.Minute), base.Add(time.Minute), base.Add(time.Hour)
	var orders []*lapse.Order
	for i := range n {
		orders = append(orders, mustCreate(t, s, orderNo("PRC", i), deadline, base))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var paid sync.Map // order id → the payment's txn
	for i, o := range orders {
		wg.Go(func() {
			p := appliedPayment(t, o, fmt.Sprintf("txn-prc-%d", i), paidAt)
			<-start
			_, created, err := s.PaymentCreate(ctx, p)
			switch {
			case errors.Is(err, lapse.ErrStale):
			case err != nil:
				t.Errorf("PaymentCreate of %s: %v", o.OrderNo, err)
			case created:
				paid.Store(o.ID, p.Payment.TxnID)
			}
		})
	}
	var closed sync.Map // order id → times closed
	giveUp := time.Now().Add(30 * time.Second)
	for range 2 {
		wg.Go(func() {
			<-start
			for time.Now().Before(giveUp) {
				var applied []int64
				err := s.Tx(ctx, func(tx lapse.Store) error {
					due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{"checkout"}, Limit: 7})
					if err != nil {
						return err
					}
					var ps []*lapse.OrderTransitionParams
					for _, o := range due {
						p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredBySweep, Deadline: true})
						if err != nil {
							return err
						}
						ps = append(ps, p)
					}
					applied, err = tx.OrderTransitionMany(ctx, ps)
					return err
				})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				for _, id := range applied {
					c, _ := closed.LoadOrStore(id, new(atomic.Int32))
					c.(*atomic.Int32).Add(1)
				}
				if len(applied) == 0 {
					if left, err := s.OrderCountDue(ctx, now); err != nil || left == 0 {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	npaid := 0
	paid.Range(func(any, any) bool { npaid++; return true })
	t.Logf("%d of %d orders paid, the rest closed", npaid, n)
	for _, o := range orders {
		got := mustGet(t, s, o.OrderNo)
		txn, isPaid := paid.Load(o.ID)
		c, isClosed := closed.Load(o.ID)
		trs, err := s.TransitionList(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.OutboxList(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		types := map[string]int{}
		for _, ev := range evs {
			types[ev.Type]++
		}
		pays, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case isPaid && isClosed:
			t.Errorf("%s: paid by %v and closed", o.OrderNo, txn)
		case isPaid && (got.State != flows.Paid || len(pays) != 1 || types[flows.EventOrderPaid] != 1 || types[flows.EventOrderClosed] != 0):
			t.Errorf("%s paid by %v: %s, %d payments, events %v", o.OrderNo, txn, got.State, len(pays), types)
		case isClosed && (got.State != flows.Closed || c.(*atomic.Int32).Load() != 1 || len(pays) != 0 ||
			types[flows.EventOrderClosed] != 1 || types[flows.EventOrderPaid] != 0):
			t.Errorf("%s closed %d times: %s, %d payments, events %v", o.OrderNo, c.(*atomic.Int32).Load(), got.State, len(pays), types)
		case !isPaid && !isClosed:
			t.Errorf("%s neither paid nor closed: %s", o.OrderNo, got.State)
		}
		if len(trs) != 2 || got.Version != 2 {
			t.Errorf("%s: %d log rows at version %d; want the creation and one transition", o.OrderNo, len(trs), got.Version)
		}
	}
}

// testMovesOnce races the moves that money and goods hang on, eight at a
// time, each of one row: one coupon locked by eight orders, then freed and
// used by its holder at once (S4); one member's charge claimed (S7); one
// late payment's refund claimed (S3); one effect claimed with the stock it
// gives back (S4, S5). Each happens once.
func testMovesOnce(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	const n = 8
	race := func(what string, fn func(i int) error) (won []int) {
		t.Helper()
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range n {
			wg.Go(func() {
				<-start
				err := fn(i)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, i)
				} else if code := lapse.ErrorCode(err); !errors.Is(err, lapse.ErrStale) && code != lapse.ECONFLICT {
					t.Errorf("%s %d: %v", what, i, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Errorf("%s: %v of %d at once succeeded; want one", what, won, n)
		}
		return won
	}

	if _, err := s.CouponCreate(ctx, &lapse.CouponCreateParams{Code: "HOT", At: base}); err != nil {
		t.Fatal(err)
	}
	var orders []*lapse.Order
	for i := range n {
		orders = append(orders, mustCreate(t, s, orderNo("MO", i), base.Add(time.Hour), base))
	}
	move := func(o *lapse.Order, kind lapse.CouponMoveKind) error {
		_, err := s.CouponMove(ctx, &lapse.CouponMoveParams{Code: "HOT", OrderID: o.ID, OrderNo: o.OrderNo, Kind: kind, At: base.Add(time.Minute)})
		return err
	}
	won := race("coupon lock", func(i int) error { return move(orders[i], lapse.CouponLock) })
	if len(won) == 1 {
		holder := orders[won[0]]
		race("coupon unlock or consume", func(i int) error {
			return move(holder, []lapse.CouponMoveKind{lapse.CouponUnlock, lapse.CouponConsume}[i%2])
		})
	}
	if ms, err := s.CouponMoveList(ctx, "HOT"); err != nil || len(ms) != 2 {
		t.Errorf("journal of coupon HOT = %d moves, %v; want the lock and one release", len(ms), err)
	}

	m, _, err := s.GroupMemberAdd(ctx, newMember(orders[0], "u1"))
	if err != nil {
		t.Fatal(err)
	}
	race("member charge claim", func(int) error {
		_, err := s.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: m.ID, From: lapse.ChargePending, To: lapse.ChargeCharging,
			Attempt: true, At: base.Add(2 * time.Minute)})
		return err
	})
	if got, err := s.GroupMemberGet(ctx, m.Key); err != nil || got.Attempts != 1 || got.Status != lapse.ChargeCharging {
		t.Errorf("member after the race = %+v, %v; want charging, one attempt", got, err)
	}

	pay, _, err := s.PaymentCreate(ctx, newPayment(orders[1], "txn-mo", base.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	race("refund claim", func(int) error {
		_, err := s.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: lapse.PaymentLate, To: lapse.PaymentRefunding,
			At: base.Add(3 * time.Minute)})
		return err
	})

	if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "mo", OnHand: 10, At: base}); err != nil {
		t.Fatal(err)
	}
	lines := []lapse.Item{{SKU: "mo", Qty: 3}}
	if err := s.StockMove(ctx, &lapse.StockMoveParams{OrderID: orders[2].ID, Kind: lapse.StockReserve, Lines: lines, At: base}); err != nil {
		t.Fatal(err)
	}
	race("effect claim", func(int) error {
		return s.Tx(ctx, func(tx lapse.Store) error {
			first, err := tx.EffectClaim(ctx, "stock", "ev-mo", base.Add(4*time.Minute))
			if err != nil || !first {
				return cmpErr(err, lapse.ErrStale)
			}
			return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: orders[2].ID, Kind: lapse.StockRelease, Lines: lines, At: base.Add(4 * time.Minute)})
		})
	})
	if st, err := s.StockGet(ctx, "mo"); err != nil || st.Reserved != 0 || st.OnHand != 10 {
		t.Errorf("stock after the race = %+v, %v; want 10 on hand, none reserved", st, err)
	}
	if ms, err := s.StockMoveList(ctx, orders[2].ID); err != nil || len(ms) != 2 {
		t.Errorf("journal of %s = %d moves, %v; want the reserve and one release", orders[2].OrderNo, len(ms), err)
	}
}
