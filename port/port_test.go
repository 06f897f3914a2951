package port_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/port/porttest"
)

// start is the time every test's clock starts at.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// orderSeq makes order numbers unique across a test.
var orderSeq atomic.Int64

// newOrder returns a new order holding items.
func newOrder(items ...lapse.Item) *lapse.Order {
	return &lapse.Order{
		OrderNo: fmt.Sprintf("A-%d", orderSeq.Add(1)), Flow: "checkout", State: "UNPAID",
		Amount: 1990, Currency: "CNY", UserID: "u1", Items: items, CreatedAt: start, UpdatedAt: start,
	}
}

// deliveryOf returns a delivery of a new event of type typ about o, as the
// store hands it to a handler.
func deliveryOf(typ string, o *lapse.Order) *lapse.Delivery {
	ev := lapse.NewOutboxEvent(typ, o, nil)
	return &lapse.Delivery{ID: 1, EventID: ev.ID, EventType: ev.Type, OrderNo: o.OrderNo, Subscriber: "stock", Event: &ev}
}

// event returns a delivery of an event of type typ about a new order holding
// items.
func event(typ string, items ...lapse.Item) *lapse.Delivery {
	return deliveryOf(typ, newOrder(items...))
}

// newStock starts a fake stock service with 10 of sku TEA and 1 of sku CUP.
func newStock(t *testing.T) *porttest.StockServer {
	t.Helper()
	srv := porttest.NewStockServer(porttest.Options{Stock: map[string]int64{"TEA": 10, "CUP": 1}, Seed: 1})
	t.Cleanup(srv.Close)
	return srv
}

func newPort(t *testing.T, url string, cfg port.Config) *port.Port {
	t.Helper()
	cfg.URL = url
	p, err := port.New("stock", cfg)
	if err != nil {
		t.Fatalf("port.New: %v", err)
	}
	return p
}

func TestDeliverApplies(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{})
	o := newOrder(lapse.Item{SKU: "TEA", Qty: 3})
	if err := p.Deliver(context.Background(), deliveryOf(lapse.EventOrderCreated, o)); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if got := srv.Stock("TEA"); got.OnHand != 10 || got.Reserved != 3 {
		t.Errorf("TEA after order.created: on_hand %d, reserved %d; want 10, 3", got.OnHand, got.Reserved)
	}
	if err := p.Deliver(context.Background(), deliveryOf("order.paid", o)); err != nil {
		t.Fatalf("Deliver order.paid: %v", err)
	}
	if got := srv.Stock("TEA"); got.OnHand != 7 || got.Reserved != 0 {
		t.Errorf("TEA after order.paid: on_hand %d, reserved %d; want 7, 0", got.OnHand, got.Reserved)
	}
	srv.AssertLedger(t)
}

func TestDeliverDuplicateIsApplied(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{})
	d := event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 2})
	for i := range 2 {
		if err := p.Deliver(context.Background(), d); err != nil {
			t.Fatalf("Deliver #%d: %v", i+1, err)
		}
	}
	if st := srv.Stats(); st.Duplicates != 1 || st.Applied != 1 {
		t.Errorf("stats %+v: want 1 applied, 1 duplicate", st)
	}
	if got := srv.Stock("TEA").Reserved; got != 2 {
		t.Errorf("TEA reserved %d, want 2", got)
	}
	srv.AssertAppliedAtMostOnce(t)
}

func TestDeliverRefused(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{})
	err := p.Deliver(context.Background(), event(lapse.EventOrderCreated, lapse.Item{SKU: "CUP", Qty: 2}))
	if !errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Deliver of more than the stock: %v; want ErrRefused", err)
	}
	var se *port.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(se.Body, "1 available") {
		t.Errorf("error %v: want a StatusError 422 with the service's reason", err)
	}
	if got := srv.Stock("CUP"); got.Reserved != 0 {
		t.Errorf("a refused event changed the ledger: %+v", got)
	}
	if p.State() != port.BreakerClosed {
		t.Errorf("a refusal moved the breaker to %s", p.State())
	}
}

func TestDeliverServerErrorIsRetryable(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{FailRate: 1})
	p := newPort(t, srv.URL, port.Config{})
	d := event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 1})
	err := p.Deliver(context.Background(), d)
	var se *port.StatusError
	if !errors.As(err, &se) || se.StatusCode != 500 || errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Deliver to a failing service: %v; want a retryable StatusError 500", err)
	}
	srv.SetFaults(porttest.Faults{})
	if err := p.Deliver(context.Background(), d); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := srv.Applied(d.EventID); n != 1 {
		t.Errorf("applied %d times, want 1", n)
	}
}

func TestDeliverLostAnswerIsAppliedOnce(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{ApplyThenFailRate: 1})
	p := newPort(t, srv.URL, port.Config{})
	d := event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 4})
	if err := p.Deliver(context.Background(), d); err == nil || errors.Is(err, lapse.ErrRefused) {
		t.Fatalf("Deliver with a lost answer: %v; want a retryable error", err)
	}
	srv.SetFaults(porttest.Faults{})
	if err := p.Deliver(context.Background(), d); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := srv.Stock("TEA").Reserved; got != 4 {
		t.Errorf("TEA reserved %d, want 4", got)
	}
	if st := srv.Stats(); st.Duplicates != 1 {
		t.Errorf("stats %+v: the retry should be a duplicate", st)
	}
	srv.AssertAppliedAtMostOnce(t)
}

func TestDeliverStatusMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status  int
		want    string // ok, refused, retry
		breaker bool   // the answer counts as a failure
	}{
		{200, "ok", false}, {201, "ok", false}, {204, "ok", false}, {409, "ok", false},
		{400, "refused", false}, {404, "refused", false}, {410, "refused", false}, {422, "refused", false},
		{408, "retry", true}, {425, "retry", true}, {429, "retry", true},
		{500, "retry", true}, {502, "retry", true}, {503, "retry", true}, {302, "retry", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.status)
				fmt.Fprint(w, "reason\x00 from\nthe service")
			}))
			t.Cleanup(srv.Close)
			p := newPort(t, srv.URL, port.Config{Breaker: port.BreakerConfig{Failures: 1, Window: 1}})
			err := p.Deliver(context.Background(), event("order.closed"))
			switch tt.want {
			case "ok":
				if err != nil {
					t.Errorf("Deliver answered %d: %v; want nil", tt.status, err)
				}
			case "refused":
				if !errors.Is(err, lapse.ErrRefused) {
					t.Errorf("Deliver answered %d: %v; want ErrRefused", tt.status, err)
				}
			case "retry":
				if err == nil || errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrUnknownOutcome) {
					t.Errorf("Deliver answered %d: %v; want a retryable error", tt.status, err)
				}
			}
			if err != nil && !strings.Contains(err.Error(), `"reason  from the service"`) {
				t.Errorf("error %q: want the start of the body, printable", err)
			}
			if got := p.State() == port.BreakerOpen; got != tt.breaker {
				t.Errorf("after %d, breaker %s", tt.status, p.State())
			}
		})
	}
}

func TestHangAfterApplyIsResolvedByQuery(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{HangRate: 1, HangApplies: true})
	p := newPort(t, srv.URL, port.Config{ReadTimeout: 200 * time.Millisecond})
	d := event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 1})
	began := time.Now()
	err := p.Deliver(context.Background(), d)
	if !errors.Is(err, lapse.ErrUnknownOutcome) || !errors.Is(err, port.ErrReadTimeout) {
		t.Fatalf("Deliver to a hanging service: %v; want ErrUnknownOutcome after ErrReadTimeout", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the read timeout of 200ms took %v", took)
	}
	srv.SetFaults(porttest.Faults{})
	applied, err := p.Query(context.Background(), d)
	if err != nil || !applied {
		t.Fatalf("Query = %v, %v; want applied", applied, err)
	}
	if n := srv.Sent(d.EventID); n != 1 {
		t.Errorf("sent %d times: the caller resolved it without a second delivery", n)
	}
	if got := srv.Stock("TEA").Reserved; got != 1 {
		t.Errorf("TEA reserved %d, want 1", got)
	}
}

func TestHangBeforeApplyIsResolvedByQuery(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{HangRate: 1})
	p := newPort(t, srv.URL, port.Config{ReadTimeout: 200 * time.Millisecond})
	d := event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 1})
	if err := p.Deliver(context.Background(), d); !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Deliver to a hanging service: %v; want ErrUnknownOutcome", err)
	}
	srv.SetFaults(porttest.Faults{})
	applied, err := p.Query(context.Background(), d)
	if err != nil || applied {
		t.Fatalf("Query = %v, %v; want not applied", applied, err)
	}
	if err := p.Deliver(context.Background(), d); err != nil {
		t.Fatalf("Deliver after Query said not applied: %v", err)
	}
	if n := srv.Applied(d.EventID); n != 1 {
		t.Errorf("applied %d times, want 1", n)
	}
	srv.AssertLedger(t)
}

func TestDroppedConnectionAfterWriteIsUnknown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler) // the request was read; the answer never comes
	}))
	t.Cleanup(srv.Close)
	p := newPort(t, srv.URL, port.Config{})
	if err := p.Deliver(context.Background(), event("order.closed")); !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Deliver over a dropped connection: %v; want ErrUnknownOutcome", err)
	}
}

func TestConnectionRefusedIsNotSent(t *testing.T) {
	t.Parallel()
	p := newPort(t, "http://"+testenv.Refused(t), port.Config{})
	err := p.Deliver(context.Background(), event("order.closed"))
	if err == nil || errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, lapse.ErrRefused) {
		t.Fatalf("Deliver to a closed port: %v; want a plain retryable error", err)
	}
	if !strings.Contains(err.Error(), "not sent") {
		t.Errorf("error %q: want it to say nothing was sent", err)
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{ReadTimeout: 200 * time.Millisecond})
	d := event("order.refunded")
	if applied, err := p.Query(context.Background(), d); err != nil || applied {
		t.Fatalf("Query before delivery = %v, %v; want not applied", applied, err)
	}
	if err := p.Deliver(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if applied, err := p.Query(context.Background(), d); err != nil || !applied {
		t.Fatalf("Query after delivery = %v, %v; want applied", applied, err)
	}

	srv.SetFaults(porttest.Faults{Down: true})
	if _, err := p.Query(context.Background(), d); err == nil || errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Query of a service that is down: %v; want an error that is not a refusal", err)
	}
	srv.SetFaults(porttest.Faults{})
	srv.Pause()
	defer srv.Resume()
	if _, err := p.Query(context.Background(), d); !errors.Is(err, port.ErrReadTimeout) {
		t.Errorf("Query of a stalled service: %v; want ErrReadTimeout", err)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  port.Config
	}{
		{"", port.Config{URL: "http://stock.internal"}},
		{"stock", port.Config{}},
		{"stock", port.Config{URL: "stock.internal/reserve"}},
		{"stock", port.Config{URL: "ftp://stock.internal"}},
		{"stock", port.Config{URL: "http://stock.internal", ReadTimeout: -1}},
		{"stock", port.Config{URL: "http://stock.internal", MaxConcurrent: -1}},
		{"stock", port.Config{URL: "http://stock.internal", Breaker: port.BreakerConfig{Cooldown: -time.Second}}},
	} {
		if _, err := port.New(tt.name, tt.cfg); err == nil {
			t.Errorf("New(%q, %+v) = nil error", tt.name, tt.cfg)
		}
	}
	p, err := port.New("stock", port.Config{URL: "https://stock.internal/v1/effects"})
	if err != nil || p.State() != port.BreakerClosed || p.Name() != "stock" {
		t.Errorf("New with defaults = %v, %v", p, err)
	}
}
