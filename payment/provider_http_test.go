package payment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/payment"
)

// newGateway serves a sandbox over HTTP and returns it with an HTTPProvider
// that calls it, both on the same manual clock.
func newGateway(t *testing.T, sbCfg payment.SandboxConfig, cfg payment.HTTPProviderConfig) (*payment.Sandbox, *payment.HTTPProvider) {
	t.Helper()
	sb, clock := newSandbox(t, sbCfg)
	srv := httptest.NewServer(sb.Handler())
	t.Cleanup(srv.Close)
	if cfg.Clock == nil {
		cfg.Clock = clock
	}
	return sb, newHTTPProvider(t, srv.URL, cfg)
}

func newHTTPProvider(t *testing.T, url string, cfg payment.HTTPProviderConfig) *payment.HTTPProvider {
	t.Helper()
	cfg.BaseURL = url
	if cfg.Secret == nil {
		cfg.Secret = sandboxSecret
	}
	p, err := payment.NewHTTPProvider(cfg)
	if err != nil {
		t.Fatalf("NewHTTPProvider: %v", err)
	}
	return p
}

// requireTransient fails unless err is a plain, retryable error: neither a
// refusal, nor an unknown outcome, nor an answer that nothing exists.
func requireTransient(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("%s: %v; want a transient error", what, err)
	}
}

func TestHTTPProviderRoundTrip(t *testing.T) {
	t.Parallel()
	sb, p := newGateway(t, payment.SandboxConfig{}, payment.HTTPProviderConfig{})
	ctx := context.Background()

	charge := &lapse.ChargeRequest{IdempotencyKey: "charge-1", OrderNo: "G/1 x", Amount: 990, Currency: "CNY", Method: "pm_1"}
	paid, err := p.Charge(ctx, charge)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	want := sb.Payments()[0]
	if *paid != want {
		t.Errorf("Charge returned %+v; the sandbox holds %+v", paid, want)
	}
	if again, err := p.Charge(ctx, charge); err != nil || *again != want {
		t.Errorf("Charge again under the same key: %+v, %v; want %+v", again, err, want)
	}
	if q, err := p.Query(ctx, charge.OrderNo); err != nil || *q != want {
		t.Errorf("Query %q: %+v, %v; want %+v", charge.OrderNo, q, err, want)
	}

	refund := &lapse.RefundRequest{IdempotencyKey: "refund/1", TxnID: paid.TxnID, OrderNo: charge.OrderNo, Amount: 400, Currency: "CNY", Reason: "test"}
	rf, err := p.Refund(ctx, refund)
	if err != nil || rf.RefundID != "refund/1" || rf.TxnID != paid.TxnID || rf.Amount != 400 || rf.Currency != "CNY" || rf.Status != lapse.RefundSucceeded {
		t.Fatalf("Refund: %+v, %v", rf, err)
	}
	if again, err := p.Refund(ctx, refund); err != nil || *again != *rf {
		t.Errorf("Refund again under the same key: %+v, %v; want %+v", again, err, rf)
	}
	if q, err := p.RefundQuery(ctx, "refund/1"); err != nil || *q != *rf {
		t.Errorf("RefundQuery: %+v, %v; want %+v", q, err, rf)
	}
	if n := len(sb.Refunds()); n != 1 {
		t.Errorf("%d refunds made under one key", n)
	}
	over := &lapse.RefundRequest{IdempotencyKey: "refund-2", TxnID: paid.TxnID, Amount: 591, Currency: "CNY"}
	if _, err := p.Refund(ctx, over); !errors.Is(err, lapse.ErrRefused) || !strings.Contains(err.Error(), "exceed") {
		t.Errorf("Refund over the captured amount: %v; want ErrRefused with the gateway's message", err)
	}

	// Close: a started payment comes back closed, a paid one paid.
	started, err := sb.Start(ctx, "A-1", 1999, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := p.Close(ctx, "A-1"); err != nil || c.Status != lapse.ProviderClosed || c.TxnID != started.TxnID {
		t.Errorf("Close of a started payment: %+v, %v; want %s closed", c, err, started.TxnID)
	}
	if _, err := sb.Pay(ctx, "A-1", 1999, "USD"); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Pay after Close over HTTP: %v; want ErrRefused", err)
	}
	if _, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "c-A-1", OrderNo: "A-1", Amount: 1999, Currency: "USD", Method: "pm"}); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Charge of a closed order: %v; want ErrRefused", err)
	}
	if c, err := p.Close(ctx, charge.OrderNo); err != nil || c.Status != lapse.ProviderPaid || c.TxnID != paid.TxnID || !c.PaidAt.Equal(paid.PaidAt) {
		t.Errorf("Close of a paid order: %+v, %v; want %s paid, no error", c, err, paid.TxnID)
	}

	if _, err := p.Query(ctx, "nope"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("Query of an unknown order: %v; want ErrProviderNotFound", err)
	}
	if _, err := p.RefundQuery(ctx, "nope"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("RefundQuery of an unknown key: %v; want ErrProviderNotFound", err)
	}
	if _, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "c-2", OrderNo: "G-2", Amount: 1, Currency: "CNY", Method: "fail"}); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("a declined charge: %v; want ErrRefused", err)
	}
	calls := sb.Calls()
	if _, err := p.Charge(ctx, &lapse.ChargeRequest{OrderNo: "G-3", Amount: 1, Currency: "CNY"}); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("a charge without an idempotency key: %v; want ErrRefused", err)
	}
	if sb.Calls() != calls {
		t.Errorf("a charge without an idempotency key was sent")
	}
}

func TestHTTPProviderStatusMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		body   string
		check  func(error) bool
		want   string
	}{
		{404, `{"code":"not_found","message":"no such payment"}`, func(err error) bool {
			return errors.Is(err, lapse.ErrProviderNotFound) && !errors.Is(err, lapse.ErrRefused)
		}, "ErrProviderNotFound"},
		{409, `{"code":"refused","message":"order closed"}`, func(err error) bool {
			return errors.Is(err, lapse.ErrRefused) && strings.Contains(err.Error(), "order closed")
		}, "ErrRefused with the message"},
		{422, `not json`, func(err error) bool {
			return errors.Is(err, lapse.ErrRefused) && strings.Contains(err.Error(), "not json")
		}, "ErrRefused with the body"},
		{500, `{"code":"internal","message":"boom"}`, nil, "transient"},
		{502, `<html>Bad Gateway</html>`, nil, "transient"},
		{503, ``, nil, "transient"},
		{504, `<html>Gateway Timeout</html>`, nil, "transient"},
		{429, `{"message":"slow down"}`, nil, "transient"},
		{404, `404 page not found`, nil, "transient: a 404 without the protocol's code"},
		{302, ``, nil, "transient"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if c.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}))
			t.Cleanup(srv.Close)
			p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{})
			ctx := context.Background()
			_, chargeErr := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "A-1", Amount: 1, Currency: "USD", Method: "pm"})
			_, refundErr := p.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "r", TxnID: "t", OrderNo: "A-1", Amount: 1, Currency: "USD"})
			_, closeErr := p.Close(ctx, "A-1")
			_, queryErr := p.Query(ctx, "A-1")
			_, refundQueryErr := p.RefundQuery(ctx, "r")
			for name, err := range map[string]error{"Charge": chargeErr, "Refund": refundErr, "Close": closeErr,
				"Query": queryErr, "RefundQuery": refundQueryErr} {
				var se *payment.HTTPStatusError
				if !errors.As(err, &se) || se.StatusCode != c.status {
					t.Errorf("%s answered %d: %v; want an HTTPStatusError with the status", name, c.status, err)
				}
				effect := name == "Charge" || name == "Refund" || name == "Close"
				switch {
				case c.status/100 == 5 && effect:
					// A gateway's 502 or 504 may come after the adapter
					// charged: the outcome is unknown, asked about first.
					if !errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrNotSent) {
						t.Errorf("%s answered %d %s: %v; want an unknown outcome", name, c.status, c.body, err)
					}
				case c.check == nil:
					requireTransient(t, fmt.Sprintf("%s answered %d %s", name, c.status, c.body), err)
				case !c.check(err):
					t.Errorf("%s answered %d %s: %v; want %s", name, c.status, c.body, err, c.want)
				}
			}
		})
	}
}

func TestHTTPProviderUnreadableAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"txn_id":"t1","txn_id":"t2","order_no":"A-1","status":"paid"}`)
	}))
	t.Cleanup(srv.Close)
	p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{})
	ctx := context.Background()
	_, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "A-1", Amount: 1, Currency: "USD", Method: "pm"})
	if !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Errorf("a charge answered 200 with an unreadable body: %v; want ErrUnknownOutcome", err)
	}
	_, err = p.Query(ctx, "A-1")
	requireTransient(t, "a query answered 200 with an unreadable body", err)
}

// TestHTTPProviderRefundCurrency: a refund's currency is optional in an
// answer, passed on as given, and an answer is unreadable when it is not
// a currency code.
func TestHTTPProviderRefundCurrency(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ answer, want string }{
		{`{"refund_id":"r-1","txn_id":"t1","amount":5,"status":"succeeded"}`, ""},
		{`{"refund_id":"r-1","txn_id":"t1","amount":5,"currency":"EUR","status":"succeeded"}`, "EUR"},
		// A code no order has is read, for the engine to put in review
		// as a refund of another currency than the one asked for.
		{`{"refund_id":"r-1","txn_id":"t1","amount":5,"currency":"ZZZ","status":"succeeded"}`, "ZZZ"},
		{`{"refund_id":"r-1","txn_id":"t1","amount":5,"currency":"euro","status":"succeeded"}`, "unreadable"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, c.answer) }))
		t.Cleanup(srv.Close)
		p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{})
		ctx := context.Background()
		rf, err := p.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "k", TxnID: "t1", OrderNo: "A-1", Amount: 5, Currency: "USD"})
		q, qerr := p.RefundQuery(ctx, "k")
		if c.want == "unreadable" {
			if !errors.Is(err, lapse.ErrUnknownOutcome) {
				t.Errorf("a refund answered %s: %+v, %v; want ErrUnknownOutcome", c.answer, rf, err)
			}
			requireTransient(t, "a refund query answered "+c.answer, qerr)
			continue
		}
		if err != nil || rf.Currency != c.want || qerr != nil || q.Currency != c.want {
			t.Errorf("answered %s: Refund %+v, %v; RefundQuery %+v, %v; want currency %q", c.answer, rf, err, q, qerr, c.want)
		}
	}
}

// TestHTTPProviderUnreadableTime: an answer whose paid_at is not an RFC 3339
// time cannot be used, and its error (kept on a member's charge, a
// delivery's attempt, shown to operators and API callers) says so in words
// of ours, not Go's.
func TestHTTPProviderUnreadableTime(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"txn_id":"t1","order_no":"A-1","status":"paid","amount":1,"currency":"USD","paid_at":"yesterday"}`)
	}))
	t.Cleanup(srv.Close)
	p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{})
	ctx := context.Background()
	_, cerr := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "A-1", Amount: 1, Currency: "USD", Method: "pm"})
	if !errors.Is(cerr, lapse.ErrUnknownOutcome) {
		t.Errorf("a charge answered with a bad paid_at: %v; want ErrUnknownOutcome", cerr)
	}
	_, qerr := p.Query(ctx, "A-1")
	requireTransient(t, "a query answered with a bad paid_at", qerr)
	for _, err := range []error{cerr, qerr} {
		if msg := fmt.Sprint(err); !strings.Contains(msg, "paid_at: must be an RFC 3339 time") || strings.Contains(msg, "parsing time") {
			t.Errorf("error %q: want paid_at named in words of ours, not Go's parse error", msg)
		}
	}
}

func TestHTTPProviderReadTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select { // hangs after reading the request, as a gateway that lost it
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: the server can then close
	p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{ReadTimeout: 200 * time.Millisecond})
	ctx := context.Background()

	began := time.Now()
	_, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "A-1", Amount: 1, Currency: "USD", Method: "pm"})
	took := time.Since(began)
	if !errors.Is(err, lapse.ErrUnknownOutcome) || !errors.Is(err, payment.ErrProviderTimeout) {
		t.Errorf("a charge that got no answer: %v; want ErrUnknownOutcome and ErrProviderTimeout", err)
	}
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("a read timeout of 200ms took %v", took)
	}
	_, err = p.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "r", TxnID: "t", Amount: 1, Currency: "USD"})
	if !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Errorf("a refund that got no answer: %v; want ErrUnknownOutcome", err)
	}
	if _, err := p.Close(ctx, "A-1"); !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Errorf("a close that got no answer: %v; want ErrUnknownOutcome", err)
	}
	_, err = p.Query(ctx, "A-1")
	requireTransient(t, "a query that got no answer", err)
	if !errors.Is(err, payment.ErrProviderTimeout) {
		t.Errorf("a query that got no answer: %v; want ErrProviderTimeout", err)
	}
}

func TestHTTPProviderDroppedConnectionIsUnknown(t *testing.T) {
	t.Parallel()
	sb, p := newGateway(t, payment.SandboxConfig{UnknownRate: 1}, payment.HTTPProviderConfig{})
	ctx := context.Background()
	_, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "G-1", Amount: 990, Currency: "CNY", Method: "pm"})
	if !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("a charge whose connection dropped after it was applied: %v; want ErrUnknownOutcome", err)
	}
	q, err := p.Query(ctx, "G-1")
	if err != nil || q.Status != lapse.ProviderPaid || q.TxnID != sb.Payments()[0].TxnID {
		t.Errorf("Query after the lost answer: %+v, %v; want the charge, paid", q, err)
	}
	if _, err := p.Close(ctx, "A-1"); !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("a close whose connection dropped: %v; want ErrUnknownOutcome", err)
	}
	if q, err := p.Query(ctx, "A-1"); err != nil || q.Status != lapse.ProviderClosed {
		t.Errorf("Query after the lost close: %+v, %v; want closed", q, err)
	}
}

// TestHTTPProviderGatewayFailureIsUnknown: a charge answered 503 is not
// known to have failed (a 5xx may come from a proxy after the adapter
// charged): its outcome is unknown, and the query the caller makes before
// it charges again says whether it was made.
func TestHTTPProviderGatewayFailureIsUnknown(t *testing.T) {
	t.Parallel()
	sb, p := newGateway(t, payment.SandboxConfig{FailRate: 1}, payment.HTTPProviderConfig{})
	ctx := context.Background()
	_, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "G-1", Amount: 990, Currency: "CNY", Method: "pm"})
	if !errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, lapse.ErrRefused) {
		t.Errorf("a charge the gateway answered 503: %v; want an unknown outcome", err)
	}
	if n := len(sb.Payments()); n != 0 {
		t.Errorf("a failed charge left %d payments", n)
	}
	if _, err := p.Query(ctx, "G-1"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("Query after a charge answered 503: %v; want ErrProviderNotFound", err)
	}
}

func TestHTTPProviderNotSent(t *testing.T) {
	t.Parallel()
	closedPort := "http://" + testenv.Refused(t)
	for _, c := range []struct{ name, url string }{
		{"a closed port", closedPort},
		{"a host that drops SYNs", "http://" + testenv.Unanswered(t)},
	} {
		p := newHTTPProvider(t, c.url, payment.HTTPProviderConfig{ConnectTimeout: 200 * time.Millisecond, ReadTimeout: time.Minute})
		began := time.Now()
		_, err := p.Charge(context.Background(), &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "A-1", Amount: 1, Currency: "USD", Method: "pm"})
		requireTransient(t, "a charge to "+c.name, err)
		if !errors.Is(err, lapse.ErrNotSent) {
			t.Errorf("a charge to %s: %v; want ErrNotSent: nothing was charged", c.name, err)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("a charge to %s with a connect timeout of 200ms took %v", c.name, took)
		}
		_, err = p.Refund(context.Background(), &lapse.RefundRequest{IdempotencyKey: "r", TxnID: "t", Amount: 1, Currency: "USD"})
		requireTransient(t, "a refund to "+c.name, err)
		if !errors.Is(err, lapse.ErrNotSent) {
			t.Errorf("a refund to %s: %v; want ErrNotSent: nothing was refunded", c.name, err)
		}
		if _, err := p.Close(context.Background(), "A-1"); errors.Is(err, payment.ErrProviderTimeout) {
			t.Errorf("a close to %s: %v; a connect timeout is not a read timeout", c.name, err)
		}
	}
}

func TestHTTPProviderPoolBound(t *testing.T) {
	t.Parallel()
	sb, clock := newSandbox(t, payment.SandboxConfig{})
	gateway := sb.Handler()
	var inFlight, peak, calls atomic.Int32
	arrived := make(chan struct{}, 16)
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
		}
		arrived <- struct{}{}
		<-gate
		gateway.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{MaxConcurrent: 2, Clock: clock})
	ctx := context.Background()

	const callers = 6
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			_, err := p.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: fmt.Sprint("k", i), OrderNo: fmt.Sprint("G-", i), Amount: 1, Currency: "CNY", Method: "pm"})
			errs <- err
		}()
	}
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("two calls never reached the gateway")
		}
	}

	// A caller whose context ends while both slots are busy fails unsent.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := p.Query(short, "G-0")
	if !errors.Is(err, payment.ErrProviderBusy) || !errors.Is(err, lapse.ErrNotSent) || errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Errorf("Query with every slot busy: %v; want ErrProviderBusy", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls reached the gateway with 2 slots", n)
	}

	close(gate)
	for range callers {
		if err := <-errs; err != nil {
			t.Errorf("Charge: %v", err)
		}
	}
	if got := peak.Load(); got != 2 {
		t.Errorf("at most %d calls were in flight, want 2", got)
	}
	if n := len(sb.Payments()); n != callers {
		t.Errorf("%d payments, want %d", n, callers)
	}
}

func TestSandboxHandlerRefusesBadSignature(t *testing.T) {
	t.Parallel()
	sb, clock := newSandbox(t, payment.SandboxConfig{})
	srv := httptest.NewServer(sb.Handler())
	t.Cleanup(srv.Close)
	signer := &payment.HMAC{Secrets: [][]byte{sandboxSecret}}
	body := `{"order_no":"A-1","amount":100,"currency":"USD","method":"pm"}`
	post := func(path, key, sig, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		if sig != "" {
			req.Header.Set(payment.SignatureHeader, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	// The documented message: t "." method " " target "\n" key "\n" body.
	sign := func(method, target, key, body string, at time.Time) string {
		return signer.Sign([]byte(method+" "+target+"\n"+key+"\n"+body), at)
	}
	now := clock.Now()

	for _, c := range []struct {
		name, sig string
	}{
		{"no signature", ""},
		{"the wrong secret", (&payment.HMAC{Secrets: [][]byte{[]byte("wrong")}}).Sign([]byte("POST /charges\nk1\n"+body), now)},
		{"another key's signature", sign("POST", "/charges", "k2", body, now)},
		{"another path's signature", sign("POST", "/refunds", "k1", body, now)},
		{"another body's signature", sign("POST", "/charges", "k1", strings.Replace(body, "100", "1", 1), now)},
		{"a stale signature", sign("POST", "/charges", "k1", body, now.Add(-time.Hour))},
	} {
		if got := post("/charges", "k1", c.sig, body); got != http.StatusUnauthorized {
			t.Errorf("a charge with %s: HTTP %d, want 401", c.name, got)
		}
	}
	if n := len(sb.Payments()); n != 0 {
		t.Fatalf("requests with bad signatures made %d payments", n)
	}
	if got := post("/charges", "k1", sign("POST", "/charges", "k1", body, now), body); got != http.StatusOK {
		t.Errorf("a charge signed as documented: HTTP %d, want 200", got)
	}

	// A close signed for one order does not close another.
	if got := post("/payments/B-1/close", "", sign("POST", "/payments/A-1/close", "", "", now), ""); got != http.StatusUnauthorized {
		t.Errorf("a close replayed onto another order: HTTP %d, want 401", got)
	}

	p := newHTTPProvider(t, srv.URL, payment.HTTPProviderConfig{Secret: []byte("wrong"), Clock: clock})
	_, err := p.Query(context.Background(), "A-1")
	var se *payment.HTTPStatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized || !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("a provider with the wrong secret: %v; want HTTP 401, refused", err)
	}
}

func TestNewHTTPProviderRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []payment.HTTPProviderConfig{
		{BaseURL: "http://gw.example", Secret: nil},
		{BaseURL: "gw.example/pay", Secret: sandboxSecret},
		{BaseURL: "ftp://gw.example", Secret: sandboxSecret},
		{BaseURL: "http://gw.example?x=1", Secret: sandboxSecret},
		{BaseURL: "http://gw.example", Secret: sandboxSecret, ReadTimeout: -time.Second},
	} {
		if _, err := payment.NewHTTPProvider(cfg); err == nil {
			t.Errorf("NewHTTPProvider(%+v) succeeded", cfg)
		}
	}
	if _, err := payment.NewHTTPProvider(payment.HTTPProviderConfig{BaseURL: "https://gw.example/lapse/", Secret: sandboxSecret}); err != nil {
		t.Errorf("a valid config: %v", err)
	}
}
