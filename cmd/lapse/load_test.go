package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/lapsehq/lapse"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/payment"
)

// loadSecret signs the hmac callbacks of these tests.
const loadSecret = "load-secret-0123456789"

// TestSlowBodies opens 100 connections that send their headers and part of a
// body, then nothing: to the API, to payment callbacks and to the sandbox.
// While they hang, an order is created and paid by a signed callback, within
// 15 s; and every one of them is cut once the body deadline passes.
func TestSlowBodies(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--sandbox", "--hmac-secrets", loadSecret)
	// Paths that a ServeMux would answer with a redirect of its own, before
	// any handler that reads bodies under the deadline, among them.
	paths := []string{"/v1/orders", "/v1/payments/hmac/callback", "/sandbox/pay", "/v1/orders", "/v1/orders",
		"//v1/orders", "/a/../v1/orders", "/console", "/console/../v1/orders", "/sandbox"}
	var slow []net.Conn
	for i := range 100 {
		slow = append(slow, slowBody(t, p.URL, paths[i%len(paths)]))
	}
	opened := time.Now()

	quick := &http.Client{Timeout: 15 * time.Second, Transport: withKey{http.DefaultTransport}}
	create := map[string]any{"order_no": "SLOW-1", "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY", "ttl": "15m"}
	if code, body, _ := send(t, quick, "POST", p.URL+"/v1/orders", create, nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/orders beside 100 slow bodies = %d %s, want 201", code, body)
	}
	if code, body, _ := sendCallback(t, quick, p.URL, "SLOW-1", "T-SLOW-1"); code != http.StatusOK {
		t.Fatalf("payment callback beside 100 slow bodies = %d %s, want 200", code, body)
	}
	var o order
	if call(t, "GET", p.URL+"/v1/orders/SLOW-1", nil, &o); o.State != "PAID" {
		t.Fatalf("SLOW-1 is %s after its callback, want PAID", o.State)
	}
	if took := time.Since(opened); took > 15*time.Second {
		t.Errorf("create and pay took %v beside the slow bodies", took)
	}

	// The server answers each and closes it once the body deadline passes.
	cutBy := opened.Add(lapsehttp.DefaultBodyTimeout + 5*time.Second)
	var wg sync.WaitGroup
	for i, c := range slow {
		wg.Go(func() {
			_ = c.SetReadDeadline(cutBy)
			got, err := io.ReadAll(c)
			if err != nil {
				t.Errorf("slow body %d to %s was not cut within 5 s of the body deadline: %v (read %q)", i, c.LocalAddr(), err, got)
			} else if !bytes.HasPrefix(got, []byte("HTTP/1.1 4")) && !bytes.HasPrefix(got, []byte("HTTP/1.1 3")) {
				// A path not in its clean form is redirected to it.
				t.Errorf("slow body %d to %s: answered %q, want a 4xx (or a redirect) before the close", i, paths[i%len(paths)], got)
			}
		})
	}
	wg.Wait()
}

// TestCallbackReserve fills the in-flight slots that other requests may use
// with creates held up by a lock on the database: further creates are shed
// with 429, while a payment callback still gets a slot and pays its order
// once the lock is gone.
func TestCallbackReserve(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir, "--hmac-secrets", loadSecret, "--max-in-flight", "4", "--callback-reserve", "2")
	create := func(no string) map[string]any {
		return map[string]any{"order_no": no, "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY", "ttl": "15m"}
	}
	if code := call(t, "POST", p.URL+"/v1/orders", create("RES-PAY"), nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d", code)
	}

	// Another process holds SQLite's write lock: the server's writes wait
	// for it (up to its busy timeout, longer than this test holds it).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "lapse.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	lock, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	unlock := sync.OnceFunc(func() {
		if _, err := lock.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Error(err)
		}
		_ = lock.Close()
	})
	t.Cleanup(unlock)

	// Two creates that wait for the lock: each tries until it has a slot (a
	// poll below may hold one for a moment).
	held := make(chan int, 2)
	for i := range 2 {
		go func() {
			for {
				code := callQuiet("POST", p.URL+"/v1/orders", create(fmt.Sprintf("RES-HELD-%d", i)))
				if code != http.StatusTooManyRequests {
					held <- code
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	// Once both creates hold their slots, the others' share is used up.
	waitFor(t, 10*time.Second, func() bool {
		return callQuiet("GET", p.URL+"/v1/orders/RES-PAY", nil) == http.StatusTooManyRequests
	})
	if code, body, _ := send(t, client, "POST", p.URL+"/v1/orders", create("RES-SHED"), nil); code != http.StatusTooManyRequests {
		t.Errorf("create over the others' share = %d %s, want 429", code, body)
	}

	paid := make(chan int, 1)
	go func() {
		code, body, _ := sendCallback(t, client, p.URL, "RES-PAY", "T-RES-1")
		if code != http.StatusOK {
			t.Errorf("payment callback beside a full share = %d %s, want 200", code, body)
		}
		paid <- code
	}()
	select {
	case code := <-paid:
		t.Fatalf("the callback answered %d while the database was locked", code)
	case <-time.After(time.Second):
	}
	unlock()
	<-paid
	for range 2 {
		if code := <-held; code != http.StatusCreated {
			t.Errorf("a held create answered %d, want 201", code)
		}
	}
	var o order
	if call(t, "GET", p.URL+"/v1/orders/RES-PAY", nil, &o); o.State != "PAID" {
		t.Errorf("RES-PAY is %s, want PAID", o.State)
	}
}

// slowBody opens a connection that sends a POST to path with its headers and
// the start of a body that Content-Length says is longer, then nothing. It is
// closed when the test ends.
func slowBody(t *testing.T, base, path string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"order_no\": ", path, u.Host); err != nil {
		t.Fatal(err)
	}
	return c
}

// send sends body as JSON with extra headers and returns the status, body
// and header of the answer; status 0 when there was none.
func send(t *testing.T, c *http.Client, method, url string, body any, header http.Header) (int, string, http.Header) {
	t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header
}

// sendCallback sends the hmac provider's signed callback that order no was
// paid 2500 CNY in transaction txn.
func sendCallback(t *testing.T, c *http.Client, base, no, txn string) (int, string, http.Header) {
	t.Helper()
	now := time.Now()
	body, err := json.Marshal(payment.Notice{Kind: lapse.NoticePaid, TxnID: txn, OrderNo: no, Amount: 2500, Currency: "CNY", PaidAt: now})
	if err != nil {
		t.Fatal(err)
	}
	signer := &payment.HMAC{Secrets: [][]byte{[]byte(loadSecret)}}
	return send(t, c, "POST", base+"/v1/payments/hmac/callback", body, http.Header{payment.SignatureHeader: {signer.Sign(body, now)}})
}
