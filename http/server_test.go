package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/sqlite"
)

// start is the time every test's clock starts at.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// env is a running API over a real engine and a fresh SQLite file.
type env struct {
	t      *testing.T
	url    string
	clock  *lapse.ManualClock
	engine *engine.Engine
	store  lapse.Store
	server *lapsehttp.Server
	logs   *syncBuffer
	db     *sqlite.Store   // the store under any wrapper
	path   string          // its file
	access *access.Service // nil unless options.access is set
	prober *engine.Prober  // nil unless options.probe is set
}

// options adjust newEnv: wrap wraps the store (to inject faults), cfg is the
// server's config (its Logger is always the test's log buffer).
type options struct {
	wrap   func(lapse.Store) lapse.Store
	cfg    lapsehttp.Config
	reg    *prometheus.Registry
	engine func(*engine.Config) // adjusts the engine's config
	// access, when set, guards the server with an access.Service over the
	// store, on the env's clock, with cheap password hashes unless it says
	// otherwise.
	access *access.Config
	closer bool // the server has a closes.Closer
	// probe, when set, gives the server a prober of the engine, which
	// the env keeps.
	probe *engine.ProberConfig
	flows []*lapse.Flow // the engine's flows; default flows.Builtin()
}

func newEnv(t *testing.T) *env { return newEnvWith(t, options{}) }

func newEnvWith(t *testing.T, opt options) *env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	db, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var store lapse.Store = db
	if opt.wrap != nil {
		store = opt.wrap(db)
	}
	clock := lapse.NewManualClock(start)
	ecfg := engine.Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)}
	if opt.reg != nil {
		ecfg.Registerer = opt.reg
	}
	if opt.engine != nil {
		opt.engine(&ecfg)
	}
	fs := opt.flows
	if fs == nil {
		fs = flows.Builtin()
	}
	e, err := engine.New(store, fs, ecfg)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	logs := &syncBuffer{}
	cfg := opt.cfg
	var svc *access.Service
	if opt.access != nil {
		acfg := *opt.access
		acfg.Clock = clock
		if acfg.HashParams == nil {
			acfg.HashParams = fastHash
		}
		if svc, err = access.New(db, acfg); err != nil {
			t.Fatalf("access.New: %v", err)
		}
		cfg.Access = svc
	}
	if opt.closer {
		if cfg.Closer, err = closes.New(e, db); err != nil {
			t.Fatalf("closes.New: %v", err)
		}
	}
	var prober *engine.Prober
	if opt.probe != nil {
		if prober, err = engine.NewProber(e, *opt.probe); err != nil {
			t.Fatalf("engine.NewProber: %v", err)
		}
		cfg.Probe = prober
	}
	if cfg.Access == nil {
		cfg.Unauthenticated = true // access control has tests of its own (auth_test.go)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := lapsehttp.NewServer(e, cfg)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, clock: clock, engine: e, store: store, server: s, logs: logs, db: db, path: path, access: svc, prober: prober}
}

// response is an answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends body (JSON unless contentType says otherwise) and reads the answer.
func (e *env) do(method, path, body string) *response {
	e.t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	return e.doType(method, path, ct, body)
}

func (e *env) doType(method, path, contentType, body string) *response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return &response{status: res.StatusCode, header: res.Header, body: b}
}

// want fails the test unless the answer has status.
func (r *response) want(t *testing.T, status int) *response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body: %s", r.status, status, r.body)
	}
	return r
}

// order decodes a 2xx answer as an order.
func (r *response) order(t *testing.T) *lapse.Order {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var o lapse.Order
	if err := json.Unmarshal(r.body, &o); err != nil {
		t.Fatalf("decode order: %v; body: %s", err, r.body)
	}
	return &o
}

// problem decodes an error answer, checking that it is a well-formed RFC 9457
// problem with the answer's status.
func (r *response) problem(t *testing.T) *lapsehttp.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != lapsehttp.ContentTypeProblem {
		t.Fatalf("Content-Type %q, want %s; body: %s", ct, lapsehttp.ContentTypeProblem, r.body)
	}
	var p lapsehttp.Problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decode problem: %v; body: %s", err, r.body)
	}
	if p.Status != r.status || p.Type != "about:blank" || p.Title != http.StatusText(r.status) || p.Detail == "" || p.Code == "" {
		t.Fatalf("malformed problem for status %d: %+v", r.status, p)
	}
	return &p
}

// syncBuffer is a log sink that handlers may write to concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("GET", "/healthz", "").want(t, http.StatusOK)
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	t.Run("default pings the store", func(t *testing.T) {
		t.Parallel()
		newEnv(t).do("GET", "/readyz", "").want(t, http.StatusOK)
	})
	t.Run("not ready", func(t *testing.T) {
		t.Parallel()
		e := newEnvWith(t, options{cfg: lapsehttp.Config{Ready: func(context.Context) error {
			return lapse.Errorf(lapse.EUNAVAILABLE, "draining for shutdown")
		}}})
		for range 20 {
			p := e.do("GET", "/readyz", "").want(t, http.StatusServiceUnavailable).problem(t)
			if p.Code != lapse.EUNAVAILABLE || !strings.Contains(p.Detail, "draining for shutdown") {
				t.Fatalf("problem %+v, want code unavailable with the reason", p)
			}
		}
		// Anyone may ask, as often as they like: logged once a burst.
		if n := strings.Count(e.logs.String(), "level=WARN"); n != 1 || !strings.Contains(e.logs.String(), "draining for shutdown") {
			t.Errorf("20 answers not ready logged %d warnings, want one with the reason:\n%s", n, e.logs)
		}
	})
	// Anyone may ask, as often as they like, and the default check takes a
	// database connection: /readyz checks at most once a second, and the
	// requests meanwhile take its answer.
	t.Run("checked once a second", func(t *testing.T) {
		t.Parallel()
		var checks atomic.Int64
		e := newEnvWith(t, options{cfg: lapsehttp.Config{Ready: func(context.Context) error {
			checks.Add(1)
			return nil
		}}})
		for range 20 {
			e.do("GET", "/readyz", "").want(t, http.StatusOK)
		}
		if n := checks.Load(); n != 1 {
			t.Fatalf("20 /readyz within a second ran %d checks, want 1", n)
		}
		e.clock.Advance(time.Second)
		e.do("GET", "/readyz", "").want(t, http.StatusOK)
		if n := checks.Load(); n != 2 {
			t.Fatalf("a /readyz a second later ran %d checks in all, want 2", n)
		}
	})
	// A driver's text names the database, its user and its host: anyone
	// may ask /readyz, so only the log has it.
	t.Run("the database down", func(t *testing.T) {
		t.Parallel()
		const driver = `failed to connect to user=lapse_prod database=shop: 10.1.2.3:5432: password authentication failed`
		for name, ready := range map[string]func(context.Context) error{
			"store":      lapsehttp.StoreReady(pinger{errors.New(driver)}),
			"store said": lapsehttp.StoreReady(pinger{fmt.Errorf("%w: %w", lapse.ErrStoreUnavailable, errors.New(driver))}),
			"other":      func(context.Context) error { return errors.New(driver) },
		} {
			e := newEnvWith(t, options{cfg: lapsehttp.Config{Ready: ready}})
			p := e.do("GET", "/readyz", "").want(t, http.StatusServiceUnavailable).problem(t)
			if p.Code != lapse.EUNAVAILABLE || strings.Contains(p.Detail, "lapse_prod") || strings.Contains(p.Detail, "10.1.2.3") {
				t.Errorf("%s: problem %+v, want code unavailable without the driver's text", name, p)
			}
			if name != "other" && !strings.Contains(p.Detail, lapse.ErrorMessage(lapse.ErrStoreUnavailable)) {
				t.Errorf("%s: detail %q, want it to say the database is unavailable", name, p.Detail)
			}
			if !strings.Contains(e.logs.String(), "password authentication failed") {
				t.Errorf("%s: the log does not have the driver's text:\n%s", name, e.logs)
			}
		}
	})
}

// pinger is a store whose ping answers err.
type pinger struct{ err error }

func (p pinger) Ping(context.Context) error { return p.err }

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnvWith(t, options{reg: reg, cfg: lapsehttp.Config{Gatherer: reg}})
	e.do("POST", "/v1/orders", createBody("m-1", "")).want(t, http.StatusCreated)
	e.do("POST", "/v1/orders/m-1/events", `{"event":"CANCEL"}`).want(t, http.StatusOK)
	r := e.do("GET", "/metrics", "").want(t, http.StatusOK)
	if !strings.Contains(string(r.body), `lapse_transitions_total{event="CANCEL",fired_by="api",flow="checkout"} 1`) {
		t.Fatalf("metrics lack the CANCEL transition:\n%s", r.body)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.do("GET", "/v2/orders", "").want(t, http.StatusNotFound).problem(t)
	if p.Code != lapse.ENOTFOUND {
		t.Fatalf("code %q, want not_found", p.Code)
	}
	for _, tt := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/orders", "GET, HEAD, POST"},
		{"PUT", "/v1/orders/o-1", "GET, HEAD"},
		{"GET", "/v1/orders/o-1/deadline", "PATCH"},
		{"POST", "/healthz", "GET, HEAD"},
	} {
		r := e.do(tt.method, tt.path, "").want(t, http.StatusMethodNotAllowed)
		r.problem(t)
		if got := r.header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
}

// faultyStore breaks OrderGet for two magic order numbers.
type faultyStore struct{ lapse.Store }

const secret = "disk I/O error in /var/lib/secret-volume"

func (s faultyStore) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	switch orderNo {
	case "panic":
		panic("store exploded")
	case "broken":
		return nil, errors.New(secret)
	}
	return s.Store.OrderGet(ctx, orderNo)
}

func TestPanicIsA500Problem(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{wrap: func(s lapse.Store) lapse.Store { return faultyStore{s} }})
	p := e.do("GET", "/v1/orders/panic", "").want(t, http.StatusInternalServerError).problem(t)
	if p.Code != lapse.EINTERNAL || strings.Contains(p.Detail, "exploded") {
		t.Fatalf("problem %+v, want code internal without the panic's text", p)
	}
	if !strings.Contains(e.logs.String(), "store exploded") {
		t.Fatalf("the panic was not logged:\n%s", e.logs)
	}
	e.do("GET", "/healthz", "").want(t, http.StatusOK) // still serving
}

func TestInternalErrorIsLoggedOnceAndHidden(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{wrap: func(s lapse.Store) lapse.Store { return faultyStore{s} }})
	r := e.do("GET", "/v1/orders/broken", "").want(t, http.StatusInternalServerError)
	if p := r.problem(t); p.Code != lapse.EINTERNAL || p.Detail != "internal error" {
		t.Fatalf("problem %+v, want code internal and a generic detail", p)
	}
	if strings.Contains(string(r.body), "secret") {
		t.Fatalf("the answer leaks the error: %s", r.body)
	}
	if n := strings.Count(e.logs.String(), secret); n != 1 {
		t.Fatalf("the error was logged %d times, want once:\n%s", n, e.logs)
	}
}

// downStore fails every OrderCreate as a store does while its database
// refuses connections.
type downStore struct{ lapse.Store }

func (downStore) OrderCreate(context.Context, *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	return nil, false, fmt.Errorf("postgres: create order: %w: %w", lapse.ErrStoreUnavailable, errors.New("FATAL: too many connections (SQLSTATE 53300)"))
}

// TestUnavailableIsRetryAfterAndLoggedOncePerBurst: while the database is
// unavailable, every create is a 503 with Retry-After and code unavailable,
// and the burst is logged once, not once per request.
func TestUnavailableIsRetryAfterAndLoggedOncePerBurst(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{wrap: func(s lapse.Store) lapse.Store { return downStore{s} }})
	for i := range 50 {
		r := e.do("POST", "/v1/orders", fmt.Sprintf(`{"order_no":"DOWN-%d","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"15m"}`, i))
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("create while the database is down: %d, Retry-After %q; want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
		}
		if p := r.problem(t); p.Code != lapse.EUNAVAILABLE || strings.Contains(p.Detail, "SQLSTATE") {
			t.Fatalf("problem %+v, want code unavailable without the driver's text", p)
		}
	}
	if n := strings.Count(e.logs.String(), "level=WARN"); n != 1 || !strings.Contains(e.logs.String(), "53300") {
		t.Errorf("50 creates while the database is down logged %d warnings, want one with the cause:\n%s", n, e.logs)
	}
}

// busyStore fails every OrderCreate as a store does when the database gave
// up on it: a lock wait past the lock timeout.
type busyStore struct{ lapse.Store }

func (busyStore) OrderCreate(context.Context, *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	return nil, false, fmt.Errorf("postgres: create order: %w: %w", lapse.ErrStoreBusy, errors.New("ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)"))
}

// TestBusyIsRetryAfter: a request the database gave up on (a lock wait
// past the lock timeout, a deadlock) is 503 with Retry-After and code
// unavailable, not 500.
func TestBusyIsRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{wrap: func(s lapse.Store) lapse.Store { return busyStore{s} }})
	r := e.do("POST", "/v1/orders", `{"order_no":"BUSY-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"15m"}`)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("create the database gave up on: %d, Retry-After %q; want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	if p := r.problem(t); p.Code != lapse.EUNAVAILABLE || strings.Contains(p.Detail, "SQLSTATE") || p.Detail != lapse.ErrorMessage(lapse.ErrStoreBusy) {
		t.Fatalf("problem %+v, want code unavailable with the busy message, without the driver's text", p)
	}
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("GET", "/v1/orders/nope", "").want(t, http.StatusNotFound)
	logs := e.logs.String()
	for _, want := range []string{"level=DEBUG", `msg="http request"`, "method=GET", "path=/v1/orders/nope", `route="GET /v1/orders/{order_no}"`, "status=404"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("request log lacks %s:\n%s", want, logs)
		}
	}
}

// TestLoadShedding fills the in-flight limit with a request the store holds
// up: the next API request is answered 429 with Retry-After at once, the
// probes still answer, and once the first finishes requests go through.
func TestLoadShedding(t *testing.T) {
	t.Parallel()
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	e := newEnvWith(t, options{
		cfg:  lapsehttp.Config{MaxInFlight: 1},
		wrap: func(s lapse.Store) lapse.Store { return &slowGet{Store: s, hold: hold, held: held} },
	})
	done := make(chan *response)
	go func() { done <- e.do("GET", "/v1/orders/SLOW", "") }()
	<-held
	r := e.do("GET", "/v1/orders/OTHER", "")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Errorf("request over the limit: %d, Retry-After %q; want 429 and 1", r.status, r.header.Get("Retry-After"))
	}
	if p := r.problem(t); p.Code != lapse.EUNAVAILABLE {
		t.Errorf("shed problem %+v", p)
	}
	e.do("GET", "/healthz", "").want(t, http.StatusOK)
	close(hold)
	(<-done).want(t, http.StatusNotFound)
	e.do("GET", "/v1/orders/OTHER", "").want(t, http.StatusNotFound)
}

// slowGet holds OrderGet of SLOW until hold closes.
type slowGet struct {
	lapse.Store
	hold <-chan struct{}
	held chan<- struct{}
}

func (s *slowGet) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	if orderNo == "SLOW" {
		s.held <- struct{}{}
		<-s.hold
	}
	return s.Store.OrderGet(ctx, orderNo)
}

// TestAnswersAreNotCached pins Cache-Control: no-store on every answer of
// the API, success or problem, since each names orders, payments, keys or
// operators that no cache on the way (a proxy, a signed-out operator's
// browser) may keep.
func TestAnswersAreNotCached(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, r := range []*response{
		e.do("POST", "/v1/orders", createBody("NC-1", "")).want(t, http.StatusCreated),
		e.do("GET", "/v1/orders/NC-1", "").want(t, http.StatusOK),
		e.do("GET", "/v1/orders/NC-missing", "").want(t, http.StatusNotFound),
		e.do("POST", "/v1/orders", "{").want(t, http.StatusBadRequest),
		e.do("DELETE", "/v1/orders", "").want(t, http.StatusMethodNotAllowed),
	} {
		if got := r.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("answer %d %s: Cache-Control %q, want no-store", r.status, r.body, got)
		}
	}
}

// TestRepeatedHeaderRefused pins that a request sending a header Lapse
// reads one value of (a credential, the idempotency key, the body's type, a
// provider's signature) more than once is refused, whatever the values, and
// changes nothing: which one would count is a guess.
func TestRepeatedHeaderRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, h := range []string{"Idempotency-Key", "Authorization", "Content-Type", "Lapse-Signature", "Stripe-Signature"} {
		req, err := http.NewRequest("POST", e.url+"/v1/orders", strings.NewReader(createBody("RH-1", "")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add(h, "application/json")
		if h != "Content-Type" {
			req.Header.Add(h, "another")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "the "+h+" header is sent 2 times") {
			t.Errorf("%s twice: %d %s; want 400 naming the header", h, res.StatusCode, body)
		}
	}
	e.do("GET", "/v1/orders/RH-1", "").want(t, http.StatusNotFound)
	e.do("POST", "/v1/orders", createBody("RH-1", "")).want(t, http.StatusCreated)
}
