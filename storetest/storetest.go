// Package storetest is the conformance suite every lapse.Store must pass.
//
// A store package runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) lapse.Store { return openEmptyStore(t) })
//	}
//
// The factory must return a migrated, empty store that the test may use alone
// and that is closed when the test ends. A store that keeps the sandbox
// gateway's state (lapse.SandboxStore) runs RunSandbox too, whose factory
// returns two handles on one database, and one that keeps access records
// (lapse.AccessStore) runs RunAccess with the same factory as Run. The
// cases of an optional interface that a store may lack
// (lapse.OrderCreateWither) skip on a store without it, naming what it
// lacks.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// Factory opens a fresh, migrated, empty store for one test.
type Factory func(t *testing.T) lapse.Store

// Run runs the whole suite against the stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s lapse.Store)
	}{
		{"OrderCreate", testOrderCreate},
		{"OrderCreateLog", testOrderCreateLog},
		{"OrderCreateDuplicate", testOrderCreateDuplicate},
		{"OrderCreateRolledBack", testOrderCreateRolledBack},
		{"KeysExact", testKeysExact},
		{"OrderCreateRollsBackOnOutboxClash", testOrderCreateAtomic},
		{"OrderCreateMany", testOrderCreateMany},
		{"OrderCreateWith", testOrderCreateWith},
		{"OrderCreateWithConcurrent", testOrderCreateWithConcurrent},
		{"OrderGetNotFound", testOrderGetNotFound},
		{"OrderList", testOrderList},
		{"OrderTransition", testOrderTransition},
		{"OrderTransitionStale", testOrderTransitionStale},
		{"OrderTransitionAtomic", testOrderTransitionAtomic},
		{"OrderTransitionMany", testOrderTransitionMany},
		{"OrderDeadlineSet", testOrderDeadlineSet},
		{"OrderLock", testOrderLock},
		{"OrderClaimDue", testOrderClaimDue},
		{"OrderClaimDueConcurrent", testOrderClaimDueConcurrent},
		{"PayRacesClose", testPayRacesClose},
		{"MovesOnce", testMovesOnce},
		{"OrderNextDeadlineAndCountDue", testOrderNextDeadline},
		{"OrderDeadlineList", testOrderDeadlineList},
		{"OrderCountOpen", testOrderCountOpen},
		{"Times", testTimes},
		{"TimeRange", testTimeRange},
		{"ServerTime", testServerTime},
		{"TxRollback", testTxRollback},
		{"TxNested", testTxNested},
		{"TxPanic", testTxPanic},
		{"TxRefusals", testTxRefusals},
		{"DeliveryFanOut", testDeliveryFanOut},
		{"OutboxSubscriberTwice", testOutboxSubscriberTwice},
		{"OutboxEventIDs", testOutboxEventIDs},
		{"OutboxBadEventID", testOutboxBadEventID},
		{"OutboxBadPayload", testOutboxBadPayload},
		{"OutboxLongNames", testOutboxLongNames},
		{"OutboxRelays", testOutboxRelays},
		{"OutboxOrder", testOutboxOrder},
		{"OutboxPrune", testOutboxPrune},
		{"OutboxPruneConcurrent", testOutboxPruneConcurrent},
		{"DeliveryClaim", testDeliveryClaim},
		{"DeliveryFinish", testDeliveryFinish},
		{"DeliveryDoneMany", testDeliveryDoneMany},
		{"DeliveryRenew", testDeliveryRenew},
		{"DeliveryUnfinished", testDeliveryUnfinished},
		{"DeliveryClaimConcurrent", testDeliveryClaimConcurrent},
		{"DeliveryClaimOrder", testDeliveryClaimOrder},
		{"DeliveryChain", testDeliveryChain},
		{"EffectClaim", testEffectClaim},
		{"Stock", testStock},
		{"StockLines", testStockLines},
		{"StockConcurrent", testStockConcurrent},
		{"Coupon", testCoupon},
		{"CouponHolder", testCouponHolder},
		{"LedgerCountHeld", testLedgerCountHeld},
		{"LedgerInTx", testLedgerInTx},
		{"PaymentCreate", testPaymentCreate},
		{"PaymentCreateConcurrent", testPaymentCreateConcurrent},
		{"PaymentApply", testPaymentApply},
		{"PaymentApplyConcurrent", testPaymentApplyConcurrent},
		{"PaymentUpdate", testPaymentUpdate},
		{"PaymentReview", testPaymentReview},
		{"PaymentList", testPaymentList},
		{"HeldPayment", testHeldPayment},
		{"HeldPaymentCreateConcurrent", testHeldPaymentCreateConcurrent},
		{"PaymentHeld", testPaymentHeld},
		{"OrderRefund", testOrderRefund},
		{"OrderRefundReview", testOrderRefundReview},
		{"GroupMember", testGroupMember},
		{"GroupMemberConcurrent", testGroupMemberConcurrent},
		{"GroupMemberInTx", testGroupMemberInTx},
		{"GroupMemberGetByTxn", testGroupMemberGetByTxn},
		{"GroupMemberCaptured", testGroupMemberCaptured},
		{"ChargeSaltKeep", testChargeSaltKeep},
		{"Card", testCard},
		{"CardOrder", testCardOrder},
		{"CardConcurrent", testCardConcurrent},
		{"CardInTx", testCardInTx},
		{"CardVisit", testCardVisit},
		{"CardVisitConcurrent", testCardVisitConcurrent},
		{"ReviewCreate", testReviewCreate},
		{"ReviewResolve", testReviewResolve},
		{"ReviewList", testReviewList},
		{"ReviewListPaging", testReviewListPaging},
		{"ReviewNote", testReviewNote},
		{"ReviewResolveConcurrent", testReviewResolveConcurrent},
		{"ReviewOnce", testReviewOnce},
		{"ReviewOnceConcurrent", testReviewOnceConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore(t))
		})
	}
}

// base is the time every suite test starts from.
var base = time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newOrder builds the create params of an UNPAID checkout order, the way the
// engine does.
func newOrder(orderNo string, deadline time.Time, now time.Time) *lapse.OrderCreateParams {
	req := &lapse.OrderCreate{
		OrderNo: orderNo, Flow: "checkout", UserID: "u-" + orderNo[len(orderNo)-1:], Amount: 1999, Currency: "CNY",
		Items: []lapse.Item{{SKU: "sku-1", Qty: 2}}, Coupon: "", DeadlineAt: &deadline,
		Metadata: json.RawMessage(`{"b": 1, "a": [true, null]}`),
	}
	o := &lapse.Order{
		OrderNo: req.OrderNo, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &deadline,
		Amount: req.Amount, Currency: req.Currency, UserID: req.UserID, Items: req.Items,
		Metadata: req.Metadata, Version: 1, CreatedAt: now, UpdatedAt: now, RequestHash: req.Fingerprint(),
	}
	return &lapse.OrderCreateParams{
		Order:  o,
		Log:    lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, Actor: "storetest", CreatedAt: now},
		Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)},
	}
}

func mustCreate(t *testing.T, s lapse.Store, orderNo string, deadline, now time.Time) *lapse.Order {
	t.Helper()
	o, created, err := s.OrderCreate(ctxT(t), newOrder(orderNo, deadline, now))
	if err != nil || !created {
		t.Fatalf("OrderCreate(%s) = created %v, %v", orderNo, created, err)
	}
	return o
}

func mustGet(t *testing.T, s lapse.Store, orderNo string) *lapse.Order {
	t.Helper()
	o, err := s.OrderGet(ctxT(t), orderNo)
	if err != nil {
		t.Fatalf("OrderGet(%s): %v", orderNo, err)
	}
	return o
}

func plan(t *testing.T, o *lapse.Order, ev lapse.Event, now time.Time) *lapse.OrderTransitionParams {
	t.Helper()
	p, err := flows.Checkout().Plan(o, lapse.Firing{Event: ev, Now: now, FiredBy: lapse.FiredByApp, Actor: "storetest", Reason: "test"})
	if err != nil {
		t.Fatalf("Plan(%s, %s): %v", o.OrderNo, ev, err)
	}
	return p
}

func counts(t *testing.T, s lapse.Store, o *lapse.Order) (transitions, events int) {
	t.Helper()
	trs, err := s.TransitionList(ctxT(t), o.ID)
	if err != nil {
		t.Fatalf("TransitionList: %v", err)
	}
	evs, err := s.OutboxList(ctxT(t), o.ID)
	if err != nil {
		t.Fatalf("OutboxList: %v", err)
	}
	return len(trs), len(evs)
}

func orderNo(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

func timeEq(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
