package porttest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/port/porttest"
)

func newServer(t *testing.T, opts porttest.Options) *porttest.StockServer {
	t.Helper()
	if opts.Stock == nil {
		opts.Stock = map[string]int64{"TEA": 10, "CUP": 1}
	}
	srv := porttest.NewStockServer(opts)
	t.Cleanup(srv.Close)
	return srv
}

// post delivers an event of type typ about order orderNo holding items under
// key, and returns the status.
func post(t *testing.T, url, key, typ, orderNo string, items ...lapse.Item) int {
	t.Helper()
	body, err := json.Marshal(map[string]any{"id": key, "type": typ, "order": map[string]any{"order_no": orderNo, "items": items}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Lapse-Event-Type", typ)
	req.Header.Set("Lapse-Order-No", orderNo)
	return do(t, req)
}

func get(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func wantStatus(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: status %d, want %d", what, got, want)
	}
}

func TestLedger(t *testing.T) {
	t.Parallel()
	srv := newServer(t, porttest.Options{})
	tea := lapse.Item{SKU: "TEA", Qty: 3}

	wantStatus(t, "reserve", post(t, srv.URL, "k1", "order.created", "A-1", tea), 200)
	wantStatus(t, "same key again", post(t, srv.URL, "k1", "order.created", "A-1", tea), 409)
	wantStatus(t, "reserve another", post(t, srv.URL, "k2", "order.created", "A-2", tea, lapse.Item{SKU: "CUP", Qty: 1}), 200)
	if got := srv.Stock("TEA"); got.OnHand != 10 || got.Reserved != 6 {
		t.Errorf("TEA %+v, want on_hand 10, reserved 6", got)
	}
	wantStatus(t, "more than available", post(t, srv.URL, "k3", "order.created", "A-3", lapse.Item{SKU: "CUP", Qty: 1}), 422)
	wantStatus(t, "unknown sku", post(t, srv.URL, "k4", "order.created", "A-4", lapse.Item{SKU: "PEN", Qty: 1}), 422)
	wantStatus(t, "release", post(t, srv.URL, "k5", "order.closed", "A-1"), 200)
	wantStatus(t, "release again, new key", post(t, srv.URL, "k6", "order.closed", "A-1"), 422)
	wantStatus(t, "consume", post(t, srv.URL, "k7", "order.paid", "A-2"), 200)
	wantStatus(t, "an event without stock moves", post(t, srv.URL, "k8", "order.refunded", "A-2"), 200)
	if got := srv.Stock("TEA"); got.OnHand != 7 || got.Reserved != 0 {
		t.Errorf("TEA %+v, want on_hand 7, reserved 0", got)
	}
	if got := srv.Stock("CUP"); got.OnHand != 0 || got.Reserved != 0 {
		t.Errorf("CUP %+v, want on_hand 0, reserved 0", got)
	}
	if h := srv.Held("A-2"); h != nil {
		t.Errorf("A-2 still holds %v after it was paid", h)
	}
	if n := len(srv.Moves()); n != 6 {
		t.Errorf("%d moves, want 6: %+v", n, srv.Moves())
	}

	wantStatus(t, "query applied", get(t, srv.URL+"/k1"), 200)
	wantStatus(t, "query refused", get(t, srv.URL+"/k3"), 404)
	wantStatus(t, "query unknown", get(t, srv.URL+"/nope"), 404)

	st := srv.Stats()
	if st.Applied != 5 || st.Duplicates != 1 || st.Refused != 3 || st.Queries != 3 || st.Calls != 12 {
		t.Errorf("stats %+v", st)
	}
	srv.AssertLedger(t)
	srv.AssertAppliedAtMostOnce(t)
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	srv := newServer(t, porttest.Options{})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"type":"order.closed"}`))
	wantStatus(t, "no Idempotency-Key", do(t, req), 400)
	req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{`))
	req.Header.Set("Idempotency-Key", "k")
	wantStatus(t, "not JSON", do(t, req), 400)
	req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"type":"order.created","order":{"order_no":"A-1"}}`))
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Lapse-Order-No", "A-2")
	wantStatus(t, "order number differs", do(t, req), 400)
	req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"type":"order.created"}`))
	req.Header.Set("Idempotency-Key", "k")
	wantStatus(t, "no order", do(t, req), 422)
	req, _ = http.NewRequest(http.MethodDelete, srv.URL+"/k", nil)
	wantStatus(t, "DELETE", do(t, req), 405)
	if n := len(srv.AppliedKeys()); n != 0 {
		t.Errorf("bad requests applied %d keys", n)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	srv := newServer(t, porttest.Options{Faults: porttest.Faults{FailRate: 1}})
	wantStatus(t, "FailRate 1", post(t, srv.URL, "k1", "order.created", "A-1", lapse.Item{SKU: "TEA", Qty: 1}), 500)
	if srv.Applied("k1") != 0 {
		t.Error("a failed delivery was applied")
	}
	srv.SetFaults(porttest.Faults{ApplyThenFailRate: 1})
	wantStatus(t, "ApplyThenFailRate 1", post(t, srv.URL, "k1", "order.created", "A-1", lapse.Item{SKU: "TEA", Qty: 1}), 500)
	if srv.Applied("k1") != 1 {
		t.Error("apply-then-fail did not apply")
	}
	srv.SetFaults(porttest.Faults{Down: true})
	wantStatus(t, "Down", post(t, srv.URL, "k2", "order.refunded", "A-1"), 503)
	wantStatus(t, "Down, query", get(t, srv.URL+"/k1"), 503)
	srv.SetFaults(porttest.Faults{})
	wantStatus(t, "retry after a lost answer", post(t, srv.URL, "k1", "order.created", "A-1", lapse.Item{SKU: "TEA", Qty: 1}), 409)
	if st := srv.Stats(); st.Injected != 4 || st.Applied != 1 {
		t.Errorf("stats %+v: want 4 injected, 1 applied", st)
	}
	if got := srv.Stock("TEA").Reserved; got != 1 {
		t.Errorf("TEA reserved %d, want 1", got)
	}
}

func TestFaultsFollowTheSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) string {
		srv := newServer(t, porttest.Options{Seed: seed, Faults: porttest.Faults{FailRate: 0.3, ApplyThenFailRate: 0.3}})
		var b strings.Builder
		for i := range 32 {
			fmt.Fprint(&b, post(t, srv.URL, fmt.Sprint(i), "order.refunded", "A-1"), " ")
		}
		return b.String()
	}
	if a, b := run(7), run(7); a != b {
		t.Errorf("seed 7 gave\n%s\nthen\n%s", a, b)
	}
	if a, b := run(7), run(8); a == b {
		t.Errorf("seeds 7 and 8 gave the same faults: %s", a)
	}
}

func TestHangHoldsUntilTheClientGivesUp(t *testing.T) {
	t.Parallel()
	for _, applies := range []bool{false, true} {
		srv := newServer(t, porttest.Options{Faults: porttest.Faults{HangRate: 1, HangApplies: applies}})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"type":"order.refunded"}`))
		req.Header.Set("Idempotency-Key", "k")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("HangApplies %v: a hanging delivery was answered %d", applies, resp.StatusCode)
		}
		cancel()
		wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
		if err := srv.WaitInFlight(wait, 0); err != nil {
			t.Fatalf("the hanging request was not released when its client gave up: %v", err)
		}
		stop()
		if got := srv.Applied("k") == 1; got != applies {
			t.Errorf("HangApplies %v: applied %v", applies, got)
		}
	}
}

func TestCloseReleasesHeldRequests(t *testing.T) {
	t.Parallel()
	srv := porttest.NewStockServer(porttest.Options{})
	srv.Pause()
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/k")
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	srv.Close() // must not wait for the held request's client
	if err := <-done; err == nil {
		t.Error("a request held at Close was answered; want its connection dropped")
	}
}

// recorder is a testing.TB that keeps its failures instead of failing.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestAppliedAtMostOnceCatchesARepeat(t *testing.T) {
	t.Parallel()
	srv := newServer(t, porttest.Options{DisableDedup: true})
	wantStatus(t, "first", post(t, srv.URL, "k1", "order.refunded", "A-1"), 200)
	wantStatus(t, "repeat", post(t, srv.URL, "k1", "order.refunded", "A-1"), 200)
	rec := &recorder{TB: t}
	srv.AssertAppliedAtMostOnce(rec)
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "k1 applied 2 times") {
		t.Errorf("AssertAppliedAtMostOnce reported %q", rec.errors)
	}
}

func TestSetFaultsRejectsBadRates(t *testing.T) {
	t.Parallel()
	srv := newServer(t, porttest.Options{})
	for _, f := range []porttest.Faults{{FailRate: -0.1}, {HangRate: 1.1}, {FailRate: 0.6, ApplyThenFailRate: 0.6}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("SetFaults(%+v) did not panic", f)
				}
			}()
			srv.SetFaults(f)
		}()
	}
}
