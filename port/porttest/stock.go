// Package porttest is a fake merchant stock service for tests of Lapse and of
// package port. It speaks the port protocol (see package port) over a real
// in-memory stock ledger, deduplicates by Idempotency-Key like a careful
// merchant, and injects faults that a test switches at run time: failures,
// lost answers, hangs, an outage, latency, a pause.
//
// Mounted at any path P, it takes deliveries as POST P and query-backs as
// GET P/<key>. It reads an event's type and its order from the body
// ({"type": …, "order": {"order_no": …, "items": [{"sku": …, "qty": …}]}})
// and moves stock as Lapse's own ledger does:
//
//	order.created   reserve the order's items (422 when a SKU is unknown or short)
//	order.closed    release what the order holds (422 when it holds nothing)
//	order.paid      consume what the order holds (422 when it holds nothing)
//	anything else   applied, with no stock move
//
// A key applied once is answered 409 ever after and changes nothing.
package porttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options configure a StockService.
type Options struct {
	// Stock is the on-hand quantity of each SKU at the start; other SKUs are
	// unknown and refused.
	Stock map[string]int64
	// Seed seeds the source the faults are drawn from: the same seed and the
	// same sequence of deliveries give the same faults.
	Seed uint64
	// Faults are the faults at the start; see SetFaults.
	Faults Faults
	// DisableDedup applies every delivery, even of a key already applied, as
	// a merchant that trusts its caller to send once would. The ledger still
	// refuses what it cannot do (releasing an order twice). Then
	// AssertAppliedAtMostOnce checks the caller rather than the service:
	// useful with hangs, which Lapse must resolve by query-back; not with
	// ApplyThenFailRate, after which the protocol has the caller resend.
	DisableDedup bool
}

// Stats count what reached the service.
type Stats struct {
	Calls      int // every request, queries included
	Deliveries int // POSTs
	Queries    int // GETs
	Applied    int // deliveries applied (each key once, unless DisableDedup)
	Duplicates int // deliveries answered 409: their key was applied before
	Refused    int // deliveries answered 4xx for what they asked
	Injected   int // faults injected: 500s, hangs and 503s while Down
}

// StockService is the fake service, an http.Handler. It is safe for
// concurrent use; faults, pause and reads may change or run while requests
// are served.
type StockService struct {
	dedup bool
	quit  chan struct{} // closed by Close: held requests give up
	once  sync.Once

	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	paused   chan struct{} // non-nil while paused; closed by Resume
	stock    map[string]*line
	holds    map[string]map[string]int64 // order_no → sku → qty held
	moves    []Move
	applied  map[string]int // key → times applied
	sent     map[string]int // key → times delivered
	stats    Stats
	inFlight int
	peak     int
	changed  chan struct{} // closed and replaced whenever inFlight changes
}

// NewStockService returns a service with opts. It panics on invalid faults
// or a negative stock, as a test's mistake.
func NewStockService(opts Options) *StockService {
	if err := opts.Faults.validate(); err != nil {
		panic(err)
	}
	s := &StockService{
		dedup:   !opts.DisableDedup,
		quit:    make(chan struct{}),
		rng:     rand.New(rand.NewPCG(opts.Seed, 0x1a95e)),
		faults:  opts.Faults,
		stock:   map[string]*line{},
		holds:   map[string]map[string]int64{},
		applied: map[string]int{},
		sent:    map[string]int{},
		changed: make(chan struct{}),
	}
	for sku, q := range opts.Stock {
		if q < 0 {
			panic("porttest: negative stock for " + sku)
		}
		s.stock[sku] = &line{initial: q, onHand: q}
	}
	return s
}

// Close releases every held request (paused, hanging or delayed): each drops
// its connection. Close the service before the server that runs it, whose
// Close waits for handlers.
func (s *StockService) Close() { s.once.Do(func() { close(s.quit) }) }

// ServeHTTP serves the port protocol.
func (s *StockService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.stats.Calls++
	switch r.Method {
	case http.MethodPost:
		s.stats.Deliveries++
	case http.MethodGet:
		s.stats.Queries++
	}
	faults, paused := s.faults, s.paused
	s.setInFlight(+1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.setInFlight(-1)
		s.mu.Unlock()
	}()

	if faults.Down {
		s.count(func(st *Stats) { st.Injected++ })
		answer(w, http.StatusServiceUnavailable, "down")
		return
	}
	if faults.Latency > 0 {
		t := time.NewTimer(faults.Latency)
		defer t.Stop()
		hold(r.Context(), s.quit, t.C)
	}
	if paused != nil {
		hold(r.Context(), s.quit, paused)
	}
	switch r.Method {
	case http.MethodPost:
		s.deliver(w, r)
	case http.MethodGet:
		s.query(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		answer(w, http.StatusMethodNotAllowed, "use POST to deliver, GET to query")
	}
}

// hold waits for release; when the client gives up or quit closes first,
// the connection is dropped without an answer. A nil release hangs.
func hold[T any](ctx context.Context, quit <-chan struct{}, release <-chan T) {
	select {
	case <-release:
		return
	case <-ctx.Done():
	case <-quit:
	}
	panic(http.ErrAbortHandler)
}

func (s *StockService) deliver(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		s.count(func(st *Stats) { st.Refused++ })
		answer(w, http.StatusBadRequest, "Idempotency-Key is required")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return // the client is gone
	}
	var ev orderEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		s.count(func(st *Stats) { st.Refused++ })
		answer(w, http.StatusBadRequest, "the body is not a JSON event: "+err.Error())
		return
	}
	if typ := r.Header.Get("Lapse-Event-Type"); typ != ev.Type && typ != "" {
		s.count(func(st *Stats) { st.Refused++ })
		answer(w, http.StatusBadRequest, "Lapse-Event-Type "+typ+" differs from the body's type "+ev.Type)
		return
	}
	if no := r.Header.Get("Lapse-Order-No"); ev.Order != nil && no != "" && no != ev.Order.OrderNo {
		s.count(func(st *Stats) { st.Refused++ })
		answer(w, http.StatusBadRequest, "Lapse-Order-No "+no+" differs from the body's order_no "+ev.Order.OrderNo)
		return
	}

	s.mu.Lock()
	s.sent[key]++
	f := s.faults.pick(s.rng.Float64())
	status, msg := 0, ""
	if f == noFault || f == applyThenFailFault || (f == hangFault && s.faults.HangApplies) {
		status, msg = s.apply(key, &ev)
	}
	if f != noFault {
		s.stats.Injected++
	}
	s.mu.Unlock()

	switch f {
	case failFault:
		answer(w, http.StatusInternalServerError, "injected failure: not applied")
	case applyThenFailFault:
		answer(w, http.StatusInternalServerError, "injected failure after: "+msg)
	case hangFault:
		hold[struct{}](r.Context(), s.quit, nil)
	default:
		answer(w, status, msg)
	}
}

func (s *StockService) query(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	s.mu.Lock()
	n := s.applied[key]
	s.mu.Unlock()
	if n == 0 {
		answer(w, http.StatusNotFound, "not applied")
		return
	}
	answer(w, http.StatusOK, "applied")
}

func answer(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func (s *StockService) count(f func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.stats)
}

// setInFlight moves the in-flight count, with s.mu held, and wakes its
// waiters.
func (s *StockService) setInFlight(d int) {
	s.inFlight += d
	s.peak = max(s.peak, s.inFlight)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Stats returns the counters.
func (s *StockService) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Applied returns how many times key was applied: 0 or 1 with
// deduplication on.
func (s *StockService) Applied(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

// AppliedKeys returns every applied key with how many times it was applied.
func (s *StockService) AppliedKeys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.applied)
}

// Sent returns how many deliveries of key reached the service, whatever
// became of them.
func (s *StockService) Sent(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[key]
}

// InFlight returns how many requests are being served now, and the most
// there ever were at once.
func (s *StockService) InFlight() (now, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight, s.peak
}

// WaitInFlight waits until exactly n requests are being served, and returns
// ctx's error if that does not happen before ctx ends.
func (s *StockService) WaitInFlight(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		now, changed := s.inFlight, s.changed
		s.mu.Unlock()
		if now == n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("porttest: %d requests in flight, waited for %d: %w", now, n, ctx.Err())
		}
	}
}
