package main_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/payment"
)

// TestSandboxSharedByTwoProcesses runs two `lapse serve --sandbox` on one
// PostgreSQL: they are one sandbox gateway. A customer pays through A, the
// merchant refunds through B, and B's deliverer refunds at the gateway what
// A took; a late payment made through A is refunded by whichever deliverer
// takes it; an order the closer closed at the gateway cannot be paid through
// either process. Then `lapse reconcile` finds every payment settled.
func TestSandboxSharedByTwoProcesses(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	const secret = "shared-secret"
	args := []string{"--db", dsn, "--sandbox", "--sandbox-secret", secret, "--payment-grace", "checkout=1s"}
	// A looks for deliveries only when it writes events itself (or hourly),
	// so that the refund the merchant asks of B is B's deliverer's to make.
	a := startServe(t, t.TempDir(), append(args, "--delivery-poll", "1h")...)
	b := startServe(t, t.TempDir(), append(args, "--delivery-poll", "100ms")...)

	create := func(p *proc, no, ttl string) {
		t.Helper()
		body := map[string]any{"order_no": no, "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY", "ttl": ttl}
		if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
			t.Fatalf("POST /v1/orders %s = %d", no, code)
		}
	}
	pay := func(p *proc, no string) int {
		t.Helper()
		return call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": no, "amount": 2500, "currency": "CNY"}, nil)
	}
	state := func(p *proc, no string) string {
		var o order
		call(t, "GET", p.URL+"/v1/orders/"+no, nil, &o)
		return o.State
	}
	payments := func(p *proc, no string) []paymentView {
		var out struct{ Payments []paymentView }
		call(t, "GET", p.URL+"/v1/orders/"+no+"/payments", nil, &out)
		return out.Payments
	}

	// A late payment, taken through A after the order closed: recorded
	// late, refunded through the gateway by A's or B's deliverer.
	create(a, "SH-2", "1s")
	waitFor(t, 10*time.Second, func() bool { return state(b, "SH-2") == "CLOSED" })
	if code := pay(a, "SH-2"); code != 200 {
		t.Fatalf("POST A /sandbox/pay SH-2 = %d", code)
	}
	waitOrder(t, b.URL, "SH-2", 15*time.Second, func() bool {
		ps := payments(b, "SH-2")
		return len(ps) == 1 && ps[0].Status == "refunded"
	})

	// The customer started paying SH-3 and never paid: the closer of A or
	// B closed its payment at the gateway, so neither process takes one.
	create(b, "SH-3", "1s")
	if code := call(t, "POST", b.URL+"/v1/orders/SH-3/payment-intents", map[string]any{"provider": "sandbox"}, nil); code != 200 {
		t.Fatalf("payment-intents SH-3 = %d", code)
	}
	waitFor(t, 15*time.Second, func() bool { return state(a, "SH-3") == "CLOSED" })
	for name, p := range map[string]*proc{"A": a, "B": b} {
		if code := pay(p, "SH-3"); code != 409 {
			t.Errorf("paying SH-3 through %s after the closer closed it at the gateway = %d, want 409", name, code)
		}
	}

	// Paid through A, refunded through B.
	create(a, "SH-1", "15m")
	if code := pay(a, "SH-1"); code != 200 {
		t.Fatalf("POST A /sandbox/pay SH-1 = %d", code)
	}
	if st := state(a, "SH-1"); st != "PAID" {
		t.Fatalf("SH-1 after paying through A: %s", st)
	}
	if code := call(t, "POST", b.URL+"/v1/orders/SH-1/refunds", map[string]any{"amount": 2500, "reason": "returned"}, nil); code != 201 {
		t.Fatalf("POST B /v1/orders/SH-1/refunds = %d", code)
	}
	waitOrder(t, b.URL, "SH-1", 15*time.Second, func() bool { return state(b, "SH-1") == "REFUNDED" })
	var refunds struct {
		Refunds []struct{ Status string }
	}
	call(t, "GET", a.URL+"/v1/orders/SH-1/refunds", nil, &refunds)
	if len(refunds.Refunds) != 1 || refunds.Refunds[0].Status != "succeeded" {
		t.Errorf("refunds of SH-1: %+v, want one succeeded", refunds.Refunds)
	}
	if ps := payments(a, "SH-1"); len(ps) != 1 || ps[0].Status != "applied" {
		t.Errorf("payments of SH-1: %+v, want one applied (and refunded with the order), none in review", ps)
	}
	// B's deliverer made the refund: A never saw the request.
	var deliveries struct {
		Deliveries []struct {
			EventType  string `json:"event_type"`
			Subscriber string
			Status     string
			History    []struct{ Worker string }
		}
	}
	// The deliverer records the refund, which makes the order REFUNDED,
	// before it marks its delivery done: wait for that too (up to 15 s).
	bWorker := fmt.Sprintf("/%d", b.cmd.Process.Pid)
	done, refunded := false, false
	for stop := time.Now().Add(15 * time.Second); !done && time.Now().Before(stop); time.Sleep(50 * time.Millisecond) {
		call(t, "GET", b.URL+"/v1/orders/SH-1/deliveries", nil, &deliveries)
		for _, d := range deliveries.Deliveries {
			if d.Subscriber == "refund" && d.Status == "done" && len(d.History) > 0 {
				done, refunded = true, strings.HasSuffix(d.History[len(d.History)-1].Worker, bWorker)
			}
		}
	}
	if !refunded {
		t.Errorf("the refund of SH-1 was not made by B's deliverer (%s): %+v", bWorker, deliveries.Deliveries)
	}
	// Both processes' gateways hold the payment as refunded, and answer a
	// request signed with the shared secret.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, p := range map[string]*proc{"A": a, "B": b} {
		gw, err := payment.NewHTTPProvider(payment.HTTPProviderConfig{Name: "sandbox", BaseURL: p.URL + "/sandbox", Secret: []byte(secret)})
		if err != nil {
			t.Fatal(err)
		}
		if pp, err := gw.Query(ctx, "SH-1"); err != nil || pp.Status != lapse.ProviderRefunded {
			t.Errorf("the gateway of %s has SH-1's payment as %+v, %v; want refunded", name, pp, err)
		}
	}

	out, err := exec.Command(lapseBin, "reconcile", "--db", dsn).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CNY (minor units): captured 5000 = applied 0 + refunded 5000 + in review 0 + not settled 0") {
		t.Errorf("lapse reconcile: %v\n%s", err, out)
	}
}

// TestSandboxSecretKeptInTheDatabase: processes started without
// --sandbox-secret on one database sign with the secret the first of them
// kept there, so that one gateway answers them all; one started with
// another secret uses it, and says that it differs.
func TestSandboxSecretKeptInTheDatabase(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	a := startServe(t, t.TempDir(), "--db", dsn, "--sandbox")
	b := startServe(t, t.TempDir(), "--db", dsn, "--sandbox")
	c := startServe(t, t.TempDir(), "--db", dsn, "--sandbox", "--sandbox-secret", "another-secret")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var kept []byte
	if err := conn.QueryRow(ctx, `SELECT secret FROM sandbox_gateways WHERE gateway = 'sandbox'`).Scan(&kept); err != nil || len(kept) < 16 {
		t.Fatalf("the kept secret: %q, %v", kept, err)
	}
	// A signed request for an order the gateway does not know is answered
	// 404 when its signature verifies, 401 otherwise.
	verifies := func(p *proc, secret []byte) bool {
		gw, err := payment.NewHTTPProvider(payment.HTTPProviderConfig{Name: "sandbox", BaseURL: p.URL + "/sandbox", Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		_, err = gw.Query(ctx, "NOBODY")
		return errors.Is(err, lapse.ErrProviderNotFound)
	}
	if !verifies(a, kept) || !verifies(b, kept) {
		t.Errorf("A and B, started without a secret, do not both take the kept one")
	}
	if !verifies(c, []byte("another-secret")) || verifies(c, kept) {
		t.Errorf("C does not sign with its --sandbox-secret")
	}
	for name, p := range map[string]*proc{"A": a, "B": b, "C": c} {
		warned := strings.Contains(p.Logs(), "differs from the secret kept in the database")
		if warned != (p == c) {
			t.Errorf("%s warned about its secret: %v", name, warned)
		}
	}
}
