// Package console is the operators' desk: a web console, rendered on the
// server with html/template from embedded templates and assets, with no
// JavaScript build step, in English and Simplified Chinese. It is where
// automation hands over to people (seed 003): the review queue, each order's
// timeline, the actions on it, manual close (seed 004), approvals, the
// dashboard and the audit log.
//
// Operators log in with a password and a TOTP code (package access); the
// session is the API's (one cookie), and every action is a request to the
// API's own handler, made in the process with the operator's session, so
// that the scopes, the second factor, four eyes and the audit log apply to
// the console exactly as they do to the API.
package console

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// Config configures a Console.
type Config struct {
	Engine *engine.Engine  // required
	Access *access.Service // required
	Closer *closes.Closer  // manual close; nil: its pages say it is off
	API    http.Handler    // the API's handler (lapsehttp.Server.Handler), which carries out actions; required
	Store  lapse.Store     // the raw store (an AccessStore too), for what the engine does not list; required
	Logger *slog.Logger    // default slog.Default()
	Clock  lapse.Clock     // default the engine's
	// Registerer receives lapse_reviews_open by category
	// (review_metrics.go). Default: none is registered.
	Registerer prometheus.Registerer
	// TrustedOrigins are origins (scheme://host[:port]) besides the
	// console's own whose browsers may post its forms, as the API's
	// (lapsehttp.Config.TrustedOrigins): lapse serve gives both the same.
	TrustedOrigins []string
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client (lapsehttp.Config.TrustedProxies); lapse serve gives both the
	// same.
	TrustedProxies []netip.Prefix
	// BodyTimeout bounds how long a form may take to arrive after its
	// request's headers, as the API's (lapsehttp.Config.BodyTimeout); a
	// form that takes longer is refused with 400 and its connection
	// closed. Zero or negative: lapsehttp.DefaultBodyTimeout.
	BodyTimeout time.Duration
}

// Console serves the console's pages under Prefix.
type Console struct {
	cfg   Config
	log   *slog.Logger
	clock lapse.Clock
	pages map[string]*template.Template // by page name, each with the layout
	mux   *http.ServeMux
	csrf  *http.CrossOriginProtection
	// forms reads every request body in full, within Config.BodyTimeout
	// and up to maxFormBytes, before a page's handler runs.
	forms func(http.Handler) http.Handler
}

// page is one page of the console: its template and handlers.
type page struct {
	pattern string // a ServeMux pattern under Prefix, e.g. "GET /console/orders/{order_no}"
	handler func(c *Console, w http.ResponseWriter, r *http.Request)
	// open: served without a session in force: the login, and the logout,
	// which ends the session its cookie names if it is still in force and
	// takes the cookie back either way (one that idled out too).
	open bool
	// scope is what the operator's role must grant to be served the page,
	// as the API's routes its data comes from ask: orders:read unless set;
	// "-" for a page every operator may use, whatever their role (their
	// preferences, logging out).
	scope string
	// audit names the action a post of the page asks for and its target,
	// as the API's audit log names them, for the row of a refusal the
	// console makes itself (refusal.go). nil for a page whose posts the
	// audit log does not keep: reads, the close preview, the preferences,
	// and the login, whose every attempt the access service records.
	audit func(c *Console, r *http.Request, p *access.Principal) (action, target string)
}

// routes is the console's route table.
func routes() []page {
	return []page{
		{pattern: "GET /console/login", handler: (*Console).loginPage, open: true},
		{pattern: "POST /console/login", handler: (*Console).login, open: true},
		{pattern: "POST /console/logout", handler: (*Console).logout, audit: logoutAudit, open: true},
		{pattern: "POST /console/logout-everywhere", handler: (*Console).logoutEverywhere, audit: logoutEverywhereAudit, scope: "-"},
		{pattern: "POST /console/preferences", handler: (*Console).preferences, scope: "-"},
		{pattern: "GET /console/dashboard", handler: (*Console).dashboard},
		{pattern: "GET /console/approvals", handler: (*Console).approvalsPage},
		{pattern: "POST /console/approvals/{id}/approve", handler: (*Console).approve, audit: approveAudit},
		{pattern: "POST /console/approvals/{id}/reject", handler: (*Console).reject, audit: rejectAudit},
		{pattern: "GET /console/audit", handler: (*Console).auditPage, scope: access.ScopeAuditRead},
		{pattern: "GET /console/close", handler: (*Console).closePage},
		{pattern: "POST /console/close/preview", handler: (*Console).previewClose},
		{pattern: "POST /console/close", handler: (*Console).startClose, audit: closeAudit},
		{pattern: "GET /console/close/{id}", handler: (*Console).batchPage},
		{pattern: "GET /console/{$}", handler: (*Console).queue},
		{pattern: "GET /console/orders/{order_no}", handler: (*Console).orderPage},
		{pattern: "POST /console/orders/{order_no}/{action}", handler: (*Console).orderAction, audit: orderActionAudit},
	}
}

// New returns a Console over cfg.
func New(cfg Config) (*Console, error) {
	if cfg.Engine == nil || cfg.Access == nil || cfg.API == nil || cfg.Store == nil {
		return nil, fmt.Errorf("console: Engine, Access, API and Store are required")
	}
	c := &Console{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), clock: cfg.Clock, mux: http.NewServeMux(),
		csrf: http.NewCrossOriginProtection()}
	if c.clock == nil {
		c.clock = cfg.Engine.Clock()
	}
	timeout := cfg.BodyTimeout
	if timeout <= 0 {
		timeout = lapsehttp.DefaultBodyTimeout
	}
	c.forms = func(h http.Handler) http.Handler { return lapsehttp.BodyDeadline(h, timeout, maxFormBytes) }
	for _, o := range cfg.TrustedOrigins {
		if err := c.csrf.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("console: trusted origin: %w", err)
		}
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newReviewCollector(cfg.Store)); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
	}
	assets, _ := fs.Sub(assetFS, "assets")
	c.mux.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", http.FileServerFS(assets)))
	for _, p := range routes() {
		c.mux.HandleFunc(p.pattern, c.serve(p))
	}
	return c, nil
}

// serve serves page p: a post must come from the console's own origin, and
// a page that is not open needs an operator's session. The console refuses
// anything else itself, and the refusal of a write the audit log keeps is in
// it (refusal.go). Every page is served through here; a post that matches
// none changes nothing (404, 405).
func (c *Console) serve(p page) http.HandlerFunc {
	h := func(w http.ResponseWriter, r *http.Request) { p.handler(c, w, r) }
	if !p.open {
		h = c.withOperator(c.withScope(cmp.Or(p.scope, access.ScopeOrdersRead), h))
	}
	return func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), pageKey{}, &p))
		if err := c.csrf.Check(r); err != nil {
			c.refused(w, r, nil, lapse.Errorf(lapse.EFORBIDDEN, "cross-origin request refused: %v", err))
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// withScope serves h only to an operator whose role grants scope ("-":
// any). The API refuses them its data and its actions all the same; the
// console, which reads the store itself, must not show what the API would
// refuse. A post refused here is in the audit log as the API's refusals
// are (refusal.go).
func (c *Console) withScope(scope string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		op := operatorOf(r)
		if scope == "-" || op.Can(scope) {
			h(w, r)
			return
		}
		c.refused(w, r, op, lapse.Errorf(lapse.EFORBIDDEN, "this page needs the scope %s, which operator %q does not have", scope, op.Name))
		http.Error(w, t(langOf(r, op.Lang), "common.forbidden"), http.StatusForbidden)
	}
}

// Handler serves the console; mount it at Prefix. A request's body (a
// form) is read in full within Config.BodyTimeout before any page sees it.
func (c *Console) Handler() http.Handler {
	return c.forms(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		// base-uri is not one of the directives default-src stands in for:
		// without its own, a <base> in a page would move every relative
		// link and form of the page to another site.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "+
			"frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'")
		if !strings.HasPrefix(r.URL.Path, Prefix+"assets/") {
			// Every answer but the stylesheet is about an operator's
			// session or shows what their role may see, the answers of
			// errors and redirects too: no cache (a proxy, the browser's
			// history once they signed out) may keep one.
			h.Set("Cache-Control", "no-store")
		}
		if !lapse.StorableURL(r.URL) {
			http.Error(w, "the URL's path and query must be UTF-8 text without NUL", http.StatusBadRequest)
			return
		}
		c.mux.ServeHTTP(w, r)
	}))
}
