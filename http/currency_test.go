package http_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestCurrencyRefused: an order or a group buy in a code that is not an
// ISO 4217 currency in use (or is one without minor units) is a 400 naming
// the field and the value, and nothing is created.
func TestCurrencyRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []string{"ZZZ", "QQQ", "AAA", "XXX", "XTS", "XAU"} {
		p := e.do("POST", "/v1/orders", `{"order_no":"CUR-1","flow":"checkout","user_id":"u","amount":1999,"currency":"`+c+`","ttl":"15m"}`).
			want(t, http.StatusBadRequest).problem(t)
		if p.Field != "currency" || p.Code != lapse.EINVALID || !strings.Contains(p.Detail, `"`+c+`"`) {
			t.Errorf("order in %s: %+v", c, p)
		}
		p = e.do("POST", "/v1/groups", `{"group_id":"CUR-G","organiser":"org","price":990,"currency":"`+c+`","ttl":"1h"}`).
			want(t, http.StatusBadRequest).problem(t)
		if p.Field != "currency" || !strings.Contains(p.Detail, `"`+c+`"`) {
			t.Errorf("group in %s: %+v", c, p)
		}
	}
	e.do("GET", "/v1/orders/CUR-1", "").want(t, http.StatusNotFound)
	e.do("GET", "/v1/groups/CUR-G", "").want(t, http.StatusNotFound)
	// A real one, without minor units (JPY), or with three (KWD).
	for _, c := range []string{"JPY", "KWD", "EUR"} {
		e.do("POST", "/v1/orders", `{"order_no":"CUR-`+c+`","flow":"checkout","user_id":"u","amount":1999,"currency":"`+c+`","ttl":"15m"}`).
			want(t, http.StatusCreated)
	}
}

// TestPaymentCallbackUnknownCurrency: a verified callback for a payment in
// a code Lapse does not take is not refused, which would leave captured
// money off the books while the provider sends it for ever: it is recorded
// in review, as any payment in another currency than its order's, and
// acknowledged. So is one in a code that is not even three capital
// letters (TestPaymentCallbackVerifiedOdd).
func TestPaymentCallbackUnknownCurrency(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"CUR-P","flow":"checkout","user_id":"u","amount":1999,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	now := e.clock.Now()
	for i, c := range []string{"ZZZ", "XXX", "USD"} {
		body := strings.Replace(noticeBody("CUR-P", "txn-cur-"+c, 1999, now), `"currency":"CNY"`, `"currency":"`+c+`"`, 1)
		if r := e.callback(body, now); r.status != http.StatusOK || string(r.body) != `{"status":"ok"}`+"\n" {
			t.Errorf("callback in %s: %d %s", c, r.status, r.body)
		}
		var pays struct{ Payments []lapse.Payment }
		e.do("GET", "/v1/orders/CUR-P/payments", "").want(t, http.StatusOK).decode(t, &pays)
		if len(pays.Payments) != i+1 {
			t.Fatalf("after the callback in %s: %+v", c, pays.Payments)
		}
		if p := pays.Payments[i]; p.Status != lapse.PaymentReview || p.Currency != c || !strings.Contains(p.Reason, c) {
			t.Errorf("the payment in %s: %+v", c, p)
		}
	}
	var o lapse.Order
	e.do("GET", "/v1/orders/CUR-P", "").want(t, http.StatusOK).decode(t, &o)
	if o.State != "UNPAID" {
		t.Errorf("payments in other currencies moved the order to %s", o.State)
	}
	body := strings.Replace(noticeBody("CUR-P", "txn-cur-lower", 1999, now), `"currency":"CNY"`, `"currency":"cny"`, 1)
	if r := e.callback(body, now); r.status != http.StatusOK {
		t.Errorf("callback in cny: %d %s", r.status, r.body)
	}
	var pays struct{ Payments []lapse.Payment }
	e.do("GET", "/v1/orders/CUR-P/payments", "").want(t, http.StatusOK).decode(t, &pays)
	if n := len(pays.Payments); n != 4 || pays.Payments[3].Status != lapse.PaymentReview || !strings.Contains(pays.Payments[3].Reason, `"cny"`) {
		t.Errorf("after the callback in cny: %+v", pays.Payments)
	}
}
