// Package http is the JSON API of Lapse: orders, their events, deadlines and
// history over HTTP, plus the health, readiness, metrics and OpenAPI
// endpoints that operators and load balancers use. Callers import it as
// lapsehttp.
//
// Every error is an RFC 9457 problem (application/problem+json) whose status
// comes from the lapse error code; see problem.go for the one table.
package http

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/payment"
)

// DefaultMaxBodyBytes is the request body limit when Config.MaxBodyBytes is
// not set: room for the largest metadata (16 KiB) with a hundred item lines.
const DefaultMaxBodyBytes = 64 << 10

// Config configures a Server. The zero value is usable.
type Config struct {
	// Logger receives request logs (Debug), internal errors and recovered
	// panics (Error). Default: slog.Default().
	Logger *slog.Logger
	// Gatherer is what /metrics serves; pass the registry the engine and the
	// rest of the process register on. Default: an empty registry, so that
	// library code never reaches for the global one.
	Gatherer prometheus.Gatherer
	// Registerer receives the API's own metrics (requests, latency and
	// sheds by route; request_metrics.go). Default: none are registered.
	Registerer prometheus.Registerer
	// Ready reports whether the process should receive traffic: /readyz
	// answers 200 when it returns nil and 503 with its error otherwise. It
	// runs at most once a second, however often /readyz is asked, without
	// the caller's cancellation: it must bound its own time.
	// Default: the engine's store answers a ping within 2 s (StoreReady).
	Ready func(context.Context) error
	// MaxBodyBytes bounds a request body; a larger one is refused with 400.
	// Zero or negative: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Callbacks verify payment providers' callbacks, by provider name as in
	// POST /v1/payments/{provider}/callback.
	Callbacks map[string]lapse.PaymentCallback
	// MaxInFlight sheds load: beyond this many API requests in flight, a
	// request is answered 429 with Retry-After at once, rather than queue for
	// a database connection until it times out. A request counts once its
	// body is in (see BodyTimeout), so clients that are slow to send hold no
	// slot. The probes and /metrics are never shed. Zero: no limit.
	MaxInFlight int
	// CallbackReserve is how many of the MaxInFlight slots only payment
	// callbacks (POST /v1/payments/{provider}/callback) may take: other
	// requests are shed once MaxInFlight−CallbackReserve are in flight,
	// callbacks only at MaxInFlight, so that other traffic never keeps the
	// money that comes in from being recorded. A callback that is shed all
	// the same is answered 503 in its provider's format, which providers
	// retry. Zero: a quarter of MaxInFlight, rounded up; negative: none. At
	// most MaxInFlight−1 is reserved.
	CallbackReserve int
	// Access decides who may call: every route but the probes, the
	// document, payment callbacks and the login needs an API key or an
	// operator's session with the route's scope (see auth.go). Without it,
	// those routes answer 401, unless Unauthenticated is set.
	Access *access.Service
	// Unauthenticated serves every route without a credential, for tests
	// and for a caller who authenticates in front of the handler. Never set
	// it on a server that others can reach.
	Unauthenticated bool
	// Closer carries out manual closes (POST /v1/closes). Nil: those routes
	// answer 503.
	Closer *closes.Closer
	// TrustedOrigins are origins (scheme://host[:port]) other than the
	// server's own whose browsers may send requests with an operator's
	// session cookie; http.CrossOriginProtection refuses the rest.
	TrustedOrigins []string
	// TrustedProxies are the proxies (addresses or networks) whose
	// X-Forwarded-For says who the client is (internal/clientaddr): the
	// login limit and the audit log key on the client's address, which
	// behind a proxy is otherwise the proxy's, every client's. Default:
	// none; the connection's peer is the client.
	TrustedProxies []netip.Prefix
	// BodyTimeout bounds how long a request body may take to arrive after
	// its headers. The server reads every body in full, within BodyTimeout
	// and up to MaxBodyBytes, before the request counts against MaxInFlight
	// and before its handler runs; a body that takes longer is refused with
	// 400 and its connection closed. Zero or negative: DefaultBodyTimeout.
	BodyTimeout time.Duration
	// Probe is the synthetic probe that GET /v1/probe shows. Nil: the
	// probe is off.
	Probe *engine.Prober
}

// Server serves the Lapse HTTP API over an engine. It is safe for concurrent
// use; build it once with NewServer and mount Handler.
type Server struct {
	engine   *engine.Engine
	log      *slog.Logger
	gatherer prometheus.Gatherer
	ready    *readiness
	maxBody  int64
	mux      *http.ServeMux

	bodyTimeout time.Duration
	callbacks   map[string]lapse.PaymentCallback
	byPattern   map[string]*route

	access      *access.Service // nil: guarded routes answer 401
	accessDB    lapse.AccessStore
	open        bool // Config.Unauthenticated
	closer      *closes.Closer
	probe       *engine.Prober // nil: off
	crossOrigin *http.CrossOriginProtection
	proxies     []netip.Prefix  // Config.TrustedProxies
	inFlight    *inFlight       // nil: no limit
	shedCalls   *burst          // logs the payment callbacks shed
	forgedCalls *burst          // logs the payment callbacks refused before or by their signature check
	notReady    *burst          // logs the /readyz answered 503, which anyone may ask for
	requests    *requestMetrics // nil: no Config.Registerer
	unavailable *burst          // logs the 503s of a dependency that is down
}

// callbackPath is the route of payment providers' callbacks, which have
// in-flight slots of their own (Config.CallbackReserve).
const callbackPath = "/v1/payments/{provider}/callback"

// route is one endpoint. The route table below is the only place endpoints
// are declared, so that the OpenAPI test can check the document against it,
// scopes included.
type route struct {
	method  string
	path    string // a ServeMux pattern path, which is also OpenAPI path syntax
	handler http.HandlerFunc
	// scope is what a caller's key or role must grant; "" is a route open
	// to anyone (health, the document, payment callbacks, which their
	// providers sign, and the login), unless session is set.
	scope string
	// session routes are about the caller's own session (read it, end it,
	// give it a second factor): they need a credential that verifies, and
	// no scope, so that an operator whose role grants none can still log
	// out. Their handlers refuse a key, which has no session.
	session bool
	// audit names the action a call is in the audit log as; "" is a read,
	// or a route whose handler records its own rows (selfAudit).
	audit     string
	selfAudit bool
	// refusedAs, on a route that records no row of its own because the
	// access service writes its rows (a logout, a second factor), is the
	// action a refusal before the handler (cross-origin) is recorded as,
	// without its body, so that it is in the audit log as every refused
	// write is (S9).
	refusedAs string
	// target is what the action is about, as "kind:{path value}" or
	// "kind:body.field" (a string field of the JSON body).
	target string
	// risky actions need an operator's fresh second factor.
	risky bool
	// secret bodies are never kept in the audit log.
	secret bool
	// stake tells what a risky call puts at risk, for four eyes.
	stake func(s *Server, r *http.Request, body []byte) (stake, error)
	// query marks a GET route whose handler reads query parameters
	// (listQuery); every other GET route under /v1/ refuses any (noQuery).
	query bool
	// maxBody is the route's body limit when it is larger than
	// Config.MaxBodyBytes (bodyLimit): a manual close's order numbers.
	maxBody int64
}

func (s *Server) routes() []route {
	const (
		read  = access.ScopeOrdersRead
		write = access.ScopeOrdersWrite
		pay   = access.ScopePaymentsWrite
		ref   = access.ScopeRefundsWrite
		inv   = access.ScopeInventoryWrite
		ops   = access.ScopeOperationsWrite
	)
	return []route{
		{method: "POST", path: "/v1/orders", handler: s.createOrder, scope: write, audit: "order.create", target: "order:body.order_no"},
		{method: "GET", path: "/v1/orders", handler: s.listOrders, scope: read, query: true},
		{method: "GET", path: "/v1/orders/{order_no}", handler: s.getOrder, scope: read},
		{method: "POST", path: "/v1/orders/{order_no}/events", handler: s.fireEvent, scope: write, audit: "order.fire", target: "order:{order_no}", risky: true, stake: fireStake},
		{method: "GET", path: "/v1/orders/{order_no}/events", handler: s.listEvents, scope: read},
		{method: "PATCH", path: "/v1/orders/{order_no}/deadline", handler: s.setDeadline, scope: write, audit: "order.deadline", target: "order:{order_no}", risky: true, stake: deadlineStake},
		{method: "GET", path: "/v1/orders/{order_no}/transitions", handler: s.listTransitions, scope: read},
		{method: "GET", path: "/v1/orders/{order_no}/deliveries", handler: s.listDeliveries, scope: read},
		{method: "POST", path: "/v1/deliveries/{id}/retry", handler: s.retryDelivery, scope: ops, audit: "delivery.retry", target: "delivery:{id}", risky: true},
		{method: "POST", path: "/v1/orders/{order_no}/payment-intents", handler: s.startPayment, scope: pay, audit: "payment.intent", target: "order:{order_no}"},
		{method: "GET", path: "/v1/orders/{order_no}/payments", handler: s.listPayments, scope: read},
		{method: "POST", path: "/v1/orders/{order_no}/refunds", handler: s.refundOrder, scope: ref, audit: "refund.create", target: "order:{order_no}", risky: true, stake: refundStake},
		{method: "GET", path: "/v1/orders/{order_no}/refunds", handler: s.listRefunds, scope: read},
		{method: "POST", path: callbackPath, handler: s.paymentCallback},
		{method: "POST", path: "/v1/orders/{order_no}/retry", handler: s.retryOrder, scope: ops, audit: "order.retry", target: "order:{order_no}", risky: true, stake: retryStake},
		{method: "GET", path: "/v1/orders/{order_no}/cards", handler: s.listCards, scope: read},
		{method: "POST", path: "/v1/cards/{id}/visits", handler: s.useCard, scope: write, audit: "card.use", target: "card:{id}"},
		{method: "POST", path: "/v1/groups", handler: s.createGroup, scope: write, audit: "group.create", target: "group:body.group_id"},
		{method: "GET", path: "/v1/groups/{group_id}", handler: s.getGroup, scope: read},
		{method: "POST", path: "/v1/groups/{group_id}/members", handler: s.joinGroup, scope: write, audit: "group.join", target: "group:{group_id}"},
		{method: "POST", path: "/v1/groups/{group_id}/retry", handler: s.retryGroup, scope: pay, audit: "group.retry", target: "group:{group_id}", risky: true, stake: groupRetryStake},
		{method: "POST", path: "/v1/groups/{group_id}/abandon", handler: s.abandonGroup, scope: ref, audit: "group.abandon", target: "group:{group_id}", risky: true, stake: groupAbandonStake},
		{method: "PATCH", path: "/v1/groups/{group_id}/deadline", handler: s.setGroupDeadline, scope: ops, audit: "group.deadline", target: "group:{group_id}", risky: true, stake: groupDeadlineStake},
		{method: "POST", path: "/v1/groups/{group_id}/events", handler: s.fireGroupEvent, scope: ops, audit: "group.fire", target: "group:{group_id}", risky: true, stake: groupFireStake},
		{method: "GET", path: "/v1/reviews", handler: s.listReviews, scope: read, query: true},
		{method: "POST", path: "/v1/reviews/{id}/resolve", handler: s.resolveReview, scope: ops, audit: "review.resolve", target: "review:{id}"},
		{method: "POST", path: "/v1/reviews/{id}/settle", handler: s.settleReview, scope: ref, audit: "review.settle", target: "review:{id}", risky: true, stake: settleStake},
		{method: "GET", path: "/v1/held-payments", handler: s.listHeldPayments, scope: read, query: true},
		{method: "GET", path: "/v1/held-payments/{id}", handler: s.getHeldPayment, scope: read},
		{method: "POST", path: "/v1/held-payments/{id}/refund", handler: s.refundHeldPayment, scope: ref, audit: "held_payment.refund", target: "held_payment:{id}", risky: true, stake: heldStake},
		{method: "POST", path: "/v1/held-payments/{id}/apply", handler: s.applyHeldPayment, scope: ref, audit: "held_payment.apply", target: "held_payment:{id}", risky: true, stake: heldStake},
		{method: "POST", path: "/v1/held-payments/{id}/dismiss", handler: s.dismissHeldPayment, scope: ref, audit: "held_payment.dismiss", target: "held_payment:{id}", risky: true, stake: dismissStake},
		{method: "PUT", path: "/v1/stock/{sku}", handler: s.putStock, scope: inv, audit: "stock.set", target: "stock:{sku}", risky: true},
		{method: "GET", path: "/v1/stock/{sku}", handler: s.getStock, scope: read},
		{method: "POST", path: "/v1/coupons", handler: s.createCoupon, scope: inv, audit: "coupon.create", target: "coupon:body.code"},
		{method: "GET", path: "/v1/coupons/{code}", handler: s.getCoupon, scope: read},
		{method: "GET", path: "/v1/trigger", handler: s.getTrigger, scope: read},
		{method: "GET", path: "/v1/probe", handler: s.getProbe, scope: read},
		{method: "PUT", path: "/v1/trigger", handler: s.putTrigger, scope: ops, audit: "trigger.set", selfAudit: true, target: "trigger", risky: true},
		{method: "POST", path: "/v1/closes/preview", handler: s.previewClose, scope: read, maxBody: closeBodyBytes},
		{method: "POST", path: "/v1/closes", handler: s.startClose, scope: ops, audit: "close.batch", selfAudit: true, target: "close", risky: true, stake: closeStake,
			maxBody: closeBodyBytes},
		{method: "GET", path: "/v1/closes", handler: s.listCloses, scope: read, query: true},
		{method: "GET", path: "/v1/closes/{id}", handler: s.getClose, scope: read},
		{method: "GET", path: "/v1/approvals", handler: s.listApprovals, scope: read, query: true},
		{method: "GET", path: "/v1/approvals/{id}", handler: s.getApproval, scope: read},
		{method: "POST", path: "/v1/approvals/{id}/approve", handler: s.approve, scope: read, audit: "approval.approve", selfAudit: true, target: "approval:{id}", secret: true},
		{method: "POST", path: "/v1/approvals/{id}/reject", handler: s.reject, scope: read, audit: "approval.reject", selfAudit: true, target: "approval:{id}", secret: true},
		{method: "GET", path: "/v1/audit", handler: s.listAudit, scope: access.ScopeAuditRead, query: true},
		{method: "GET", path: "/v1/audit/verify", handler: s.verifyAudit, scope: access.ScopeAuditRead, query: true},
		{method: "POST", path: "/v1/sessions", handler: s.login},
		{method: "GET", path: "/v1/sessions/current", handler: s.getSession, session: true},
		{method: "DELETE", path: "/v1/sessions/current", handler: s.logout, session: true, refusedAs: "logout"},
		{method: "DELETE", path: "/v1/sessions", handler: s.logoutEverywhere, session: true, refusedAs: "logout.all"},
		{method: "POST", path: "/v1/sessions/current/second-factor", handler: s.secondFactor, session: true, refusedAs: "second_factor"},
		{method: "GET", path: "/healthz", handler: s.healthz},
		{method: "GET", path: "/readyz", handler: s.readyz},
		{method: "GET", path: "/metrics", handler: s.metrics(), scope: access.ScopeMetricsRead},
		{method: "GET", path: "/openapi.json", handler: s.openAPI},
	}
}

// NewServer returns a Server for e, which must not be nil, configured by cfg.
func NewServer(e *engine.Engine, cfg Config) *Server {
	s := &Server{
		engine:   e,
		log:      cfg.Logger,
		gatherer: cfg.Gatherer,
		maxBody:  cfg.MaxBodyBytes,
		mux:      http.NewServeMux(),

		bodyTimeout: cfg.BodyTimeout,
		callbacks:   cfg.Callbacks,

		access:      cfg.Access,
		proxies:     cfg.TrustedProxies,
		open:        cfg.Unauthenticated,
		closer:      cfg.Closer,
		probe:       cfg.Probe,
		crossOrigin: http.NewCrossOriginProtection(),
	}
	if s.access != nil {
		s.accessDB = s.access.Store()
	}

	if cfg.MaxInFlight > 0 {
		s.inFlight = newInFlight(cfg.MaxInFlight, cfg.CallbackReserve)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, o := range cfg.TrustedOrigins {
		if err := s.crossOrigin.AddTrustedOrigin(o); err != nil {
			s.log.Warn("http: a trusted origin is not valid and is ignored", "origin", o, "err", err)
		}
	}
	s.unavailable = &burst{log: s.log, msg: "http: a dependency is unavailable; answering 503 with Retry-After", window: burstWindow}
	s.shedCalls = &burst{log: s.log, msg: "http: payment callbacks shed: every in-flight slot is taken; their providers will send them again", window: burstWindow}
	s.forgedCalls = &burst{log: s.log, msg: "payment callback refused: unreadable, or not signed by its provider", window: burstWindow}
	s.notReady = &burst{log: s.log, msg: "http: not ready", window: burstWindow}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = DefaultBodyTimeout
	}
	if s.gatherer == nil {
		s.gatherer = prometheus.NewRegistry()
	}
	s.ready = &readiness{check: cfg.Ready, clock: e.Clock()}
	if s.ready.check == nil {
		s.ready.check = StoreReady(e.Store())
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	s.byPattern = map[string]*route{}
	routes := s.routes()
	if cfg.Registerer != nil {
		patterns := make([]string, len(routes))
		for i, rt := range routes {
			patterns[i] = rt.method + " " + rt.path
		}
		m, err := newRequestMetrics(cfg.Registerer, patterns)
		if err != nil {
			s.log.Error("http: the API's metrics are not registered", "err", err)
		}
		s.requests = m
	}
	for _, rt := range routes {
		if rt.method == "GET" && !rt.query && strings.HasPrefix(rt.path, "/v1/") {
			rt.handler = s.noQuery(rt.handler)
		}
		h := rt.handler
		if (rt.scope != "" || rt.session) && !s.open {
			// Guarded inside the mux, once it has matched the route, so
			// that the guard sees the path values (a stake's order, an
			// audit row's target) and never runs for a request the mux
			// redirects.
			h = func(w http.ResponseWriter, r *http.Request) { s.guarded(w, r, &rt) }
		}
		s.mux.HandleFunc(rt.method+" "+rt.path, h)
		s.byPattern[rt.method+" "+rt.path] = &rt
	}
	return s
}

// Handler returns the API's handler: the routes, answering unknown paths and
// methods with problems, behind panic recovery and request logging, the body
// deadline and load shedding.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serve)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	defer func() {
		v := recover()
		if v == http.ErrAbortHandler {
			panic(v) // the handler asked net/http to drop the connection
		}
		partial := v != nil && rec.wrote
		if v != nil {
			s.log.Error("http: handler panicked", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if !partial {
				writeProblem(rec, problemFor(http.StatusInternalServerError, lapse.EINTERNAL, "", "internal error"))
			}
		}
		took, status := time.Since(start), cmp.Or(rec.status, http.StatusOK)
		if s.requests != nil {
			s.requests.observe(s.routeOf(r), status, took)
		}
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", r.Pattern),
			slog.Int("status", status), slog.Int64("bytes", rec.bytes), slog.Duration("took", took))
		if partial {
			// Part of an answer is out: dropping the connection is the only
			// way left to tell the client it is incomplete.
			panic(http.ErrAbortHandler)
		}
	}()
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		// The API's answers name orders, payments, operators and keys: no
		// cache between the caller and Lapse (a proxy, the browser of an
		// operator who signed out) may keep one.
		rec.Header().Set("Cache-Control", "no-store")
	}
	// The body first, within its deadline, even of a request refused below:
	// net/http reads what a handler left of a body before it answers, with
	// no deadline of its own, so a refusal sent first waited for the rest of
	// a body its client never had to send.
	_, pattern := s.mux.Handler(r)
	r, whole := readBody(rec, r, s.bodyTimeout, s.bodyLimit(pattern))
	if !lapse.StorableURL(r.URL) {
		// Nothing a store keeps can be named so; PostgreSQL would refuse the
		// value in a lookup with an error, SQLite would look it up.
		writeProblem(rec, problemFor(http.StatusBadRequest, lapse.EINVALID, "",
			"the URL's path and query must be UTF-8 text without NUL"))
		return
	}
	if h, n := repeatedHeader(r.Header); n > 1 {
		writeProblem(rec, problemFor(http.StatusBadRequest, lapse.EINVALID, "",
			fmt.Sprintf("the %s header is sent %d times; send it once", h, n)))
		return
	}
	if emptyIdempotencyKey(r) {
		// Read as no key, every retry of a refund or a card's visit would
		// be carried out again; the caller meant one.
		s.error(rec, r, lapse.FieldError("Idempotency-Key",
			"is sent empty; send a key of 1 to 100 letters, digits, '.', '_', ':' or '-', or leave the header out"))
		return
	}
	if !whole {
		// A body that did not arrive in full, or runs past the limit, takes
		// no in-flight slot, so no handler may run for it: one that never
		// reads its body (a GET) would serve it beyond MaxInFlight. It is
		// refused here as a handler that reads it refuses it; a payment
		// callback's handler refuses it in its provider's format, without
		// the database.
		if _, pattern := s.mux.Handler(r); pattern != "POST "+callbackPath {
			s.error(rec, r, bodyRefusal(r))
			return
		}
	}
	if s.inFlight != nil && whole && strings.HasPrefix(r.URL.Path, "/v1/") {
		_, pattern := s.mux.Handler(r)
		callback := pattern == "POST "+callbackPath
		if !s.inFlight.acquire(callback) {
			if s.requests != nil {
				s.requests.shed.WithLabelValues(cmp.Or(pattern, unmatched)).Inc()
			}
			s.shed(rec, r, callback)
			return
		}
		defer s.inFlight.release()
	}
	s.route(rec, r)
}

// shed answers a request that found no in-flight slot: 429 with Retry-After,
// or, for a payment callback, 503 in its provider's format.
func (s *Server) shed(w http.ResponseWriter, r *http.Request, callback bool) {
	w.Header().Set("Retry-After", "1")
	const msg = "too many requests in flight; retry after a second"
	if callback {
		provider := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/payments/"), "/callback")
		if cb := s.callbacks[provider]; cb != nil {
			s.shedCalls.add("provider", provider)
			cb.Ack(w, lapse.Errorf(lapse.EUNAVAILABLE, msg))
			return
		}
	}
	writeProblem(w, problemFor(http.StatusTooManyRequests, lapse.EUNAVAILABLE, "", msg))
}

// route dispatches r. ServeMux answers unknown paths and wrong methods in
// plain text; those answers are caught here and rewritten as problems,
// keeping their status and Allow header.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		// Through the mux, not h, so that r.PathValue works.
		s.mux.ServeHTTP(w, r)
		return
	}
	c := &capture{header: http.Header{}}
	h.ServeHTTP(c, r)
	switch c.status {
	case http.StatusNotFound:
		writeProblem(w, problemFor(http.StatusNotFound, lapse.ENOTFOUND, "", "no such route: "+r.Method+" "+r.URL.Path))
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", c.header.Get("Allow"))
		writeProblem(w, problemFor(http.StatusMethodNotAllowed, lapse.EINVALID, "",
			r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+c.header.Get("Allow")))
	default: // a redirect to the cleaned path: pass it on as it is
		for k, v := range c.header {
			w.Header()[k] = v
		}
		w.WriteHeader(c.status)
		_, _ = w.Write(c.body)
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// StoreReady is the readiness of a process whose store is store: the store
// answers a ping within 2 s. Its error is lapse.ErrStoreUnavailable, which
// /readyz shows, wrapping the driver's, which only the log does.
func StoreReady(store interface{ Ping(context.Context) error }) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := store.Ping(ctx); err != nil {
			if errors.Is(err, lapse.ErrStoreUnavailable) {
				return err
			}
			return fmt.Errorf("%w: %w", lapse.ErrStoreUnavailable, err)
		}
		return nil
	}
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.ready.ready(r.Context()); err != nil {
		// Anyone may ask: the answer gives the reason a lapse error gives
		// (the database is unavailable), never a driver's text, which
		// names the database, its user and its host. The log has it all.
		s.notReady.add("err", err)
		reason := "a readiness check failed; the server's log says why"
		if lapse.ErrorCode(err) != lapse.EINTERNAL {
			reason = lapse.ErrorMessage(err)
		}
		writeProblem(w, problemFor(http.StatusServiceUnavailable, lapse.EUNAVAILABLE, "", "not ready: "+reason))
		return
	}
	// A degraded trigger leaves the process ready (the sweep fires on its
	// faster beat) but is shown.
	out := map[string]any{"status": "ready"}
	if st := s.engine.TriggerStatus(); st.Configured {
		out["trigger"] = st
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// triggerRequest is the body of PUT /v1/trigger.
type triggerRequest struct {
	Mode string `json:"mode"` // auto, redis or database
}

func (s *Server) getTrigger(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, s.engine.TriggerStatus())
}

// putTrigger has an operator force the shared trigger (redis) or the
// database sweep, or let the engine switch by itself (auto).
// putTrigger sets the trigger's mode. The mode is kept in memory, not in
// the store, so no transaction of the change can carry its audit row: the
// route audits itself (route.selfAudit), and writes the row before the
// change, which is made only once the row is written (S9). A change whose
// row cannot be written is answered 503 and not made. (A crash between the
// two loses nothing a restart would not: the mode starts again as
// configured.)
func (s *Server) putTrigger(w http.ResponseWriter, r *http.Request) {
	var req triggerRequest
	if err := s.decode(w, r, &req); err != nil {
		s.failed(w, r, err)
		return
	}
	if req.Mode == "" {
		s.failed(w, r, lapse.FieldError("mode", "is required: auto, redis or database"))
		return
	}
	mode, err := engine.ParseTriggerMode(req.Mode)
	if err == nil && !s.engine.TriggerStatus().Configured {
		err = s.engine.SetTriggerMode(mode) // refused, changing nothing: there is no shared trigger
	}
	if err != nil {
		s.failed(w, r, err)
		return
	}
	if entry, _ := r.Context().Value(entryKey{}).(*lapse.AuditEntry); entry != nil {
		e := *entry
		e.Result = "ok"
		if err := s.access.Record(context.WithoutCancel(r.Context()), &e); err != nil {
			s.log.Error("http: the audit row of a trigger mode could not be written; the mode is not changed", "mode", mode, "err", err)
			s.error(w, r, lapse.Errorf(lapse.EUNAVAILABLE, "the audit log cannot be written now; nothing was changed; try again later"))
			return
		}
	}
	if err := s.engine.SetTriggerMode(mode); err != nil {
		s.error(w, r, err) // not reached: the mode was checked above
		return
	}
	s.log.Warn("trigger mode set through the API", "mode", mode)
	s.writeJSON(w, r, http.StatusOK, s.engine.TriggerStatus())
}

func (s *Server) metrics() http.HandlerFunc {
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return h.ServeHTTP
}

// recorder remembers what was written, for the request log and so that a
// recovered panic does not write a second header.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// capture holds the answer of one of ServeMux's own handlers.
type capture struct {
	header http.Header
	status int
	body   []byte
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body = append(c.body, b...)
	return len(b), nil
}

// singleHeaders are the request headers Lapse reads one value of: the
// credentials, the idempotency key, the body's type and the payment
// providers' signatures. Sent more than once, which value counts would be
// Lapse's guess (net/http's Get takes the first; a proxy on the way may
// keep the last), so such a request is refused.
var singleHeaders = []string{"Authorization", "Idempotency-Key", "Content-Type", SecondFactorHeader,
	payment.SignatureHeader, payment.StripeSignatureHeader, payment.WeChatPayTimestampHeader,
	payment.WeChatPayNonceHeader, payment.WeChatPaySignatureHeader, payment.WeChatPaySerialHeader}

// repeatedHeader returns the first of singleHeaders that h holds more than
// once, and how many times; 0 when none is.
func repeatedHeader(h http.Header) (string, int) {
	for _, name := range singleHeaders {
		if n := len(h.Values(name)); n > 1 {
			return name, n
		}
	}
	return "", 0
}

// emptyIdempotencyKey reports whether r sends the Idempotency-Key header
// with nothing in it, which is refused rather than read as no key. Payment
// callbacks are left alone: their providers sign what they send, and Lapse
// reads no idempotency key of theirs.
func emptyIdempotencyKey(r *http.Request) bool {
	vs := r.Header.Values("Idempotency-Key")
	if len(vs) != 1 || vs[0] != "" || !strings.HasPrefix(r.URL.Path, "/v1/") {
		return false
	}
	provider, ok := strings.CutPrefix(r.URL.Path, "/v1/payments/")
	return !ok || !strings.HasSuffix(provider, "/callback")
}
