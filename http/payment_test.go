package http_test

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/payment"
)

// closedProvider is a provider port whose payments are all closed unpaid.
type closedProvider struct{}

func (closedProvider) Charge(context.Context, *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return nil, lapse.ErrRefused
}
func (closedProvider) Refund(context.Context, *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	return nil, lapse.ErrRefused
}
func (closedProvider) RefundQuery(context.Context, string) (*lapse.ProviderRefund, error) {
	return nil, lapse.ErrProviderNotFound
}
func (closedProvider) Query(context.Context, string) (*lapse.ProviderPayment, error) {
	return nil, lapse.ErrProviderNotFound
}
func (closedProvider) Close(_ context.Context, no string) (*lapse.ProviderPayment, error) {
	return &lapse.ProviderPayment{OrderNo: no, Status: lapse.ProviderClosed}, nil
}

func readResponse(t *testing.T, res *http.Response) *response {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}
}

// decode decodes a JSON answer into v.
func (r *response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode: %v; body: %s", err, r.body)
	}
}

var callbackScheme = &payment.HMAC{Provider: "hmac", Secrets: [][]byte{[]byte("callback-secret")}}

func paymentEnv(t *testing.T) *env {
	return newEnvWith(t, options{
		cfg: lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}},
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"hmac": closedProvider{}}}
		},
	})
}

// callback posts a payment callback signed at the env's clock, or at signAt.
func (e *env) callback(body string, signAt time.Time) *response {
	e.t.Helper()
	return e.callbackTampered(body, signAt, false)
}

// callbackTampered posts a payment callback signed at signAt and then,
// when tamper is set, changed by a byte (1999 made 1990).
func (e *env) callbackTampered(body string, signAt time.Time, tamper bool) *response {
	e.t.Helper()
	sig := callbackScheme.Sign([]byte(body), signAt)
	if tamper {
		body = strings.Replace(body, "1999", "1990", 1)
	}
	req, err := http.NewRequest("POST", e.url+"/v1/payments/hmac/callback", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, sig)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return readResponse(e.t, res)
}

func noticeBody(orderNo, txn string, amount any, paidAt time.Time) string {
	return fmt.Sprintf(`{"kind":"paid","txn_id":%q,"order_no":%q,"amount":%v,"currency":"CNY","merchant":"m-1","paid_at":%q}`,
		txn, orderNo, amount, paidAt.Format(time.RFC3339Nano))
}

func TestPaymentCallback(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"CB-1","flow":"checkout","user_id":"u","amount":1999,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	now := e.clock.Now()

	// Refusals: each is answered in the scheme's format and changes nothing.
	good := noticeBody("CB-1", "txn-1", 1999, now)
	refusals := []struct {
		name   string
		body   string
		signAt time.Time
		tamper bool
		status int
	}{
		{"one changed byte", good, now, true, http.StatusUnauthorized},
		{"stale timestamp", good, now.Add(-6 * time.Minute), false, http.StatusUnauthorized},
		{"future timestamp", good, now.Add(6 * time.Minute), false, http.StatusUnauthorized},
		{"duplicate key", strings.Replace(good, `"amount":1999`, `"amount":1,"amount":1999`, 1), now, false, http.StatusBadRequest},
	}
	for _, c := range refusals {
		r := e.callbackTampered(c.body, c.signAt, c.tamper)
		if r.status != c.status || !strings.Contains(string(r.body), `"status":"error"`) {
			t.Errorf("%s: %d %s, want %d and an error ack", c.name, r.status, r.body, c.status)
		}
	}
	var pays struct{ Payments []lapse.Payment }
	e.do("GET", "/v1/orders/CB-1/payments", "").want(t, http.StatusOK).decode(t, &pays)
	if len(pays.Payments) != 0 {
		t.Fatalf("refused callbacks recorded payments: %+v", pays.Payments)
	}
	if !strings.Contains(e.logs.String(), "payment callback refused") {
		t.Error("refusals were not logged")
	}

	// The same callback 50 times at once: acknowledged each time, applied once.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if r := e.callback(good, now); r.status != http.StatusOK || string(r.body) != `{"status":"ok"}`+"\n" {
				t.Errorf("callback: %d %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	var o lapse.Order
	e.do("GET", "/v1/orders/CB-1", "").want(t, http.StatusOK).decode(t, &o)
	var trs struct{ Transitions []lapse.TransitionRecord }
	e.do("GET", "/v1/orders/CB-1/transitions", "").want(t, http.StatusOK).decode(t, &trs)
	e.do("GET", "/v1/orders/CB-1/payments", "").want(t, http.StatusOK).decode(t, &pays)
	if o.State != "PAID" || len(trs.Transitions) != 2 || len(pays.Payments) != 1 || pays.Payments[0].Status != lapse.PaymentApplied {
		t.Errorf("after 50 replays: %s, %d transitions, payments %+v", o.State, len(trs.Transitions), pays.Payments)
	}

	// Another amount than the order's: on the books for an operator (the
	// money was captured), acknowledged, the order untouched.
	if r := e.callback(noticeBody("CB-1", "txn-3", 1998, now), now); r.status != http.StatusOK {
		t.Errorf("mismatched callback: %d %s", r.status, r.body)
	}
	e.do("GET", "/v1/orders/CB-1/payments", "").want(t, http.StatusOK).decode(t, &pays)
	if len(pays.Payments) != 2 || pays.Payments[1].Status != lapse.PaymentReview || pays.Payments[1].Amount != 1998 {
		t.Errorf("after a mismatched payment: %+v", pays.Payments)
	}

	// Unknown provider: a problem naming the configured ones.
	p := e.do("POST", "/v1/payments/paypal/callback", good).want(t, http.StatusNotFound).problem(t)
	if !strings.Contains(p.Detail, "hmac") {
		t.Errorf("unknown provider problem: %+v", p)
	}
	// Oversize body: refused before verification.
	big := `{"pad":"` + strings.Repeat("x", lapsehttp.DefaultMaxBodyBytes) + `"}`
	if r := e.callback(big, now); r.status != http.StatusBadRequest {
		t.Errorf("oversize callback: %d %s", r.status, r.body)
	}
}

// TestPaymentCallbackVerifiedOdd: a callback whose signature verifies is a
// capture the provider made, so a field Lapse cannot take as it is never
// has it sent again until the provider gives up. A currency that is not
// three capital letters records the payment in review, in the currency as
// reported; an amount that is not a positive integer, a time that is not
// one, or a kind Lapse does not know puts the callback in review on its
// order, once however often it comes, with nothing recorded as money. Each
// is acknowledged. A callback that fails verification, or that cannot be
// read at all, keeps its error.
func TestPaymentCallbackVerifiedOdd(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"ODD-1","flow":"checkout","user_id":"u","amount":1999,"currency":"USD","ttl":"15m"}`).want(t, http.StatusCreated)
	now := e.clock.Now()
	at := fmt.Sprintf("%q", now.Format(time.RFC3339Nano))
	good := noticeBody("ODD-1", "txn-0", 1999, now)
	var pays struct{ Payments []lapse.Payment }
	payments := func() []lapse.Payment {
		t.Helper()
		e.do("GET", "/v1/orders/ODD-1/payments", "").want(t, http.StatusOK).decode(t, &pays)
		return pays.Payments
	}
	reviews := func() []lapse.Review {
		t.Helper()
		var list struct{ Reviews []lapse.Review }
		e.do("GET", "/v1/reviews?open=true", "").want(t, http.StatusOK).decode(t, &list)
		return list.Reviews
	}

	for i, cur := range []string{"usd", "US", "€", "", "USDT"} {
		txn := fmt.Sprintf("txn-cur-%d", i)
		body := strings.Replace(strings.Replace(good, `"currency":"CNY"`, fmt.Sprintf(`"currency":%q`, cur), 1), `"txn-0"`, `"`+txn+`"`, 1)
		for range 2 {
			if r := e.callback(body, now); r.status != http.StatusOK {
				t.Errorf("currency %q: %d %s, want it acknowledged", cur, r.status, r.body)
			}
		}
		ps := payments()
		if len(ps) != i+1 || ps[i].TxnID != txn || ps[i].Status != lapse.PaymentReview || ps[i].Currency != cur || ps[i].Amount != 1999 {
			t.Fatalf("after a payment in %q: %+v; want it recorded in review in %q", cur, ps, cur)
		}
	}

	odd := []struct{ name, body, says string }{
		{"a decimal amount", strings.Replace(good, `"amount":1999`, `"amount":19.99`, 1), "19.99"},
		{"an amount in a string", strings.Replace(good, `"amount":1999`, `"amount":"1999"`, 1), `"1999"`},
		{"an amount of zero", strings.Replace(good, `"amount":1999`, `"amount":0`, 1), "amount"},
		{"a negative amount", strings.Replace(good, `"amount":1999`, `"amount":-5`, 1), "-5"},
		{"no amount", strings.Replace(good, `"amount":1999,`, ``, 1), "amount"},
		{"a kind Lapse does not know", strings.Replace(good, `"kind":"paid"`, `"kind":"captured"`, 1), "captured"},
		{"a time that is not one", strings.Replace(good, at, `"2026-11-29 09:00:00"`, 1), "2026-11-29 09:00:00"},
		{"no time", strings.Replace(good, `,"paid_at":`+at, ``, 1), "paid_at"},
	}
	for i, c := range odd {
		body := strings.Replace(c.body, `"txn-0"`, fmt.Sprintf(`"txn-odd-%d"`, i), 1)
		for range 3 {
			if r := e.callback(body, now); r.status != http.StatusOK {
				t.Errorf("%s: %d %s, want it acknowledged", c.name, r.status, r.body)
			}
		}
		n := 0
		for _, rv := range reviews() {
			if rv.OrderNo == "ODD-1" && strings.Contains(rv.Reason, fmt.Sprintf("txn-odd-%d", i)) && strings.Contains(rv.Reason, c.says) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d open reviews of ODD-1 name it and %s, want 1: %+v", c.name, n, c.says, reviews())
		}
	}
	if ps := payments(); len(ps) != 5 {
		t.Errorf("callbacks that could not be read recorded money: %+v", ps)
	}

	// Not verified, or not readable at all: refused as before.
	for _, c := range []struct {
		name   string
		body   string
		tamper bool
		status int
	}{
		{"a changed byte and an odd currency", strings.Replace(good, `"CNY"`, `"usd"`, 1), true, http.StatusUnauthorized},
		{"not JSON", `{"kind":"paid"`, false, http.StatusBadRequest},
		{"no transaction", strings.Replace(good, `"txn_id":"txn-0",`, ``, 1), false, http.StatusBadRequest},
		{"no order", strings.Replace(good, `"order_no":"ODD-1",`, ``, 1), false, http.StatusBadRequest},
		{"a repeated key", strings.Replace(good, `"amount":1999`, `"amount":1,"amount":1999`, 1), false, http.StatusBadRequest},
	} {
		if r := e.callbackTampered(c.body, now, c.tamper); r.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
		}
	}
}

// TestPaymentCallbackConflicts: a signed callback that reuses a provider
// transaction id with another order or amount is acknowledged only once it
// is on an operator's desk, and pays nothing; a replay is a plain ok. A
// payment for a group buy, which takes no payments itself, is on the books
// in review, not refused for the provider to send for ever.
func TestPaymentCallbackConflicts(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	for _, no := range []string{"P-1", "P-2"} {
		e.do("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":500,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	}
	now := e.clock.Now()
	reviews := func() []lapse.Review {
		t.Helper()
		var rs struct{ Reviews []lapse.Review }
		e.do("GET", "/v1/reviews?open=true", "").want(t, http.StatusOK).decode(t, &rs)
		return rs.Reviews
	}
	for _, body := range []string{noticeBody("P-1", "tp-1", 500, now), noticeBody("P-1", "tp-1", 500, now)} {
		if r := e.callback(body, now); r.status != http.StatusOK || string(r.body) != `{"status":"ok"}`+"\n" {
			t.Fatalf("callback: %d %s", r.status, r.body)
		}
	}
	if rs := reviews(); len(rs) != 0 {
		t.Fatalf("a replay was put in review: %+v", rs)
	}

	// tp-1 again, for P-2, then for P-1 with another amount.
	e.callback(noticeBody("P-2", "tp-1", 500, now), now).want(t, http.StatusOK)
	e.callback(noticeBody("P-1", "tp-1", 999, now), now).want(t, http.StatusOK)
	var pays struct{ Payments []lapse.Payment }
	e.do("GET", "/v1/orders/P-2/payments", "").want(t, http.StatusOK).decode(t, &pays)
	var o lapse.Order
	e.do("GET", "/v1/orders/P-2", "").want(t, http.StatusOK).decode(t, &o)
	if len(pays.Payments) != 0 || o.State != "UNPAID" {
		t.Errorf("P-2 after a callback reusing tp-1: %s, payments %+v", o.State, pays.Payments)
	}
	rs := reviews()
	byOrder := map[string]string{}
	for _, r := range rs {
		byOrder[r.OrderNo] = r.Reason
	}
	if len(rs) != 2 || !strings.Contains(byOrder["P-2"], "tp-1") || !strings.Contains(byOrder["P-1"], "9.99 CNY") {
		t.Errorf("reviews after the conflicting callbacks: %+v", rs)
	}

	// A payment for a group buy.
	e.do("POST", "/v1/groups", `{"group_id":"G-1","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`).want(t, http.StatusCreated)
	if r := e.callback(noticeBody("G-1", "tg-1", 990, now), now); r.status != http.StatusOK {
		t.Errorf("callback for a group buy: %d %s", r.status, r.body)
	}
	e.do("GET", "/v1/orders/G-1/payments", "").want(t, http.StatusOK).decode(t, &pays)
	if len(pays.Payments) != 1 || pays.Payments[0].Status != lapse.PaymentReview || pays.Payments[0].Amount != 990 {
		t.Errorf("payments of G-1: %+v", pays.Payments)
	}
}

func TestPaymentIntentAPI(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"PI-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"1m"}`).want(t, http.StatusCreated)
	for body, field := range map[string]string{`{}`: "provider", `{"provider":"nope"}`: "provider"} {
		if p := e.do("POST", "/v1/orders/PI-1/payment-intents", body).want(t, http.StatusBadRequest).problem(t); p.Field != field {
			t.Errorf("POST payment-intents %s: %+v", body, p)
		}
	}
	var o lapse.Order
	e.do("POST", "/v1/orders/PI-1/payment-intents", `{"provider":"hmac"}`).want(t, http.StatusOK).decode(t, &o)
	if o.IntentAt == nil || o.IntentProvider != "hmac" || !o.DeadlineAt.Equal(start.Add(time.Minute+2*time.Minute)) {
		t.Errorf("after payment-intents: %+v", o)
	}
	var raw map[string]any
	e.do("GET", "/v1/orders/PI-1", "").want(t, http.StatusOK).decode(t, &raw)
	if raw["intent_provider"] != "hmac" {
		t.Errorf("GET order shows %v", raw)
	}
	e.do("GET", "/v1/orders/NOPE/payments", "").want(t, http.StatusNotFound)
}

func TestRefundAPI(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"RA-1","flow":"checkout","user_id":"u","amount":1000,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	e.do("POST", "/v1/orders/RA-1/refunds", `{"amount":100}`).want(t, http.StatusConflict) // not paid yet
	if r := e.callback(noticeBody("RA-1", "txn-ra", 1000, e.clock.Now()), e.clock.Now()); r.status != http.StatusOK {
		t.Fatalf("callback: %d %s", r.status, r.body)
	}
	if p := e.do("POST", "/v1/orders/RA-1/refunds", `{"reason":"x"}`).want(t, http.StatusBadRequest).problem(t); p.Field != "amount" {
		t.Errorf("refund without amount: %+v", p)
	}
	e.do("POST", "/v1/orders/RA-1/refunds", `{"amount":1001}`).want(t, http.StatusConflict)
	post := func(body, key string) *response {
		req, _ := http.NewRequest("POST", e.url+"/v1/orders/RA-1/refunds", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResponse(t, res)
	}
	// The header sent empty is no key of the caller's making: each retry
	// would be a refund of its own. It is refused and refunds nothing.
	for range 2 {
		if p := post(`{"amount":100}`, "").want(t, http.StatusBadRequest).problem(t); p.Field != "Idempotency-Key" {
			t.Errorf("refund with an empty Idempotency-Key: %+v", p)
		}
	}
	var first, again lapse.OrderRefund
	post(`{"amount":400,"reason":"broken lid"}`, "rk-1").want(t, http.StatusCreated).decode(t, &first)
	post(`{"amount":400,"reason":"broken lid"}`, "rk-1").want(t, http.StatusOK).decode(t, &again)
	if first.ID == 0 || again.ID != first.ID || first.Status != lapse.OrderRefundRequested || first.Key != "rk-1" || first.TxnID != "txn-ra" {
		t.Errorf("refund %+v, replayed %+v", first, again)
	}
	post(`{"amount":300}`, "rk-1").want(t, http.StatusConflict)
	post(`{"amount":400,"reason":"changed mind"}`, "rk-1").want(t, http.StatusConflict) // was 200, the first refund
	post(`{"amount":400}`, "rk-1").want(t, http.StatusConflict)
	var o lapse.Order
	e.do("GET", "/v1/orders/RA-1", "").want(t, http.StatusOK).decode(t, &o)
	var list struct{ Refunds []lapse.OrderRefund }
	e.do("GET", "/v1/orders/RA-1/refunds", "").want(t, http.StatusOK).decode(t, &list)
	if o.State != "REFUNDING" || len(list.Refunds) != 1 {
		t.Errorf("after the refund request: %s, %+v", o.State, list.Refunds)
	}
}

// alipayNotice is an Alipay asynchronous notification, built and signed by
// Alipay's published rules: every parameter but sign and sign_type with a
// value, names sorted, joined k=v with &, signed SHA256withRSA (PKCS #1
// v1.5) and base64; the body a form in Alipay's own, unsorted order.
type alipayNotice [][2]string

func (n alipayNotice) signed(t *testing.T, key *rsa.PrivateKey) string {
	t.Helper()
	var pairs []string
	for _, kv := range n {
		if kv[1] != "" {
			pairs = append(pairs, kv[0]+"="+kv[1])
		}
	}
	slices.SortFunc(pairs, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	digest := sha256.Sum256([]byte(strings.Join(pairs, "&")))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for _, kv := range append(n, [2]string{"sign", base64.StdEncoding.EncodeToString(sig)}, [2]string{"sign_type", "RSA2"}) {
		body = append(body, url.QueryEscape(kv[0])+"="+url.QueryEscape(kv[1]))
	}
	return strings.Join(body, "&")
}

const alipayAppID, alipaySellerID = "2021000000000001", "2088101106499364"

// alipayTrade is a TRADE_SUCCESS notification of order no, paid at paidAt,
// as Alipay sends it, with text as its subject, body and passback_params.
func alipayTrade(no, tradeNo, text string, paidAt time.Time) alipayNotice {
	cst := time.FixedZone("CST", 8*3600)
	return alipayNotice{
		{"gmt_create", paidAt.Add(-30 * time.Second).In(cst).Format(time.DateTime)}, {"charset", "utf-8"},
		{"seller_email", "merchant@example.com"}, {"subject", text}, {"body", text}, {"buyer_id", "2088102122524333"},
		{"invoice_amount", "88.80"}, {"notify_id", "2026112900222155830057591412345678"}, {"notify_type", "trade_status_sync"},
		{"trade_status", "TRADE_SUCCESS"}, {"receipt_amount", "88.80"}, {"buyer_pay_amount", "88.80"},
		{"app_id", alipayAppID}, {"seller_id", alipaySellerID}, {"gmt_payment", paidAt.In(cst).Format(time.DateTime)},
		{"notify_time", paidAt.Add(time.Second).In(cst).Format(time.DateTime)}, {"version", "1.0"},
		{"out_trade_no", no}, {"total_amount", "88.80"}, {"trade_no", tradeNo}, {"auth_app_id", alipayAppID},
		{"passback_params", url.QueryEscape(text)}, {"buyer_logon_id", "180****0062"}, {"point_amount", "0.00"},
	}
}

func (n alipayNotice) without(k string) alipayNotice {
	return slices.DeleteFunc(slices.Clone(n), func(kv [2]string) bool { return kv[0] == k })
}

// alipayEnv is an env that takes Alipay notifications signed by key.
func alipayEnv(t *testing.T, a payment.Alipay) (*env, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	a.Provider, a.AppID, a.PublicKey = "alipay", alipayAppID, &key.PublicKey
	return newEnvWith(t, options{cfg: lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"alipay": &a}}}), key
}

// alipayCallback posts body to the Alipay callback until it is answered
// success, as Alipay does, twice, and returns the order and its payments.
func (e *env) alipayCallback(no, body string) (*lapse.Order, []lapse.Payment) {
	e.t.Helper()
	for range 2 {
		r := e.doType("POST", "/v1/payments/alipay/callback", "application/x-www-form-urlencoded", body)
		if r.status != http.StatusOK || string(r.body) != "success" {
			e.t.Fatalf("%s: %d %s; logs:\n%s", no, r.status, r.body, e.logs.String())
		}
	}
	var o lapse.Order
	e.do("GET", "/v1/orders/"+no, "").want(e.t, http.StatusOK).decode(e.t, &o)
	var pays struct{ Payments []lapse.Payment }
	e.do("GET", "/v1/orders/"+no+"/payments", "").want(e.t, http.StatusOK).decode(e.t, &pays)
	return &o, pays.Payments
}

// TestAlipayCallback: genuine TRADE_SUCCESS notifications whose subject,
// body and passback_params hold '&', '=', '%', '+' and Chinese text pay
// their orders through POST /v1/payments/alipay/callback, and the payments
// are on the books.
func TestAlipayCallback(t *testing.T) {
	t.Parallel()
	e, key := alipayEnv(t, payment.Alipay{SellerID: alipaySellerID})
	for i, text := range []string{"满100元&立减=10元", "a=1&b=2", "Fish & Chips = 炸鱼薯条 + 可乐", "50% off %26 more + 10%"} {
		no, tradeNo := fmt.Sprintf("ALI-%d", i), fmt.Sprintf("20261129220014043300001215%02d", i)
		e.do("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":8880,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
		o, pays := e.alipayCallback(no, alipayTrade(no, tradeNo, text, start.Add(time.Minute)).signed(t, key))
		if o.State != "PAID" || len(pays) != 1 || pays[0].Status != lapse.PaymentApplied || pays[0].TxnID != tradeNo ||
			pays[0].Amount != 8880 || !pays[0].PaidAt.Equal(start.Add(time.Minute)) {
			t.Errorf("%q: order %s, payments %+v", text, o.State, pays)
		}
	}
}

// TestAlipayCallbackWithoutPaymentTime: a notification without gmt_payment
// is judged at its notify_time: in time it pays the order, after the
// deadline it is recorded late and the order is not paid.
func TestAlipayCallbackWithoutPaymentTime(t *testing.T) {
	t.Parallel()
	e, key := alipayEnv(t, payment.Alipay{SellerID: alipaySellerID})
	e.do("POST", "/v1/orders", `{"order_no":"ALI-T1","flow":"checkout","user_id":"u","amount":8880,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	o, pays := e.alipayCallback("ALI-T1", alipayTrade("ALI-T1", "2026112922001404330000121601", "满100元&立减=10元", start.Add(time.Minute)).
		without("gmt_payment").signed(t, key))
	if o.State != "PAID" || len(pays) != 1 || pays[0].Status != lapse.PaymentApplied || !pays[0].PaidAt.Equal(start.Add(time.Minute+time.Second)) {
		t.Errorf("in time: order %s, payments %+v", o.State, pays)
	}
	// Created in time, notified a second after the one-minute deadline.
	e.do("POST", "/v1/orders", `{"order_no":"ALI-T2","flow":"checkout","user_id":"u","amount":8880,"currency":"CNY","ttl":"1m"}`).want(t, http.StatusCreated)
	o, pays = e.alipayCallback("ALI-T2", alipayTrade("ALI-T2", "2026112922001404330000121602", "x", start.Add(time.Minute)).
		without("gmt_payment").signed(t, key))
	// Late, and in review: no port here can refund it.
	if o.State == "PAID" || len(pays) != 1 || pays[0].Status != lapse.PaymentReview || !strings.Contains(pays[0].Reason, "passed its deadline") {
		t.Errorf("late: order %s, payments %+v", o.State, pays)
	}
}

// TestAlipayCallbackSeller: seller_id is optional in Alipay's table. A
// notice whose seller_email is the configured one pays its order; one that
// names no seller is on the books for an operator, the order untouched.
func TestAlipayCallbackSeller(t *testing.T) {
	t.Parallel()
	e, key := alipayEnv(t, payment.Alipay{SellerEmail: "merchant@example.com"})
	e.do("POST", "/v1/orders", `{"order_no":"ALI-S1","flow":"checkout","user_id":"u","amount":8880,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	o, pays := e.alipayCallback("ALI-S1", alipayTrade("ALI-S1", "2026112922001404330000121701", "满100元&立减=10元", start.Add(time.Minute)).
		without("seller_id").signed(t, key))
	if o.State != "PAID" || len(pays) != 1 || pays[0].Status != lapse.PaymentApplied || pays[0].Merchant != "merchant@example.com" {
		t.Errorf("seller_email only: order %s, payments %+v", o.State, pays)
	}
	e.do("POST", "/v1/orders", `{"order_no":"ALI-S2","flow":"checkout","user_id":"u","amount":8880,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	o, pays = e.alipayCallback("ALI-S2", alipayTrade("ALI-S2", "2026112922001404330000121702", "x", start.Add(time.Minute)).
		without("seller_id").without("seller_email").signed(t, key))
	if o.State != "UNPAID" || len(pays) != 1 || pays[0].Status != lapse.PaymentReview || pays[0].Amount != 8880 ||
		!strings.Contains(pays[0].Reason, "names no seller") {
		t.Errorf("no seller: order %s, payments %+v", o.State, pays)
	}
}

// TestCallbackLogs: the log lines of a provider's callback say what it
// reports: a refund notice is a refund callback, never a payment one.
func TestCallbackLogs(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"CL-1","flow":"checkout","user_id":"u","amount":1999,"currency":"CNY","ttl":"15m"}`).want(t, http.StatusCreated)
	e.do("POST", "/v1/orders/CL-1/events", `{"event":"CANCEL"}`).want(t, http.StatusOK)
	now := e.clock.Now()
	// A payment for the closed order: late, to be refunded.
	e.callback(noticeBody("CL-1", "txn-cl", 1999, now), now).want(t, http.StatusOK)
	refund := func(txn string) string {
		return fmt.Sprintf(`{"kind":"refunded","txn_id":%q,"refund_id":"rf-cl","order_no":"CL-1","amount":1999,"currency":"CNY","merchant":"m-1","paid_at":%q}`,
			txn, now.Format(time.RFC3339Nano))
	}
	e.callback(refund("txn-cl"), now).want(t, http.StatusOK)
	e.callback(refund("txn-none"), now)
	var lines []string
	for line := range strings.Lines(e.logs.String()) {
		if strings.Contains(line, "callback") {
			lines = append(lines, line)
		}
	}
	for _, want := range []string{
		`msg="payment callback applied" provider=hmac kind=paid txn_id=txn-cl`,
		`msg="refund callback applied" provider=hmac kind=refunded txn_id=txn-cl order_no=CL-1 refund_id=rf-cl status=refunded`,
		`msg="refund callback not applied" provider=hmac kind=refunded txn_id=txn-none`,
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("no log line with %s in\n%s", want, strings.Join(lines, ""))
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "kind=refunded") && strings.Contains(l, "payment callback") {
			t.Errorf("a refund logged as a payment: %s", l)
		}
	}
}

// TestForgedCallbacksLogOnce: callbacks that anyone can send (not signed,
// or unreadable) are refused each time, and logged once per burst with how
// many more there were, not a line each; a signed callback that cannot be
// read is logged each time.
func TestForgedCallbacksLogOnce(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	now := e.clock.Now()
	body := noticeBody("FG-1", "txn-fg", 1999, now)
	for range 20 {
		e.callbackTampered(body, now, true).want(t, http.StatusUnauthorized)
		e.callback(body, now.Add(-time.Hour)).want(t, http.StatusUnauthorized)
	}
	if n := strings.Count(e.logs.String(), "payment callback refused"); n != 1 {
		t.Fatalf("40 forged callbacks logged %d refusals, want 1:\n%s", n, e.logs)
	}
	signed := strings.Replace(body, `"amount":1999`, `"amount":1,"amount":1999`, 1)
	for range 2 {
		e.callback(signed, now).want(t, http.StatusBadRequest)
	}
	if n := strings.Count(e.logs.String(), "payment callback refused"); n != 3 {
		t.Fatalf("2 signed unreadable callbacks after the forged ones: %d refusals logged, want 3:\n%s", n, e.logs)
	}
}

// stripeEvent is a Stripe event of type typ about object, created and
// signed at at, with the Stripe-Signature header by Stripe's published rule.
func stripeEvent(typ, object string, at time.Time) (string, string) {
	body := fmt.Sprintf(`{"id":"evt_%d_%s","object":"event","api_version":"2025-08-27.basil","created":%d,"data":{"object":%s},"livemode":true,"type":%q}`,
		at.UnixNano(), strings.ReplaceAll(typ, ".", "_"), at.Unix(), object, typ)
	m := hmac.New(sha256.New, []byte("whsec_http_dispute"))
	fmt.Fprintf(m, "%d.%s", at.Unix(), body)
	return body, fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(m.Sum(nil)))
}

// TestStripeDisputeCallback: a Stripe dispute's withdrawal, posted to the
// callback route twice as Stripe retries, is acknowledged and recorded once
// as a refund in review of the amount withdrawn, naming the dispute.
func TestStripeDisputeCallback(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{
		cfg: lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"stripe": &payment.Stripe{Provider: "stripe", Secrets: [][]byte{[]byte("whsec_http_dispute")}}}},
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"stripe": closedProvider{}}}
		},
	})
	e.do("POST", "/v1/orders", `{"order_no":"SD-1","flow":"checkout","user_id":"u","amount":1999,"currency":"USD","ttl":"15m"}`).want(t, http.StatusCreated)
	post := func(typ, object string) {
		t.Helper()
		body, sig := stripeEvent(typ, object, e.clock.Now())
		req, err := http.NewRequest("POST", e.url+"/v1/payments/stripe/callback", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(payment.StripeSignatureHeader, sig)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r := readResponse(t, res); r.status != http.StatusOK || !strings.Contains(string(r.body), `"received":true`) {
			t.Fatalf("%s: %d %s; logs:\n%s", typ, r.status, r.body, e.logs.String())
		}
	}
	e.clock.Advance(time.Second)
	post("payment_intent.succeeded", `{"id":"pi_SD1","object":"payment_intent","amount_received":1999,"currency":"usd","metadata":{"order_no":"SD-1"}}`)
	dispute := `{"id":"dp_SD1","object":"dispute","amount":1999,"charge":"ch_SD1","currency":"usd","payment_intent":"pi_SD1","reason":"fraudulent","status":"needs_response"}`
	e.clock.Advance(time.Minute)
	post("charge.dispute.funds_withdrawn", dispute)
	post("charge.dispute.funds_withdrawn", dispute)
	rs, err := e.engine.OrderRefunds(context.Background(), "SD-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Amount != 1999 || rs[0].Status != lapse.OrderRefundReview || rs[0].RefundID != "dp_SD1" {
		t.Fatalf("refunds of SD-1 after its dispute's withdrawal: %+v; want one of 19.99 USD in review, refund id dp_SD1", rs)
	}
	o, _ := e.engine.Order(context.Background(), "SD-1")
	open, err := e.store.ReviewList(context.Background(), &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || len(open) != 1 || !strings.Contains(open[0].Reason, "dp_SD1") || !strings.Contains(open[0].Reason, "must not be refunded again") {
		t.Fatalf("open reviews of SD-1: %+v, %v; want one naming dispute dp_SD1", open, err)
	}
}
