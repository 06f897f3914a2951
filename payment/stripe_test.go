package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/stripe/stripe-go/v82/webhook"
)

const stripeSecret = "whsec_5f1b0c2e8d7a4b3c9e6f1a2b3c4d5e6f"

// stripePaymentEvent is a payment_intent.succeeded event as Stripe sends it
// (abridged), with fields Lapse does not read left in.
const stripePaymentEvent = `{
  "id": "evt_3QxYz12eZvKYlo2C0abc1234",
  "object": "event",
  "account": "acct_1Nv0FGQ9RKHgCVdK",
  "api_version": "2025-08-27.basil",
  "created": 1764489540,
  "data": {
    "object": {
      "id": "pi_3QxYz12eZvKYlo2C0def5678",
      "object": "payment_intent",
      "amount": 2000,
      "amount_capturable": 0,
      "amount_details": {"tip": {}},
      "amount_received": 2000,
      "capture_method": "automatic_async",
      "currency": "usd",
      "latest_charge": "ch_3QxYz12eZvKYlo2C0ghi9012",
      "livemode": true,
      "metadata": {"order_no": "ORD-20251130-0001", "channel": "web"},
      "payment_method_types": ["card"],
      "status": "succeeded"
    }
  },
  "livemode": true,
  "pending_webhooks": 1,
  "request": {"id": "req_8Bk1nYhZ0xXyZq", "idempotency_key": "a6e5c1f0-1d5e-4c1a-9d0b-1b2c3d4e5f60"},
  "type": "payment_intent.succeeded"
}`

// stripeRefundEvent is a charge.refunded event carrying its refunds, as
// API versions before 2022-11-15 send it.
const stripeRefundEvent = `{
  "id": "evt_3QxYz12eZvKYlo2C0zzz0000",
  "object": "event",
  "api_version": "2022-08-01",
  "created": 1764489590,
  "data": {
    "object": {
      "id": "ch_3QxYz12eZvKYlo2C0ghi9012",
      "object": "charge",
      "amount": 2000,
      "amount_captured": 2000,
      "amount_refunded": 1500,
      "currency": "eur",
      "metadata": {"order_no": "ORD-20251130-0001"},
      "payment_intent": "pi_3QxYz12eZvKYlo2C0def5678",
      "refunded": false,
      "refunds": {"object": "list", "data": [
        {"id": "re_older", "object": "refund", "amount": 500, "created": 1764489000},
        {"id": "re_newest", "object": "refund", "amount": 1000, "created": 1764489580}
      ], "has_more": false}
    }
  },
  "livemode": true,
  "type": "charge.refunded"
}`

func stripeHeader(v string) http.Header {
	h := http.Header{}
	h.Set(StripeSignatureHeader, v)
	return h
}

// stripeGoSigned signs body at t with stripe-go's own test helper.
func stripeGoSigned(t *testing.T, body, secret string, at time.Time) http.Header {
	t.Helper()
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: at})
	return stripeHeader(p.Header)
}

// stripeV1 is the v1 signature, computed here from Stripe's published rule
// rather than by the code under test.
func stripeV1(secret string, at time.Time, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", at.Unix(), body)
	return hex.EncodeToString(m.Sum(nil))
}

// stripeAccount is the connected account stripePaymentEvent was made on.
const stripeAccount = "acct_1Nv0FGQ9RKHgCVdK"

// newStripe is an endpoint whose payments are stripeAccount's.
func newStripe() *Stripe {
	return &Stripe{Provider: "stripe", Secrets: [][]byte{[]byte(stripeSecret)}, Account: stripeAccount}
}

// TestStripeAccount: a Connect endpoint receives every connected account's
// events, and whoever holds one can pay there, to themselves, under any
// metadata.order_no. Only a payment on the endpoint's Account (none: the
// platform's own) pays; one on another account is in review.
func TestStripeAccount(t *testing.T) {
	t.Parallel()
	own := strings.Replace(stripePaymentEvent, `"account": "acct_1Nv0FGQ9RKHgCVdK",
`, "", 1)
	if own == stripePaymentEvent {
		t.Fatal("no account in the event")
	}
	for _, c := range []struct {
		name, account, body string
		review              string
	}{
		{"platform's own payment", "", own, ""},
		{"connected account's payment at the platform's endpoint", "", stripePaymentEvent, `on account "acct_1Nv0FGQ9RKHgCVdK", not on the platform's own account`},
		{"another connected account's", "acct_2Other", stripePaymentEvent, `on account "acct_1Nv0FGQ9RKHgCVdK", not on "acct_2Other"`},
		{"the platform's own at a connected account's endpoint", stripeAccount, own, `on account "", not on "acct_1Nv0FGQ9RKHgCVdK"`},
		{"the account's own", stripeAccount, stripePaymentEvent, ""},
	} {
		s := newStripe()
		s.Account = c.account
		n, err := s.Verify(stripeGoSigned(t, c.body, stripeSecret, testNow), []byte(c.body), testNow)
		switch {
		case err != nil || n == nil:
			t.Errorf("%s: %s, %v; want a notice", c.name, brief(n), err)
		case n.Kind != lapse.NoticePaid || n.Amount != 2000:
			t.Errorf("%s: %s; want a paid notice of 2000", c.name, brief(n))
		case c.review == "" && n.Review != "":
			t.Errorf("%s: in review (%s); want it clean", c.name, n.Review)
		case !strings.Contains(n.Review, c.review):
			t.Errorf("%s: review %q; want it to say %q", c.name, n.Review, c.review)
		}
	}
}

func TestStripeAcceptsStripeGoSignature(t *testing.T) {
	t.Parallel()
	n, err := newStripe().Verify(stripeGoSigned(t, stripePaymentEvent, stripeSecret, testNow), []byte(stripePaymentEvent), testNow)
	if err != nil {
		t.Fatal(err)
	}
	want := lapse.PaymentNotice{Provider: "stripe", Kind: lapse.NoticePaid, TxnID: "pi_3QxYz12eZvKYlo2C0def5678",
		OrderNo: "ORD-20251130-0001", Amount: 2000, Currency: "USD", Merchant: "acct_1Nv0FGQ9RKHgCVdK",
		PaidAt: time.Unix(1764489540, 0).UTC()}
	got := *n
	got.Raw = nil
	if !reflect.DeepEqual(got, want) || string(n.Raw) != stripePaymentEvent {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestStripeGoAcceptsOurRule: a header built here from the published rule,
// with a v0 entry and a v1 for another secret around the right one, is one
// stripe-go accepts, and so do we.
func TestStripeGoAcceptsOurRule(t *testing.T) {
	t.Parallel()
	header := fmt.Sprintf("t=%d,v1=%s,v1=%s,v0=%s", testNow.Unix(), stripeV1("whsec_other", testNow, stripePaymentEvent),
		stripeV1(stripeSecret, testNow, stripePaymentEvent), stripeV1(stripeSecret, testNow, stripePaymentEvent))
	ev, err := webhook.ConstructEventWithOptions([]byte(stripePaymentEvent), header, stripeSecret,
		webhook.ConstructEventOptions{IgnoreTolerance: true, IgnoreAPIVersionMismatch: true})
	if err != nil {
		t.Fatalf("stripe-go refuses our header: %v", err)
	}
	if ev.Type != "payment_intent.succeeded" || ev.Data.Object["id"] != "pi_3QxYz12eZvKYlo2C0def5678" {
		t.Fatalf("stripe-go read %s %v", ev.Type, ev.Data.Object["id"])
	}
	if _, err := newStripe().Verify(stripeHeader(header), []byte(stripePaymentEvent), testNow); err != nil {
		t.Fatal(err)
	}
}

// TestStripeAgreesWithStripeGo: for each header and body, stripe-go and
// Verify agree on whether the signature holds.
func TestStripeAgreesWithStripeGo(t *testing.T) {
	t.Parallel()
	ts := testNow.Unix()
	good := stripeV1(stripeSecret, testNow, stripePaymentEvent)
	tampered := strings.Replace(stripePaymentEvent, `"amount_received": 2000`, `"amount_received": 9000`, 1)
	for _, c := range []struct {
		name, header, body string
		ok                 bool
	}{
		{"valid", fmt.Sprintf("t=%d,v1=%s", ts, good), stripePaymentEvent, true},
		{"tampered body", fmt.Sprintf("t=%d,v1=%s", ts, good), tampered, false},
		{"wrong secret", fmt.Sprintf("t=%d,v1=%s", ts, stripeV1("whsec_wrong", testNow, stripePaymentEvent)), stripePaymentEvent, false},
		{"v0 only", fmt.Sprintf("t=%d,v0=%s", ts, good), stripePaymentEvent, false},
		{"wrong timestamp", fmt.Sprintf("t=%d,v1=%s", ts+1, good), stripePaymentEvent, false},
		{"junk v1 then good", fmt.Sprintf("t=%d,v1=xyz,v1=%s", ts, good), stripePaymentEvent, true},
		{"upper-case hex", fmt.Sprintf("t=%d,v1=%s", ts, strings.ToUpper(good)), stripePaymentEvent, true},
		{"no timestamp", "v1=" + good, stripePaymentEvent, false},
	} {
		theirs := webhook.ValidatePayloadIgnoringTolerance([]byte(c.body), c.header, stripeSecret)
		_, ours := newStripe().Verify(stripeHeader(c.header), []byte(c.body), testNow)
		if (theirs == nil) != c.ok || (ours == nil) != c.ok {
			t.Errorf("%s: stripe-go %v, Verify %v, want ok=%v", c.name, theirs, ours, c.ok)
		}
		if ours != nil {
			requireCode(t, ours, lapse.EUNAUTHORIZED, "")
		}
	}
}

func TestStripeRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := "whsec_old_0123456789", "whsec_new_9876543210"
	s := &Stripe{Secrets: [][]byte{[]byte(newSecret), []byte(oldSecret)}}
	body := []byte(stripePaymentEvent)
	if _, err := s.Verify(stripeGoSigned(t, stripePaymentEvent, oldSecret, testNow), body, testNow); err != nil {
		t.Fatalf("signed with the second secret: %v", err)
	}
	// While a secret is rolled, Stripe signs with both.
	both := fmt.Sprintf("t=%d,v1=%s,v1=%s", testNow.Unix(), stripeV1(oldSecret, testNow, stripePaymentEvent), stripeV1(newSecret, testNow, stripePaymentEvent))
	if _, err := (&Stripe{Secrets: [][]byte{[]byte(newSecret)}}).Verify(stripeHeader(both), body, testNow); err != nil {
		t.Fatalf("both signatures: %v", err)
	}
	_, err := (&Stripe{Secrets: [][]byte{[]byte(newSecret)}}).Verify(stripeGoSigned(t, stripePaymentEvent, oldSecret, testNow), body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "matches")
}

func TestStripeTimestampWindow(t *testing.T) {
	t.Parallel()
	body := []byte(stripePaymentEvent)
	for _, c := range []struct {
		tol  time.Duration
		sent time.Duration
		ok   bool
	}{
		{0, -300 * time.Second, true},
		{0, 300 * time.Second, true},
		{0, -301 * time.Second, false},
		{0, 301 * time.Second, false},
		{time.Hour, -time.Hour, true},
		{time.Hour, -time.Hour - time.Second, false},
	} {
		s := &Stripe{Secrets: [][]byte{[]byte(stripeSecret)}, Tolerance: c.tol}
		_, err := s.Verify(stripeGoSigned(t, stripePaymentEvent, stripeSecret, testNow.Add(c.sent)), body, testNow)
		if c.ok && err != nil {
			t.Errorf("tolerance %v, sent %v: %v", c.tol, c.sent, err)
		}
		if !c.ok {
			requireCode(t, err, lapse.EUNAUTHORIZED, "timestamp")
		}
	}
	// stripe-go refuses time.Since(t) > tolerance, to the nanosecond: the
	// edge itself is inside, a nanosecond past it is not.
	s := &Stripe{Secrets: [][]byte{[]byte(stripeSecret)}}
	header := stripeGoSigned(t, stripePaymentEvent, stripeSecret, testNow)
	if _, err := s.Verify(header, body, testNow.Add(300*time.Second)); err != nil {
		t.Errorf("300 s old: %v", err)
	}
	_, err := s.Verify(header, body, testNow.Add(300*time.Second+time.Nanosecond))
	requireCode(t, err, lapse.EUNAUTHORIZED, "timestamp")
}

func TestStripeHeaderErrors(t *testing.T) {
	t.Parallel()
	body := []byte(stripePaymentEvent)
	good := stripeV1(stripeSecret, testNow, stripePaymentEvent)
	ts := strconv.FormatInt(testNow.Unix(), 10)
	_, err := newStripe().Verify(http.Header{}, body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "missing")
	// The HMAC scheme's header is not Stripe's.
	_, err = newStripe().Verify(hmacHeader("t="+ts+",v1="+good), body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "missing")
	v0 := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: testNow, Scheme: "v0"})
	for _, header := range []string{
		"garbage",
		"t=" + ts,
		"v1=" + good,
		"t=yesterday,v1=" + good,
		"t=" + ts + ",v1=not-hex",
		"t=" + ts + ",t=" + ts + ",v1=" + good, // which t was signed?
		v0.Header,                              // only v1 counts
	} {
		_, err := newStripe().Verify(stripeHeader(header), body, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "malformed")
	}
}

func TestStripeTamperedBody(t *testing.T) {
	t.Parallel()
	header := stripeGoSigned(t, stripePaymentEvent, stripeSecret, testNow)
	for i := range len(stripePaymentEvent) {
		body := []byte(stripePaymentEvent)
		body[i] ^= 0x20
		_, err := newStripe().Verify(header, body, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "matches")
	}
}

func TestStripeRefund(t *testing.T) {
	t.Parallel()
	n, err := newStripe().Verify(stripeGoSigned(t, stripeRefundEvent, stripeSecret, testNow), []byte(stripeRefundEvent), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != lapse.NoticeRefunded || n.TxnID != "pi_3QxYz12eZvKYlo2C0def5678" || n.RefundID != "re_newest" ||
		n.OrderNo != "ORD-20251130-0001" || n.Amount != 1500 || !n.RefundedTotal || n.Currency != "EUR" || n.Merchant != "" ||
		!n.PaidAt.Equal(time.Unix(1764489580, 0)) {
		t.Fatalf("refund notice %s", brief(n))
	}
	// Current API versions do not embed the refunds: the charge stands in.
	bare := stripeRefundEvent[:strings.Index(stripeRefundEvent, `,
      "refunds"`)] + "}},\n" + `"livemode": true, "type": "charge.refunded"}`
	n, err = newStripe().Verify(stripeGoSigned(t, bare, stripeSecret, testNow), []byte(bare), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if n.RefundID != "ch_3QxYz12eZvKYlo2C0ghi9012" || !n.PaidAt.Equal(time.Unix(1764489590, 0)) {
		t.Fatalf("refund notice without refunds %s", brief(n))
	}
}

// TestStripeEventErrors: events that verify but that Lapse cannot read at
// all, or that name no payment or order, are refused; those whose amount
// or time Lapse cannot take are unreadable notices, and those whose
// currency is not three letters are notices in it.
func TestStripeEventErrors(t *testing.T) {
	t.Parallel()
	verify := func(from, to string) (*lapse.PaymentNotice, error) {
		body := strings.Replace(stripePaymentEvent, from, to, 1)
		if body == stripePaymentEvent {
			t.Fatalf("%q is not in the event", from)
		}
		return newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"metadata": {"order_no": "ORD-20251130-0001", "channel": "web"}`, `"metadata": {"channel": "web"}`, "metadata.order_no"},
		{`"metadata": {"order_no": "ORD-20251130-0001", "channel": "web"}`, `"metadata": {}`, "metadata.order_no"},
		{`"amount_received": 2000`, `"amount_received": 2000, "amount_received": 1`, "more than once"},
		{`"type": "payment_intent.succeeded"`, `"type": "payment_intent.succeeded", "type": "customer.created"`, "more than once"},
		{`"object": "payment_intent"`, `"object": "charge"`, "not a payment_intent"},
		{`"id": "pi_3QxYz12eZvKYlo2C0def5678",`, ``, "data.object.id"},
		{`"type": "payment_intent.succeeded"`, `"kind": "payment_intent.succeeded"`, "no type"},
		{`"metadata": {"order_no": "ORD-20251130-0001", "channel": "web"}`, `"metadata": {"order_no": 1}`, "metadata.order_no"},
	} {
		n, err := verify(c.from, c.to)
		if n != nil {
			t.Errorf("%s: notice for %s", c.to, n.TxnID)
		}
		requireCode(t, err, lapse.EINVALID, c.want)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"amount_received": 2000`, `"amount_received": 2000.5`, "amount_received 2000.5"},
		{`"amount_received": 2000`, `"amount_received": 20.00`, "amount_received 20.00"},
		{`"amount_received": 2000`, `"amount_received": "2000"`, `amount_received "2000"`},
		{`"amount_received": 2000`, `"amount_received": 0`, "amount_received 0"},
		{`"amount_received": 2000`, `"amount_received": -2000`, "amount_received -2000"},
		{`"created": 1764489540,`, ``, "created time 0"},
	} {
		n, err := verify(c.from, c.to)
		requireUnreadable(t, n, err, c.want)
	}
	if n, err := verify(`"currency": "usd"`, `"currency": "dollars"`); err != nil || n.Kind != lapse.NoticePaid || n.Currency != "DOLLARS" {
		t.Errorf("currency dollars: %s, %v; want a paid notice in DOLLARS", brief(n), err)
	}
	for _, body := range []string{stripePaymentEvent + "{}", "null", "[]"} {
		_, err := newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
		requireCode(t, err, lapse.EINVALID, "")
	}
	refund := strings.Replace(stripeRefundEvent, `"payment_intent": "pi_3QxYz12eZvKYlo2C0def5678"`, `"payment_intent": null`, 1)
	_, err := newStripe().Verify(stripeGoSigned(t, refund, stripeSecret, testNow), []byte(refund), testNow)
	requireCode(t, err, lapse.EINVALID, "payment_intent")
}

func TestStripeIgnoredEvents(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"customer.created", "payment_intent.payment_failed", "charge.succeeded", "charge.refund.updated"} {
		// The object does not matter, even one Lapse could not read.
		body := strings.Replace(stripePaymentEvent, `"payment_intent.succeeded"`, `"`+typ+`"`, 1)
		body = strings.Replace(body, `"amount_received": 2000`, `"amount_received": 1.5`, 1)
		n, err := newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
		if n != nil || err != nil {
			t.Errorf("%s: %s, %v", typ, brief(n), err)
		}
	}
	// Still only once verified.
	body := strings.Replace(stripePaymentEvent, `"payment_intent.succeeded"`, `"customer.created"`, 1)
	_, err := newStripe().Verify(stripeGoSigned(t, body, "whsec_wrong", testNow), []byte(body), testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "")
}

func TestStripeAck(t *testing.T) {
	t.Parallel()
	s := newStripe()
	w := ackRecorder(s.Ack, nil)
	if w.Code != http.StatusOK || w.Body.String() != `{"received":true}`+"\n" || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("ack of success: %d %q", w.Code, w.Body)
	}
	for _, c := range ackCases {
		w := ackRecorder(s.Ack, c.err)
		want := fmt.Sprintf(`{"error":%q}`+"\n", lapse.ErrorMessage(c.err))
		if w.Code != c.status || w.Body.String() != want {
			t.Errorf("ack of %v: %d %q, want %d %q", c.err, w.Code, w.Body, c.status, want)
		}
	}
}

func FuzzStripeVerify(f *testing.F) {
	s := newStripe()
	f.Add([]byte(stripePaymentEvent), "", true)
	f.Add([]byte(stripeRefundEvent), "", true)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(stripePaymentEvent), Secret: stripeSecret, Timestamp: testNow})
	f.Add([]byte(stripePaymentEvent), signed.Header, false)
	f.Add([]byte(`{"type":"charge.refunded","created":1,"data":{"object":{"object":"charge","refunds":{"data":[{"id":"","created":5}]}}}}`), "", true)
	f.Add([]byte(`{"type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","amount_received":1e2}}}`), "", true)
	f.Add([]byte(`{}`), "t=1764489600,v1=00,v1=,t=", false)
	f.Fuzz(func(t *testing.T, body []byte, header string, sign bool) {
		if sign {
			header = fmt.Sprintf("t=%d,v1=%s", testNow.Unix(), stripeV1(stripeSecret, testNow, string(body)))
		}
		n, err := s.Verify(stripeHeader(header), body, testNow)
		requireSaneNotice(t, n, err)
		if sign && lapse.ErrorCode(err) == lapse.EUNAUTHORIZED {
			t.Fatalf("a body signed with our secret failed verification: %v", err)
		}
	})
}

// TestStripeLivemode: a live endpoint also receives its connected accounts'
// test-mode events, signed with its live secret (Stripe's Connect webhooks
// documentation), and a test payment moves no money, so an endpoint acts
// only on events of its own mode. A live event at an endpoint configured
// for test mode is refused, not dropped: it is real money.
func TestStripeLivemode(t *testing.T) {
	t.Parallel()
	test := strings.Replace(stripePaymentEvent, `"livemode": true,
  "pending_webhooks"`, `"livemode": false,
  "pending_webhooks"`, 1)
	if test == stripePaymentEvent {
		t.Fatal("no top-level livemode in the event")
	}
	refund := strings.Replace(stripeRefundEvent, `"livemode": true`, `"livemode": false`, 1)
	absent := strings.Replace(stripePaymentEvent, `"livemode": true,
  "pending_webhooks"`, `"pending_webhooks"`, 1)
	for _, body := range []string{test, refund, absent} {
		n, err := newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
		if n != nil || err != nil {
			t.Errorf("a test-mode event at a live endpoint: %s, %v; want it acknowledged without a notice", brief(n), err)
		}
	}
	testMode := newStripe()
	testMode.TestMode = true
	for _, body := range []string{test, refund} {
		n, err := testMode.Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
		if err != nil || n == nil {
			t.Errorf("a test-mode event at a test endpoint: %s, %v; want a notice", brief(n), err)
		}
	}
	_, err := testMode.Verify(stripeGoSigned(t, stripePaymentEvent, stripeSecret, testNow), []byte(stripePaymentEvent), testNow)
	requireCode(t, err, lapse.EINVALID, "livemode")
	// Other event types are acknowledged in either mode, as before.
	other := strings.Replace(stripePaymentEvent, `"payment_intent.succeeded"`, `"customer.created"`, 1)
	if n, err := testMode.Verify(stripeGoSigned(t, other, stripeSecret, testNow), []byte(other), testNow); n != nil || err != nil {
		t.Errorf("a live customer.created at a test endpoint: %s, %v", brief(n), err)
	}
}

// TestStripeMinorUnits: Stripe counts ISK in hundredths (100 is 1 króna)
// and MGA in whole ariary, where ISO 4217, which orders are counted in, has
// 0 and 2 digits: a Stripe amount is read in ISO's minor units, so that an
// ISK payment of 50 krónur (5000) does not pay an order of 5000 krónur. The
// rest (USD, JPY, KWD) are counted alike.
func TestStripeMinorUnits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		currency, amount string
		want             int64 // 0: unreadable
	}{
		{"usd", "2000", 2000},
		{"jpy", "2000", 2000},
		{"kwd", "2010", 2010},
		{"isk", "500000", 5000},
		{"isk", "5000", 50},
		{"isk", "5050", 0}, // half a króna: Stripe takes whole ones only
		{"mga", "1000", 100000},
		{"mga", "92233720368547759", 0}, // past int64 in ISO's units
	} {
		body := strings.Replace(stripePaymentEvent, `"amount_received": 2000`, `"amount_received": `+c.amount, 1)
		body = strings.Replace(body, `"currency": "usd"`, `"currency": "`+c.currency+`"`, 1)
		n, err := newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
		switch {
		case err != nil || n == nil:
			t.Errorf("%s %s: %s, %v; want a notice", c.amount, c.currency, brief(n), err)
		case c.want == 0 && (n.Kind != lapse.NoticeUnreadable || !strings.Contains(n.Review, "Stripe's minor units of "+strings.ToUpper(c.currency))):
			t.Errorf("%s %s: %s (%s); want it unreadable", c.amount, c.currency, brief(n), n.Review)
		case c.want != 0 && (n.Kind != lapse.NoticePaid || n.Amount != c.want || n.Review != ""):
			t.Errorf("%s %s: %s (%d, %q); want paid %d", c.amount, c.currency, brief(n), n.Amount, n.Review, c.want)
		}
	}
	// A refund's amount is read alike.
	body := strings.Replace(stripeRefundEvent, `"currency": "eur"`, `"currency": "isk"`, 1)
	n, err := newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
	if err != nil || n == nil || n.Kind != lapse.NoticeRefunded || n.Amount != 15 {
		t.Errorf("a refund of 1500 hundredths of ISK: %s, %v; want 15 krónur", brief(n), err)
	}
}

// stripeDisputeEvent is a charge.dispute.funds_withdrawn event as Stripe
// sends it (abridged): a dispute names its payment_intent and charge, not
// the order.
const stripeDisputeEvent = `{
  "id": "evt_1QyDisp2eZvKYlo2Cw1thdr",
  "object": "event",
  "api_version": "2025-08-27.basil",
  "created": 1764489600,
  "data": {
    "object": {
      "id": "dp_1QyDisp2eZvKYlo2C0jkl3456",
      "object": "dispute",
      "amount": 1500,
      "balance_transactions": [{"id": "txn_1QyDisp2eZvKYlo2C", "amount": -1500, "fee": 1500}],
      "charge": "ch_3QxYz12eZvKYlo2C0ghi9012",
      "currency": "usd",
      "evidence": {"customer_name": null},
      "is_charge_refundable": false,
      "livemode": true,
      "metadata": {},
      "payment_intent": "pi_3QxYz12eZvKYlo2C0def5678",
      "reason": "fraudulent",
      "status": "needs_response"
    }
  },
  "livemode": true,
  "type": "charge.dispute.funds_withdrawn"
}`

// TestStripeDispute: a dispute's withdrawal (funds_withdrawn, or closed
// lost) is a refunded notice of the amount withdrawn under the dispute's
// id, naming it; its other events are dispute notices; none needs an
// order number, and each still needs its payment_intent.
func TestStripeDispute(t *testing.T) {
	t.Parallel()
	verify := func(typ, status string, edit ...string) (*lapse.PaymentNotice, error) {
		body := strings.Replace(stripeDisputeEvent, `"charge.dispute.funds_withdrawn"`, `"`+typ+`"`, 1)
		body = strings.Replace(body, `"needs_response"`, `"`+status+`"`, 1)
		for i := 0; i+1 < len(edit); i += 2 {
			body = strings.Replace(body, edit[i], edit[i+1], 1)
		}
		return newStripe().Verify(stripeGoSigned(t, body, stripeSecret, testNow), []byte(body), testNow)
	}
	for _, c := range []struct {
		typ, status string
		kind        lapse.PaymentNoticeKind
		says        string
	}{
		{"charge.dispute.funds_withdrawn", "needs_response", lapse.NoticeRefunded, "must not be refunded again"},
		{"charge.dispute.closed", "lost", lapse.NoticeRefunded, "must not be refunded again"},
		{"charge.dispute.created", "needs_response", lapse.NoticeDispute, "opened"},
		{"charge.dispute.funds_reinstated", "won", lapse.NoticeDispute, "gave the withdrawn amount back"},
		{"charge.dispute.closed", "won", lapse.NoticeDispute, "closed with status won"},
	} {
		n, err := verify(c.typ, c.status)
		if err != nil || n == nil {
			t.Fatalf("%s %s: %+v, %v", c.typ, c.status, n, err)
		}
		if n.Kind != c.kind || n.TxnID != "pi_3QxYz12eZvKYlo2C0def5678" || n.RefundID != "dp_1QyDisp2eZvKYlo2C0jkl3456" ||
			n.Amount != 1500 || n.Currency != "USD" || n.OrderNo != "" || n.RefundedTotal ||
			!strings.Contains(n.Review, "dp_1QyDisp2eZvKYlo2C0jkl3456") || !strings.Contains(n.Review, c.says) ||
			!n.PaidAt.Equal(time.Unix(1764489600, 0)) {
			t.Errorf("%s %s: %+v", c.typ, c.status, n)
		}
	}
	_, err := verify("charge.dispute.funds_withdrawn", "needs_response", `"payment_intent": "pi_3QxYz12eZvKYlo2C0def5678"`, `"payment_intent": null`)
	requireCode(t, err, lapse.EINVALID, "payment_intent")
	_, err = verify("charge.dispute.created", "needs_response", `"object": "dispute"`, `"object": "charge"`)
	requireCode(t, err, lapse.EINVALID, "not a dispute")
	n, err := verify("charge.dispute.funds_withdrawn", "needs_response", `"amount": 1500`, `"amount": "1500"`)
	if err != nil || n == nil || n.Kind != lapse.NoticeUnreadable {
		t.Errorf("a dispute whose amount is a string: %+v, %v; want an unreadable notice", n, err)
	}
	// A test-mode dispute at a live endpoint moves no money.
	n, err = verify("charge.dispute.funds_withdrawn", "needs_response", `"livemode": true,
  "type"`, `"livemode": false,
  "type"`)
	if n != nil || err != nil {
		t.Errorf("a test-mode dispute at a live endpoint: %+v, %v", n, err)
	}
}
