package payment

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// testNow is the clock of every callback test: callbacks are signed and
// verified against it, never against the wall clock.
var testNow = time.Date(2025, 11, 30, 8, 0, 0, 0, time.UTC)

const hmacBody = `{"kind":"paid","txn_id":"txn_1","order_no":"ORD-1","amount":1999,"currency":"USD","merchant":"m1","paid_at":"2025-11-30T07:59:00Z"}`

func hmacHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(SignatureHeader, sig)
	return h
}

// requireCode fails unless err has the code, and (when want is not "") a
// message containing want. EUNAUTHORIZED must also wrap ErrSignature.
func requireCode(t *testing.T, err error, code, want string) {
	t.Helper()
	if got := lapse.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
	if code == lapse.EUNAUTHORIZED && !errors.Is(err, lapse.ErrSignature) {
		t.Fatalf("error %v does not wrap ErrSignature", err)
	}
	if !strings.Contains(lapse.ErrorMessage(err), want) {
		t.Fatalf("error %q does not mention %q", lapse.ErrorMessage(err), want)
	}
}

// brief shows a notice in a failure message, without its Raw bytes.
func brief(n *lapse.PaymentNotice) string {
	if n == nil {
		return "no notice"
	}
	return fmt.Sprintf("%s %s txn %q refund %q order %q %d %s merchant %q at %s", n.Provider, n.Kind, n.TxnID, n.RefundID,
		n.OrderNo, n.Amount, n.Currency, n.Merchant, n.PaidAt.Format(time.RFC3339Nano))
}

// requireUnreadable fails unless n is an unreadable notice, without an
// error, whose review mentions want.
func requireUnreadable(t *testing.T, n *lapse.PaymentNotice, err error, want string) {
	t.Helper()
	if err != nil || n == nil || n.Kind != lapse.NoticeUnreadable || !strings.Contains(n.Review, want) {
		review := ""
		if n != nil {
			review = n.Review
		}
		t.Errorf("got %s (review %q), %v; want an unreadable notice whose review mentions %q", brief(n), review, err, want)
	}
}

// requireSaneNotice is the property every fuzzer checks: whatever verifies
// is either nothing or a notice Lapse can act on: one it can read, or one
// it cannot read in full that names its transaction and order and says
// what it could not read. Its currency is as sent.
func requireSaneNotice(t *testing.T, n *lapse.PaymentNotice, err error) {
	t.Helper()
	if err != nil {
		if n != nil {
			t.Fatalf("a notice for %q with an error %v", n.TxnID, err)
		}
		if c := lapse.ErrorCode(err); c != lapse.EUNAUTHORIZED && c != lapse.EINVALID {
			t.Fatalf("error %v has code %q", err, c)
		}
		return
	}
	if n == nil {
		return
	}
	switch {
	case n.TxnID == "" || n.OrderNo == "":
		t.Fatalf("txn id %q, order no %q", n.TxnID, n.OrderNo)
	case n.Kind == lapse.NoticeUnreadable && n.Review == "":
		t.Fatal("an unreadable notice that does not say why")
	case n.Kind == lapse.NoticeUnreadable:
	case n.Kind != lapse.NoticePaid && n.Kind != lapse.NoticeRefunded:
		t.Fatalf("kind %q", n.Kind)
	case n.Amount <= 0:
		t.Fatalf("amount %d", n.Amount)
	case n.Kind == lapse.NoticeRefunded && n.RefundID == "":
		t.Fatal("a refund notice without a refund id")
	case n.PaidAt.IsZero():
		t.Fatal("no time")
	}
}

func TestHMACRoundTrip(t *testing.T) {
	t.Parallel()
	h := &HMAC{Provider: "acme", Secrets: [][]byte{[]byte("s3cret")}}
	n, err := h.Verify(hmacHeader(h.Sign([]byte(hmacBody), testNow)), []byte(hmacBody), testNow)
	if err != nil {
		t.Fatal(err)
	}
	want := lapse.PaymentNotice{Provider: "acme", Kind: lapse.NoticePaid, TxnID: "txn_1", OrderNo: "ORD-1", Amount: 1999,
		Currency: "USD", Merchant: "m1", PaidAt: time.Date(2025, 11, 30, 7, 59, 0, 0, time.UTC)}
	got := *n
	got.Raw = nil
	if !reflect.DeepEqual(got, want) || string(n.Raw) != hmacBody {
		t.Fatalf("got %+v (raw %q), want %+v", got, n.Raw, want)
	}

	refund := `{"kind":"refunded","txn_id":"txn_1","refund_id":"rf_1","order_no":"ORD-1","amount":500,"currency":"EUR","merchant":"m1","paid_at":"2025-11-30T09:59:00+02:00"}`
	n, err = h.Verify(hmacHeader(h.Sign([]byte(refund), testNow)), []byte(refund), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != lapse.NoticeRefunded || n.RefundID != "rf_1" || n.Amount != 500 || !n.PaidAt.Equal(want.PaidAt) || n.PaidAt.Location() != time.UTC {
		t.Fatalf("refund notice %s", brief(n))
	}
}

func TestHMACRotation(t *testing.T) {
	t.Parallel()
	old, next := []byte("old secret"), []byte("new secret")
	h := &HMAC{Secrets: [][]byte{next, old}}
	body := []byte(hmacBody)

	// A sender still on the old secret.
	oldSender := &HMAC{Secrets: [][]byte{old}}
	if _, err := h.Verify(hmacHeader(oldSender.Sign(body, testNow)), body, testNow); err != nil {
		t.Fatalf("old secret: %v", err)
	}
	// A sender signing with both, the new one second and a junk v1 first.
	ts := strconv.FormatInt(testNow.Unix(), 10)
	both := fmt.Sprintf("t=%s,v1=zz,v1=%x,v1=%x", ts, mac([]byte("unknown"), ts, body), mac(next, ts, body))
	if _, err := h.Verify(hmacHeader(both), body, testNow); err != nil {
		t.Fatalf("two signatures: %v", err)
	}
	// Once the old secret is dropped, its signatures stop verifying.
	_, err := (&HMAC{Secrets: [][]byte{next}}).Verify(hmacHeader(oldSender.Sign(body, testNow)), body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "matches")
}

func TestHMACTimestampWindow(t *testing.T) {
	t.Parallel()
	h := &HMAC{Secrets: [][]byte{[]byte("k")}}
	body := []byte(hmacBody)
	for _, c := range []struct {
		name string
		tol  time.Duration
		sent time.Duration // from testNow
		ok   bool
	}{
		{"on time", 0, 0, true},
		{"stale at the edge", 0, -DefaultTolerance, true},
		{"future at the edge", 0, DefaultTolerance, true},
		{"stale", 0, -DefaultTolerance - time.Second, false},
		{"future", 0, DefaultTolerance + time.Second, false},
		{"custom tolerance", 10 * time.Second, -11 * time.Second, false},
		{"within custom tolerance", 10 * time.Second, 10 * time.Second, true},
	} {
		h := &HMAC{Secrets: h.Secrets, Tolerance: c.tol}
		_, err := h.Verify(hmacHeader(h.Sign(body, testNow.Add(c.sent))), body, testNow)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok {
			requireCode(t, err, lapse.EUNAUTHORIZED, "timestamp")
		}
	}
}

func TestHMACHeaderErrors(t *testing.T) {
	t.Parallel()
	h := &HMAC{Secrets: [][]byte{[]byte("k")}}
	body := []byte(hmacBody)
	good := h.Sign(body, testNow)
	sig := strings.TrimPrefix(good[strings.Index(good, ","):], ",")
	_, err := h.Verify(http.Header{}, body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "missing")
	for _, header := range []string{
		"garbage",
		"t=abc," + sig,
		"t=" + strconv.FormatInt(testNow.Unix(), 10),
		sig,
		"t=" + strconv.FormatInt(testNow.Unix(), 10) + ",v1=not-hex",
		"t=" + strconv.FormatInt(testNow.Unix(), 10) + ",v0=" + strings.TrimPrefix(sig, "v1="),
		// Two timestamps, the signed one among them: which one counts?
		"t=" + strconv.FormatInt(testNow.Unix()-1, 10) + "," + good,
		good + ",t=" + strconv.FormatInt(testNow.Unix()+1, 10),
	} {
		_, err := h.Verify(hmacHeader(header), body, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "malformed")
	}
}

func TestHMACTamperedBody(t *testing.T) {
	t.Parallel()
	h := &HMAC{Secrets: [][]byte{[]byte("k")}}
	header := hmacHeader(h.Sign([]byte(hmacBody), testNow))
	for i := range len(hmacBody) {
		body := []byte(hmacBody)
		body[i] ^= 0x01
		_, err := h.Verify(header, body, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "matches")
	}
	_, err := h.Verify(header, []byte(hmacBody+" "), testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "matches")
}

// TestHMACBodyErrors: a body that verifies but cannot be read at all, or
// names no transaction, order or refund, is EINVALID. One that names them
// but whose kind, amount or time Lapse cannot take is an unreadable
// notice, saying what as sent; one whose currency is not three capital
// letters is a notice in that currency.
func TestHMACBodyErrors(t *testing.T) {
	t.Parallel()
	h := &HMAC{Secrets: [][]byte{[]byte("k")}}
	paid := func(amount string) string {
		return `{"kind":"paid","txn_id":"t","order_no":"o","amount":` + amount + `,"currency":"USD","paid_at":"2025-11-30T07:59:00Z"}`
	}
	verify := func(body string) (*lapse.PaymentNotice, error) {
		return h.Verify(hmacHeader(h.Sign([]byte(body), testNow)), []byte(body), testNow)
	}
	for _, c := range []struct{ body, want string }{
		{`{"kind":"paid","txn_id":"t","order_no":"o","amount":1,"currency":"USD","paid_at":"2025-11-30T07:59:00Z","tip":1}`, "not a field"},
		{`{"kind":"paid","txn_id":"t","txn_id":"u","order_no":"o","amount":1,"currency":"USD","paid_at":"2025-11-30T07:59:00Z"}`, "txn_id: appears more than once"},
		{`{"kind":"paid","txn_id":"t","order_no":"o","amount":1,"currency":"USD","paid_at":"2025-11-30T07:59:00Z","x":[{"a":1,"a":2}]}`, "not a field"},
		{paid("1") + `{}`, "data after"},
		{paid("1") + `x`, "after its JSON object"},
		{`[]`, "JSON object"},
		{`{"kind":"paid"`, ""}, // truncated: refused, though as a bare EOF
		{strings.Replace(paid("1"), `"txn_id":"t",`, "", 1), "txn_id"},
		{strings.Replace(paid("1"), `"paid"`, `"refunded"`, 1), "refund_id"},
		{strings.Replace(paid("1"), `"order_no":"o",`, "", 1), "order_no"},
	} {
		n, err := verify(c.body)
		if n != nil {
			t.Errorf("%s: notice %s", c.body, brief(n))
		}
		requireCode(t, err, lapse.EINVALID, c.want)
	}
	for _, c := range []struct{ body, want string }{
		{paid("19.99"), "amount 19.99 is not a positive integer"},
		{paid("1e3"), "amount 1e3"},
		{paid(`"100"`), `amount "100"`},
		{paid("99999999999999999999"), "amount 99999999999999999999"},
		{paid("0"), "amount 0"},
		{paid("-5"), "amount -5"},
		{paid("null"), "amount null"},
		{strings.Replace(paid("1"), `"amount":1,`, "", 1), "amount missing"},
		{strings.Replace(paid("1"), `"paid"`, `"charged"`, 1), `kind "charged"`},
		{strings.Replace(paid("1"), `,"paid_at":"2025-11-30T07:59:00Z"`, "", 1), "paid_at missing"},
		{strings.Replace(paid("1"), `"2025-11-30T07:59:00Z"`, `"x"`, 1), `paid_at "x" is not an RFC 3339 time`},
		{strings.Replace(paid("1"), `"2025-11-30T07:59:00Z"`, `"2025-11-30 07:59:00"`, 1), `paid_at "2025-11-30 07:59:00"`},
		{strings.Replace(paid("1"), `"2025-11-30T07:59:00Z"`, `1764489540`, 1), "paid_at 1764489540"},
	} {
		n, err := verify(c.body)
		requireUnreadable(t, n, err, c.want)
		if n != nil && (n.TxnID != "t" || n.OrderNo != "o") {
			t.Errorf("%s: unreadable notice %s; want it of txn t, order o", c.body, brief(n))
		}
		// What the operator reads is ours: never Go's parse errors.
		if n != nil && (strings.Contains(n.Review, "parsing time") || strings.Contains(n.Review, "UnmarshalJSON")) {
			t.Errorf("%s: the review %q leaks Go's parse error", c.body, n.Review)
		}
	}
	for _, cur := range []string{"usd", "US", "€", ""} {
		n, err := verify(strings.Replace(paid("1"), `"USD"`, fmt.Sprintf("%q", cur), 1))
		if err != nil || n == nil || n.Kind != lapse.NoticePaid || n.Currency != cur || n.Amount != 1 {
			t.Errorf("currency %q: %s, %v; want a paid notice in %q", cur, brief(n), err, cur)
		}
	}
}

// ackRecorder runs ack and returns the response it wrote.
func ackRecorder(ack func(http.ResponseWriter, error), err error) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	ack(w, err)
	return w
}

// ackCases are errors of each class with the status they must get.
var ackCases = []struct {
	err    error
	status int
}{
	{lapse.Refine(lapse.ErrSignature, "bad signature"), http.StatusUnauthorized},
	{lapse.Errorf(lapse.EINVALID, "bad body"), http.StatusBadRequest},
	{lapse.Errorf(lapse.ENOTFOUND, "no such order"), http.StatusNotFound},
	{lapse.Errorf(lapse.ECONFLICT, "moved on"), http.StatusConflict},
	{lapse.Errorf(lapse.EUNAVAILABLE, "database down"), http.StatusServiceUnavailable},
	{lapse.Errorf(lapse.EINTERNAL, "bug"), http.StatusInternalServerError},
	{fmt.Errorf("wrapped: %w", errors.New("secret detail")), http.StatusInternalServerError},
}

func TestHMACAck(t *testing.T) {
	t.Parallel()
	h := &HMAC{}
	w := ackRecorder(h.Ack, nil)
	if w.Code != http.StatusOK || w.Body.String() != `{"status":"ok"}`+"\n" || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("ack of success: %d %q", w.Code, w.Body)
	}
	for _, c := range ackCases {
		w := ackRecorder(h.Ack, c.err)
		want := fmt.Sprintf(`{"status":"error","message":%q}`+"\n", lapse.ErrorMessage(c.err))
		if w.Code != c.status || w.Body.String() != want {
			t.Errorf("ack of %v: %d %q, want %d %q", c.err, w.Code, w.Body, c.status, want)
		}
		if strings.Contains(w.Body.String(), "secret detail") {
			t.Errorf("ack leaks an internal error: %q", w.Body)
		}
	}
}

func FuzzHMACVerify(f *testing.F) {
	h := &HMAC{Provider: "acme", Secrets: [][]byte{[]byte("fuzz secret")}}
	f.Add([]byte(hmacBody), h.Sign([]byte(hmacBody), testNow), false)
	f.Add([]byte(hmacBody), "", true)
	f.Add([]byte(`{"kind":"refunded","txn_id":"t","refund_id":"r","order_no":"o","amount":1,"currency":"EUR","paid_at":"2025-11-30T07:59:00Z"}`), "", true)
	f.Add([]byte(`{"kind":"paid","amount":1.5}`), "", true)
	f.Add([]byte(`{"a":{"b":1,"b":2}}`), "", true)
	f.Add([]byte(hmacBody), "t=1764489600,v1=00,v1=zz", false)
	f.Fuzz(func(t *testing.T, body []byte, header string, sign bool) {
		// Signing the input here takes the fuzzer past the signature, to
		// the parser behind it.
		if sign {
			header = h.Sign(body, testNow)
		}
		n, err := h.Verify(hmacHeader(header), body, testNow)
		requireSaneNotice(t, n, err)
		if sign && lapse.ErrorCode(err) == lapse.EUNAUTHORIZED {
			t.Fatalf("a body signed with our secret failed verification: %v", err)
		}
	})
}

// TestEmptySecretNeverVerifies: anyone can compute the HMAC under an empty
// key, so an empty secret in a verifier's list (a configuration mistake)
// must not make every callback signed with it genuine.
func TestEmptySecretNeverVerifies(t *testing.T) {
	t.Parallel()
	body := []byte(hmacBody)
	ts := strconv.FormatInt(testNow.Unix(), 10)
	header := fmt.Sprintf("t=%s,v1=%x", ts, mac(nil, ts, body))
	for _, secrets := range [][][]byte{{{}}, {nil}, {[]byte("a real secret"), {}}} {
		_, err := (&HMAC{Secrets: secrets}).Verify(hmacHeader(header), body, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "")
		stripe := []byte(stripePaymentEvent)
		_, err = (&Stripe{Secrets: secrets}).Verify(stripeHeader(fmt.Sprintf("t=%s,v1=%x", ts, mac(nil, ts, stripe))), stripe, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "")
	}
}
