package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/webhook"
)

// deadReason is a dead delivery's review reason as the deliverer writes it
// (engine/deliverer.go, die).
func deadReason(id int64, event, sub string, unknown bool, attempts int, lastError string) string {
	why := "ran out of retries"
	if unknown {
		why = "ran out of retries with its last outcome unknown"
	}
	return lapse.CleanReason(fmt.Sprintf("delivery %d of %s to %s %s after %d attempts: %s", id, event, sub, why, attempts, lastError))
}

// refusedReason is the review reason of a delivery its subscriber refused
// (engine/deliverer.go, die): it dies at that attempt.
func refusedReason(id int64, event, sub string, attempt int, lastError string) string {
	return lapse.CleanReason(fmt.Sprintf("delivery %d of %s to %s was refused at attempt %d: %s", id, event, sub, attempt, lastError))
}

// payReason is a payment review's reason as the payment path writes it
// (engine/payment.go, paymentReview).
func payReason(txn string, amount int64, why string) string {
	return lapse.CleanReason(fmt.Sprintf("payment %s of sandbox (%s) is in review: %s", txn, lapse.Money(amount, "CNY"), why))
}

// portError is the error a real port (or webhook sink) returns for one
// delivery to a service that answers with h, as the deliverer records it.
// The read timeout is one that an answer meets even on a loaded machine:
// a miss would make the error a timeout's.
func portError(t *testing.T, sub string, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return deliverTo(t, sub, srv.URL, 30*time.Second)
}

// timeoutError is the error of a delivery to a service that takes the
// request and never answers: a short read timeout passes.
func timeoutError(t *testing.T, sub string) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release) // first: the server can then close
	return deliverTo(t, sub, srv.URL, 50*time.Millisecond)
}

func deliverTo(t *testing.T, sub, url string, readTimeout time.Duration) string {
	t.Helper()
	d := &lapse.Delivery{ID: 7, EventID: "01JEVENT", EventType: "order.paid", OrderNo: "A-1", Subscriber: sub,
		Event: &lapse.OutboxEvent{ID: "01JEVENT", Type: "order.paid", OrderNo: "A-1", Payload: []byte(`{}`)}}
	var h lapse.Handler
	var err error
	if sub == "webhook" {
		h, err = webhook.New(webhook.Config{URL: url, Secret: "0123456789abcdef0123456789abcdef", ReadTimeout: readTimeout})
	} else {
		h, err = port.New(sub, port.Config{URL: url, ReadTimeout: readTimeout})
	}
	if err != nil {
		t.Fatal(err)
	}
	err = h.Deliver(context.Background(), d)
	if err == nil {
		t.Fatalf("delivery to %s succeeded", sub)
	}
	return lapse.Reason(err)
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { http.Error(w, body, code) }
}

// TestCategorize: each category from the reasons the engine writes, with
// the errors real ports and sinks return.
func TestCategorize(t *testing.T) {
	t.Parallel()
	membership, groupbuy, checkout := flows.Membership(), flows.Groupbuy(), flows.Checkout()
	closed := "http://" + testenv.Refused(t)

	unavailable := portError(t, "stock-port", status(503, "maintenance"))
	timeout := timeoutError(t, "coupon-port")
	refusedPort := deliverTo(t, "coupon-port", closed, 30*time.Second)
	gone := portError(t, "stock-port", status(422, "unknown sku"))
	noStock := portError(t, "stock-port", status(422, "out of stock: sku-1"))
	hook := portError(t, "webhook", status(500, "boom"))
	hookSlow := timeoutError(t, "webhook")
	cardPort := portError(t, "card-port", status(503, ""))

	for _, c := range []struct {
		name string
		f    failure
		want string
	}{
		{"card service down through the schedule", failure{Reason: deadReason(3, flows.EventMembershipPaid, engine.IssueSubscriber, false, 6, cardPort),
			Flow: membership, State: flows.ManualReview}, catCardIssueFailed},
		{"card issuer refused", failure{Reason: refusedReason(3, flows.EventMembershipPaid, engine.IssueSubscriber, 1,
			"refused for good: metadata.cards[0].product: must be 1 to 64 bytes"), Flow: membership, State: flows.ManualReview}, catCardIssueFailed},
		{"revoke failed", failure{Reason: deadReason(9, flows.EventMembershipRefunding, engine.RevokeSubscriber, false, 30, cardPort),
			Flow: membership, State: flows.MembershipRefunding}, catCardIssueFailed},
		{"late payment's refund never finished", failure{Reason: deadReason(5, lapse.EventPaymentLate, engine.RefundSubscriber, false, 10,
			"refund re_1 of payment txn-9 is still processing at sandbox"), Flow: checkout, State: flows.Closed}, catRefundFailed},
		{"merchant refund, provider down", failure{Reason: deadReason(8, flows.EventOrderRefunding, engine.RefundSubscriber, false, 10,
			"sandbox: simulated gateway failure; nothing was done"), Flow: checkout, State: flows.Refunding}, catRefundFailed},
		{"refund refused by the provider", failure{Reason: payReason("txn-4", 1000,
			"refund refused: refused for good: sandbox refused refund re_4 of payment txn-4 (status \"failed\")"), Flow: checkout, State: flows.Closed},
			catProviderRefused},
		{"refund with no port to make it", failure{Reason: payReason("txn-5", 1000,
			"refund refused: refused for good: no payment provider port is configured for alipay")}, catProviderRefused},
		{"outside service refused for good", failure{Reason: refusedReason(11, "order.paid", "coupon-port", 1, gone), Outcome: lapse.OutcomeRefused},
			catProviderRefused},
		{"refused, written before refusals said so", failure{Reason: deadReason(11, "order.paid", "coupon-port", false, 1, gone),
			Outcome: lapse.OutcomeRefused}, catProviderRefused},
		{"amount mismatch", failure{Reason: payReason("txn-1", 900, "the payment is 900 CNY; order A-1 is 1000 CNY"), Flow: checkout, State: flows.Unpaid},
			catCallbackMismatch},
		{"merchant mismatch", failure{Reason: payReason("txn-2", 1000, `the payment was made to merchant "m-2", not "m-1"`)}, catCallbackMismatch},
		{"merchant refund reported for another amount", failure{Reason: "refund k-1 of order A-1 (4.00 CNY) is in review: sandbox reports refund k-1 " +
			"(re-k-1) succeeded for 10.00 CNY; Lapse asked for 4.00 CNY; an operator settles it as succeeded or failed", Flow: checkout,
			State: flows.Refunding}, catCallbackMismatch},
		{"refund Lapse never asked for", failure{Reason: "refund lapse-unasked-stripe-re_9 of order A-2 (3.00 CNY) is in review: stripe reports " +
			"refund re_9 of payment pi_2 done, 3.00 CNY refunded; Lapse asked for no such refund; an operator settles it as succeeded or failed"},
			catCallbackMismatch},
		{"payment status given", failure{Reason: "payment under review", PaymentStatus: lapse.PaymentReview,
			PaymentReason: "the callback names no seller"}, catCallbackMismatch},
		{"stock service out of stock", failure{Reason: refusedReason(12, "order.paid", "stock-port", 1, noStock)}, catStockShort},
		{"stock ledger short", failure{Reason: deadReason(13, flows.EventOrderPaid, engine.StockSubscriber, false, 20,
			`not enough stock for sku "A": 0 reserved and 0 on hand, 1 to consume`)}, catStockShort},
		{"service answered 503", failure{Reason: deadReason(14, "order.paid", "stock-port", false, 6, unavailable)}, catPortUnreachable},
		{"connection refused", failure{Reason: deadReason(15, "order.paid", "coupon-port", false, 6, refusedPort)}, catPortUnreachable},
		{"breaker open", failure{Reason: deadReason(16, "order.paid", "stock-port", false, 6,
			`port "stock-port": deliver 01JEVENT: not sent: port: circuit breaker open`)}, catPortUnreachable},
		{"read timeout, outcome unknown", failure{Reason: deadReason(17, "order.paid", "coupon-port", true, 6, timeout)}, catPortTimeout},
		{"unknown flag on the delivery", failure{Subscriber: "stock-port", Error: "port \"stock-port\": query 01JEVENT: HTTP 400 Bad Request",
			Unknown: true, Reason: "delivery 18 of order.paid to stock-port …"}, catPortTimeout},
		{"webhook died", failure{Reason: deadReason(19, "order.closed", "webhook", false, 6, hook)}, catNotificationFailed},
		{"webhook timed out", failure{Reason: deadReason(20, "order.closed", "webhook", true, 6, hookSlow)}, catNotificationFailed},
		{"broker", failure{Reason: deadReason(21, "order.paid", "nats", false, 6,
			"nats: publish event 01JEVENT to lapse.order.paid: no PubAck within the publish timeout")}, catNotificationFailed},
		{"admin notification", failure{Reason: deadReason(22, flows.EventGroupFailed, "admin-notify", false, 6, unavailable)}, catNotificationFailed},
		{"group buy failed", failure{Reason: "2 of 3 charges failed: u2: sandbox: charge: the payment method was declined; retries exhausted",
			Flow: groupbuy, State: flows.GroupFailed, Event: flows.Fail}, catGroupFailed},
		{"settlement died", failure{Reason: deadReason(23, flows.EventGroupClosed, engine.SettleSubscriber, false, 6, "database is locked")},
			catGroupFailed},
		{"membership refund went partly", failure{Reason: "refunded 300 of 1000", Flow: membership, State: flows.ManualReview,
			Event: flows.RefundPartial}, catRefundFailed},
		{"membership in review without a review row", failure{Reason: "issuing failed 6 times: card service: 503 Service Unavailable",
			Flow: membership, State: flows.ManualReview, Event: flows.Escalate}, catCardIssueFailed},
		{"a webhook of a failed group is about the webhook", failure{Reason: deadReason(24, flows.EventGroupFailed, "webhook", false, 6, hook),
			Flow: groupbuy, State: flows.GroupFailed}, catNotificationFailed},
		{"unknown local subscriber", failure{Reason: deadReason(25, "order.paid", engine.CouponSubscriber, false, 20, "database is locked")}, catOther},
		{"nothing known", failure{Reason: "an operator opened it"}, catOther},
	} {
		if got := categorize(c.f); got != c.want {
			t.Errorf("%s: categorize(%q) = %s, want %s", c.name, c.f.Reason, got, c.want)
		}
	}
	for _, c := range categories {
		if _, ok := messages["cat."+c]; !ok {
			t.Errorf("category %s has no message", c)
		}
	}
}
