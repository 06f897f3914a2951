package main

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lapsehq/lapse/port"
)

// demoMerchant is the merchant service of lapse demo: the stock port
// (--stock-port) and the card service (--card-port) of package port's
// protocol, served in the demo's process on localhost, and flaky on
// purpose. Of the calls it gets, failRate are answered 503 without being
// applied, and slowRate are applied and then answered after slowFor, past
// the port's read timeout, so that Lapse records an unknown outcome and asks
// (GET <URL>/<key>) before sending again. Cards of the product
// demoBrokenCard are never issued: the card service answers 503 every time,
// and their orders end in manual review. Each key is applied once.
type demoMerchant struct {
	failRate, slowRate float64
	slowFor            time.Duration

	mu      sync.Mutex
	rng     *rand.Rand
	applied map[string]bool // idempotency keys applied
	counts  merchantCounts
}

// merchantCounts are what the demo's merchant service was asked and how it
// answered.
type merchantCounts struct {
	Calls, Failed, Slow, Queries int // stock port
	CardCalls, CardFailed        int // card service
}

// demoBrokenCard is the card product that the demo's card service never
// issues.
const demoBrokenCard = "broken-gym"

func newDemoMerchant(failRate, slowRate float64, slowFor time.Duration) *demoMerchant {
	return &demoMerchant{failRate: failRate, slowRate: slowRate, slowFor: slowFor,
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), applied: map[string]bool{}}
}

// Counts returns the counts so far.
func (m *demoMerchant) Counts() merchantCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts
}

// serve serves the merchant service on a free port of localhost until ctx
// ends, and returns its base URL: the stock port is <URL>/stock, the card
// service <URL>/cards.
func (m *demoMerchant) serve(ctx context.Context) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stock", m.stock)
	mux.HandleFunc("GET /stock/{key}", m.query)
	mux.HandleFunc("POST /cards/{op}", m.cards)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return "http://" + ln.Addr().String(), nil
}

// stock is the stock port: POST <URL> with the event.
func (m *demoMerchant) stock(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(port.HeaderIdempotencyKey)
	_, _ = io.Copy(io.Discard, r.Body)
	if key == "" {
		http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.counts.Calls++
	x := m.rng.Float64()
	fail, slow := x < m.failRate, x >= m.failRate && x < m.failRate+m.slowRate
	before := m.applied[key]
	switch {
	case fail:
		m.counts.Failed++
	case slow:
		m.counts.Slow++
		m.applied[key] = true
	default:
		m.applied[key] = true
	}
	m.mu.Unlock()
	switch {
	case fail:
		http.Error(w, "simulated outage: nothing was applied", http.StatusServiceUnavailable)
		return
	case slow:
		select {
		case <-time.After(m.slowFor):
		case <-r.Context().Done():
			return
		}
	}
	if before {
		w.WriteHeader(http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// query answers whether a key was applied: GET <URL>/<key>.
func (m *demoMerchant) query(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.counts.Queries++
	done := m.applied[r.PathValue("key")]
	m.mu.Unlock()
	if !done {
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// cards is the card service: POST <URL>/issue and <URL>/revoke.
func (m *demoMerchant) cards(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Cards []struct {
			Product string `json:"product"`
		} `json:"cards"`
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	_ = json.Unmarshal(raw, &req)
	broken := false
	for _, c := range req.Cards {
		broken = broken || strings.EqualFold(c.Product, demoBrokenCard)
	}
	m.mu.Lock()
	m.counts.CardCalls++
	fail := broken || m.rng.Float64() < m.failRate
	if fail {
		m.counts.CardFailed++
	}
	m.mu.Unlock()
	if fail {
		http.Error(w, "simulated outage of the card service", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
