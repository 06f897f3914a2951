package http_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// fastHash keeps argon2id cheap in tests (the race detector slows it
// tenfold); the rules do not depend on its cost.
var fastHash = &argon2id.Params{Memory: 1024, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}

// password is every test operator's password.
const password = "correct horse battery staple"

// guardedEnv is an env whose server has access control, the hmac payment
// callback and manual closes, with the command line (admin) to make keys
// and operators.
type guardedEnv struct {
	*env
	root     *access.Principal
	admin    string            // an API key with the admin scope
	secrets  map[string]string // each operator's TOTP secret
	seen     int64             // the last audit row looked at (rows)
	tampered bool              // the audit log was edited on purpose
}

func newGuardedEnv(t *testing.T, cfg access.Config) *guardedEnv {
	t.Helper()
	return newGuardedEnvPaying(t, cfg, closedProvider{})
}

// newGuardedEnvPaying is newGuardedEnv with provider behind the hmac
// callback.
func newGuardedEnvPaying(t *testing.T, cfg access.Config, provider lapse.PaymentProvider) *guardedEnv {
	t.Helper()
	return guard(newEnvWith(t, options{
		access: &cfg,
		closer: true,
		cfg:    lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}},
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"hmac": provider}}
		},
	}))
}

// guard makes e, an env with access control, a guardedEnv.
func guard(e *env) *guardedEnv {
	t := e.t
	t.Helper()
	g := &guardedEnv{env: e, root: access.CLI("root"), secrets: map[string]string{}}
	g.admin = g.key("admin", access.ScopeAdmin)
	t.Cleanup(func() {
		if !g.tampered {
			g.verifyAudit()
		}
	})
	return g
}

// key makes an API key named name with scopes and returns it.
func (g *guardedEnv) key(name string, scopes ...string) string {
	g.t.Helper()
	k, _, err := g.access.CreateKey(context.Background(), g.root, name, scopes)
	if err != nil {
		g.t.Fatalf("CreateKey(%s): %v", name, err)
	}
	return k
}

// operator adds the operator name with role and the test password.
func (g *guardedEnv) operator(name, role string) {
	g.t.Helper()
	_, enr, err := g.access.AddOperator(context.Background(), g.root, name, role, password)
	if err != nil {
		g.t.Fatalf("AddOperator(%s): %v", name, err)
	}
	g.secrets[name] = enr.Secret
}

// code returns a code of name's authenticator. A code is good once per
// time step, so the clock first moves on a step (30 s).
func (g *guardedEnv) code(name string) string {
	g.t.Helper()
	c, err := totp.GenerateCode(g.secrets[name], g.clock.Advance(30*time.Second))
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// login logs name in and returns the session's token.
func (g *guardedEnv) login(name string) string {
	g.t.Helper()
	r := g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":%q,"password":%q,"code":%q}`, name, password, g.code(name))).want(g.t, http.StatusCreated)
	return sessionCookie(g.t, r).Value
}

// sessionCookie returns the session cookie r sets.
func sessionCookie(t *testing.T, r *response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == lapsehttp.SessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", lapsehttp.SessionCookie, r.header.Values("Set-Cookie"))
	return nil
}

// paidOrder creates the checkout order no for amount CNY with the admin
// key and pays it by a signed callback.
func (g *guardedEnv) paidOrder(no string, amount int64) {
	g.t.Helper()
	g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":%q,"flow":"checkout","user_id":"u","amount":%d,"currency":"CNY","ttl":"2h"}`, no, amount),
		bearer(g.admin)).want(g.t, http.StatusCreated)
	now := g.clock.Now()
	if r := g.callback(noticeBody(no, "txn-"+no, amount, now), now); r.status != http.StatusOK {
		g.t.Fatalf("pay %s: %d %s", no, r.status, r.body)
	}
}

// refunds returns the refunds of order no, from the engine.
func (g *guardedEnv) refunds(no string) []*lapse.OrderRefund {
	g.t.Helper()
	rs, err := g.engine.OrderRefunds(context.Background(), no)
	if err != nil {
		g.t.Fatalf("OrderRefunds(%s): %v", no, err)
	}
	return rs
}

// rows returns the audit rows appended since the last call.
func (g *guardedEnv) rows() []*lapse.AuditEntry {
	g.t.Helper()
	rows, err := g.db.AuditList(context.Background(), &lapse.AuditListParams{Cursor: g.seen})
	if err != nil {
		g.t.Fatalf("AuditList: %v", err)
	}
	if len(rows) > 0 {
		g.seen = rows[len(rows)-1].ID
	}
	return rows
}

// wantRows checks the audit rows appended since the last look: one for each
// of want, in order, each "action actor result", where want may end part
// way through the result ("refused:").
func (g *guardedEnv) wantRows(want ...string) []*lapse.AuditEntry {
	g.t.Helper()
	rows := g.rows()
	var got []string
	for _, e := range rows {
		got = append(got, e.Action+" "+e.ActorName+" "+e.Result)
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		g.t.Errorf("audit rows:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	return rows
}

// seal seals the audit log, as the server's sealer does.
func (g *guardedEnv) seal() {
	g.t.Helper()
	if _, err := lapse.AuditSeal(context.Background(), g.db, 5); err != nil {
		g.t.Fatalf("AuditSeal: %v", err)
	}
}

func (g *guardedEnv) verifyAudit() {
	g.t.Helper()
	g.seal()
	if c, err := lapse.AuditVerify(context.Background(), g.db, 7); err != nil || c.Unsealed != 0 {
		g.t.Errorf("AuditVerify = %+v, %v; want every row sealed and the chain unbroken", c, err)
	}
}

// cred is who a request says it comes from, and how.
type cred func(*http.Request)

func bearer(key string) cred {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) }
}

func session(token string) cred {
	return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: lapsehttp.SessionCookie, Value: token}) }
}

func header(name, value string) cred {
	return func(r *http.Request) { r.Header.Set(name, value) }
}

// call sends body (JSON, none when empty) with creds and reads the answer.
func (e *env) call(method, path, body string, creds ...cred) *response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, c := range creds {
		c(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return readResponse(e.t, res)
}

// refused checks that r is a problem with status and code.
func (r *response) refused(t *testing.T, status int, code string) *lapsehttp.Problem {
	t.Helper()
	r.want(t, status)
	p := r.problem(t)
	if p.Code != code {
		t.Fatalf("problem %+v, want code %s", p, code)
	}
	return p
}

// stockOnHand returns the on-hand quantity of sku, from the engine.
func (g *guardedEnv) stockOnHand(sku string) int64 {
	g.t.Helper()
	st, err := g.engine.Stock(context.Background(), sku)
	if err != nil {
		g.t.Fatalf("Stock(%s): %v", sku, err)
	}
	return st.OnHand
}

// orderExists reports whether the engine has order no.
func (g *guardedEnv) orderExists(no string) bool {
	g.t.Helper()
	_, err := g.engine.Order(context.Background(), no)
	if err != nil && lapse.ErrorCode(err) != lapse.ENOTFOUND {
		g.t.Fatalf("Order(%s): %v", no, err)
	}
	return err == nil
}

// approvalView is an approval request as the API shows it.
type approvalView struct {
	ID       int64
	Status   lapse.ApprovalStatus
	Action   string
	Target   string
	Amount   int64
	Currency string
	Count    int64
	Maker    string
	Approver string
	Result   string
	AtRisk   int64 `json:"at_risk"`
	Request  struct {
		Method string
		Path   string
		Body   json.RawMessage
	}
}

func (r *response) approval(t *testing.T) *approvalView {
	t.Helper()
	var a approvalView
	r.decode(t, &a)
	return &a
}

// TestAccessGuardSeesPathValues: the guard runs once the mux has matched
// the route, so that it sees the path values: an operator's refund above
// the threshold is told by its order and waits for approval, audit rows
// name their targets, and a path the mux redirects is not an action.
func TestAccessGuardSeesPathValues(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500})
	g.operator("alice", access.RoleOperator)
	g.paidOrder("P-1", 1000)
	alice := session(g.login("alice"))
	refunder := g.key("refunder", access.ScopeRefundsWrite)
	g.rows()

	a := g.call("POST", "/v1/orders/P-1/refunds", `{"amount":600}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.Target != "order:P-1" || a.Amount != 600 {
		t.Errorf("approval request %+v", a)
	}
	if rs := g.refunds("P-1"); len(rs) != 0 {
		t.Fatalf("a refund above the threshold was made without approval: %+v", rs)
	}
	rows := g.wantRows("second_factor alice ok", "approval.request alice ok")
	if len(rows) == 2 && rows[1].Target != "order:P-1" {
		t.Errorf("approval row %+v", rows[1])
	}

	g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":5}`, bearer(g.admin)).want(t, http.StatusOK)
	if rows := g.wantRows("stock.set admin ok"); len(rows) == 1 && rows[0].Target != "stock:SKU-1" {
		t.Errorf("stock row %+v", rows[0])
	}

	// A path that is not clean is redirected, and does nothing.
	req, err := http.NewRequest("POST", g.url+"/v1/orders/P-1/./refunds", strings.NewReader(`{"amount":100}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	bearer(refunder)(req)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if r := readResponse(t, res); r.status/100 != 3 {
		t.Fatalf("POST to a path that is not clean: %d %s, want a redirect", r.status, r.body)
	}
	if rs := g.refunds("P-1"); len(rs) != 0 {
		t.Fatalf("a redirected request refunded: %+v", rs)
	}
	g.wantRows()
}

// TestAccessRefusesWithoutCredential: a request without a credential, with
// an Authorization header that is not a bearer key, or with a key that is
// unknown, altered or revoked, is 401 with WWW-Authenticate; a key without
// the route's scope is 403. Neither changes anything; the 403 of a known
// caller, and the 401 of a write with a revoked key, is in the audit log,
// refused.
func TestAccessRefusesWithoutCredential(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":5}`, bearer(g.admin)).want(t, http.StatusOK)
	reader := g.key("reader", access.ScopeOrdersRead)
	revoked := g.key("gone", access.ScopeAdmin)
	if _, _, err := g.access.RevokeKey(context.Background(), g.root, revoked); err != nil {
		t.Fatal(err)
	}
	altered := []byte(g.admin) // one character of its secret changed
	if i := len(altered) - 5; altered[i] == 'A' {
		altered[i] = 'B'
	} else {
		altered[i] = 'A'
	}
	g.rows()

	for i, c := range []struct {
		name string
		cred cred
	}{
		{"no credential", func(*http.Request) {}},
		{"basic auth", header("Authorization", "Basic YWRtaW46YWRtaW4=")},
		{"bearer without a key", header("Authorization", "Bearer")},
		{"bearer with blanks", header("Authorization", "Bearer    ")},
		{"a key without a scheme", header("Authorization", g.admin)},
		{"not a key", bearer("hunter2")},
		{"an unknown key", bearer("lapse_aaaaaaaaaaaa_" + strings.Repeat("A", 43))},
		{"an altered key", bearer(string(altered))},
		{"a revoked key", bearer(revoked)},
		{"a made-up session", session("bm90IGEgc2Vzc2lvbiB0b2tlbiBhdCBhbGwsIG5vdCBvbmU")},
	} {
		no := fmt.Sprintf("N-%d", i)
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/orders", `{"order_no":"` + no + `","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`},
			{"PUT", "/v1/stock/SKU-1", `{"on_hand":99}`},
			{"GET", "/v1/orders", ""},
		} {
			r := g.call(req.method, req.path, req.body, c.cred)
			r.refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="lapse"` {
				t.Errorf("%s: %s %s: WWW-Authenticate %q", c.name, req.method, req.path, got)
			}
		}
		if g.orderExists(no) {
			t.Errorf("%s: the refused create made order %s", c.name, no)
		}
	}
	if n := g.stockOnHand("SKU-1"); n != 5 {
		t.Errorf("refused stock changes left on-hand %d, want 5", n)
	}
	// Nobody known asked, but the revoked key's holder: its writes are in
	// the log in its name (TestAccessEndedCredentialsAreAudited).
	g.wantRows("order.create gone refused: the API key is revoked", "stock.set gone refused: the API key is revoked")

	// A good key without the scope: 403, nothing changed, a refused row.
	r := g.call("POST", "/v1/orders", `{"order_no":"N-R","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(reader))
	if p := r.refused(t, http.StatusForbidden, lapse.EFORBIDDEN); !strings.Contains(p.Detail, access.ScopeOrdersWrite) {
		t.Errorf("403 detail %q does not name the scope", p.Detail)
	}
	if r.header.Get("WWW-Authenticate") != "" {
		t.Errorf("a 403 has WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":99}`, bearer(reader)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if g.orderExists("N-R") || g.stockOnHand("SKU-1") != 5 {
		t.Errorf("refused calls changed something: order N-R exists %v, on-hand %d", g.orderExists("N-R"), g.stockOnHand("SKU-1"))
	}
	rows := g.wantRows("order.create reader refused: ", "stock.set reader refused: ")
	if len(rows) == 2 {
		e := rows[0]
		if e.ActorKind != access.KindKey || e.ActorID != reader[len("lapse_"):len("lapse_")+access.PrefixLen] || e.Role != access.ScopeOrdersRead ||
			e.Target != "order:N-R" || !strings.Contains(string(e.Params), `"order_no":"N-R"`) || e.ClientAddr != "127.0.0.1" {
			t.Errorf("refused row %+v", e)
		}
		if rows[1].Target != "stock:SKU-1" {
			t.Errorf("refused row %+v", rows[1])
		}
	}
	// What the key may do, it does.
	g.call("GET", "/v1/stock/SKU-1", "", bearer(reader)).want(t, http.StatusOK)
	g.wantRows()
}

// fill puts a value in each {name} of a route's path.
func fill(path string) string {
	for name, v := range map[string]string{"{order_no}": "O-1", "{group_id}": "O-1", "{id}": "1", "{sku}": "SKU-1", "{code}": "C-1"} {
		path = strings.ReplaceAll(path, name, v)
	}
	return path
}

// TestAccessEveryRoute calls every route that needs a credential without
// one (401, no audit row) and with a key of another scope (403, and for a
// change a refused row of its action, for a read none).
func TestAccessEveryRoute(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	metricsOnly, readsOnly := g.key("metrics only", access.ScopeMetricsRead), g.key("reads only", access.ScopeOrdersRead)
	g.rows()
	routes := g.server.Access()
	guarded := 0
	for _, route := range slices.Sorted(maps.Keys(routes)) {
		ra := routes[route]
		if ra.Scope == "" {
			continue
		}
		guarded++
		method, path, _ := strings.Cut(route, " ")
		body := ""
		if method != "GET" && method != "DELETE" {
			body = "{}"
		}
		r := g.call(method, fill(path), body)
		r.refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", route)
		}
		g.wantRows()

		key := metricsOnly
		if ra.Scope == access.ScopeMetricsRead {
			key = readsOnly
		}
		g.call(method, fill(path), body, bearer(key)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
		if ra.Audit == "" {
			g.wantRows()
			continue
		}
		rows := g.wantRows(ra.Audit + " ")
		if len(rows) == 1 && (rows[0].ActorKind != access.KindKey || !strings.HasPrefix(rows[0].Result, "refused: ")) {
			t.Errorf("%s: refused row %+v", route, rows[0])
		}
	}
	if guarded < 40 {
		t.Errorf("only %d routes need a credential", guarded)
	}
}

// TestAccessOpenRoutes: the probes, the document, payment callbacks and
// the login need no credential; /metrics needs metrics:read. A server
// without an access service serves no guarded route.
func TestAccessOpenRoutes(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json"} {
		g.call("GET", path, "").want(t, http.StatusOK)
	}
	g.call("POST", "/v1/orders", `{"order_no":"OPEN-1","flow":"checkout","user_id":"u","amount":500,"currency":"CNY","ttl":"1h"}`, bearer(g.admin)).want(t, http.StatusCreated)
	now := g.clock.Now()
	if r := g.callback(noticeBody("OPEN-1", "txn-open", 500, now), now); r.status != http.StatusOK {
		t.Fatalf("callback without a credential: %d %s", r.status, r.body)
	}
	var o lapse.Order
	g.call("GET", "/v1/orders/OPEN-1", "", bearer(g.admin)).want(t, http.StatusOK).decode(t, &o)
	if o.State != "PAID" {
		t.Errorf("after the callback the order is %s", o.State)
	}
	g.call("POST", "/v1/sessions", `{"name":"nobody","password":"wrong password!","code":"123456"}`).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)

	g.call("GET", "/metrics", "").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("GET", "/metrics", "", bearer(g.key("reader", access.ScopeOrdersRead))).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("GET", "/metrics", "", bearer(g.key("prometheus", access.ScopeMetricsRead))).want(t, http.StatusOK)

	bare := lapsehttp.NewServer(g.engine, lapsehttp.Config{})
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/v1/orders": http.StatusUnauthorized, "/metrics": http.StatusUnauthorized} {
		w := httptest.NewRecorder()
		bare.Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != want {
			t.Errorf("a server without access control: GET %s is %d, want %d", path, w.Code, want)
		}
	}
}

// sessionView is GET /v1/sessions/current's answer.
type sessionView struct {
	Operator       string
	Role           string
	Scopes         []string
	SecondFactorAt *time.Time `json:"second_factor_at"`
}

// TestAccessSession: an operator logs in (a Secure, HttpOnly, SameSite=Strict
// cookie), acts with the cookie within their role, gives a second factor
// and logs out; requests with the cookie from another site are refused and
// change nothing, while a key is not held to that.
func TestAccessSession(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.operator("alice", access.RoleOperator)
	g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":5}`, bearer(g.admin)).want(t, http.StatusOK)
	g.rows()

	r := g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":"alice","password":"not the password","code":%q}`, g.code("alice")))
	r.refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	if len(r.header.Values("Set-Cookie")) != 0 {
		t.Errorf("a failed login set %v", r.header.Values("Set-Cookie"))
	}
	g.wantRows("login alice wrong password")

	r = g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":"alice","password":%q,"code":%q}`, password, g.code("alice"))).want(t, http.StatusCreated)
	c := sessionCookie(t, r)
	if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Value == "" ||
		c.MaxAge != int(access.DefaultSessionTTL.Seconds()) {
		t.Errorf("session cookie %+v", c)
	}
	var sv sessionView
	r.decode(t, &sv)
	if sv.Operator != "alice" || sv.Role != access.RoleOperator || !slices.Contains(sv.Scopes, access.ScopeRefundsWrite) || sv.SecondFactorAt != nil {
		t.Errorf("login answered %+v", sv)
	}
	if strings.Contains(string(r.body), c.Value) {
		t.Errorf("the login's body holds the token: %s", r.body)
	}
	g.wantRows("login alice ok")
	alice := session(c.Value)

	g.call("GET", "/v1/sessions/current", "", alice).want(t, http.StatusOK).decode(t, &sv)
	if sv.Operator != "alice" || sv.Role != access.RoleOperator {
		t.Errorf("current session %+v", sv)
	}
	g.call("GET", "/v1/sessions/current", "", bearer(g.admin)).refused(t, http.StatusBadRequest, lapse.EINVALID)

	// Another site's page cannot act with the cookie.
	order := func(no string) string {
		return `{"order_no":"` + no + `","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`
	}
	for i, site := range []cred{header("Sec-Fetch-Site", "cross-site"), header("Origin", "https://evil.example"), header("Sec-Fetch-Site", "same-site")} {
		no := fmt.Sprintf("X-%d", i)
		g.call("POST", "/v1/orders", order(no), alice, site).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
		g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":0}`, alice, site, header(lapsehttp.SecondFactorHeader, g.code("alice"))).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
		g.call("DELETE", "/v1/sessions/current", "", alice, site).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
		g.call("POST", "/v1/sessions/current/second-factor", `{"code":"`+g.code("alice")+`"}`, alice, site).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
		g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":"alice","password":%q,"code":%q}`, password, g.code("alice")), site).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
		if g.orderExists(no) {
			t.Errorf("a cross-site request made order %s", no)
		}
	}
	if n := g.stockOnHand("SKU-1"); n != 5 {
		t.Errorf("cross-site stock changes left on-hand %d", n)
	}
	// Each refused write is in the audit log, as every refusal is (S9);
	// there were none. So is a refused logout, in alice's name; a refused
	// login names no one yet, and leaves no row, as any request without a
	// credential that verifies.
	var refusals []string
	for range 3 {
		refusals = append(refusals, "order.create alice refused: cross-origin request refused", "stock.set alice refused: cross-origin request refused",
			"logout alice refused: cross-origin request refused", "second_factor alice refused: cross-origin request refused")
	}
	g.wantRows(refusals...)
	// Reading with the cookie from another site is the browser's to stop
	// (SameSite=Strict); a key is not sent by browsers, so it is not held to
	// the same-origin rule.
	g.call("GET", "/v1/sessions/current", "", alice, header("Sec-Fetch-Site", "cross-site")).want(t, http.StatusOK)
	g.call("POST", "/v1/orders", order("K-1"), bearer(g.admin), header("Sec-Fetch-Site", "cross-site")).want(t, http.StatusCreated)
	g.call("POST", "/v1/orders", order("S-1"), alice, header("Sec-Fetch-Site", "same-origin")).want(t, http.StatusCreated)
	g.call("POST", "/v1/orders", order("S-2"), alice).want(t, http.StatusCreated) // no browser headers: not a browser
	rows := g.wantRows("order.create admin ok", "order.create alice ok", "order.create alice ok")
	if len(rows) == 3 && (rows[1].ActorKind != access.KindOperator || rows[1].Role != access.RoleOperator || rows[1].SecondFactor != "") {
		t.Errorf("an operator's create: %+v", rows[1])
	}
	g.call("GET", "/v1/orders/S-1/transitions", "", alice).want(t, http.StatusOK)

	// A second factor: a wrong code is refused and counted; a right one is
	// kept in the session.
	wrong, _ := totp.GenerateCode(g.secrets["alice"], g.clock.Now().Add(-time.Hour))
	g.call("POST", "/v1/sessions/current/second-factor", `{"code":"`+wrong+`"}`, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.wantRows("second_factor alice wrong code")
	g.call("POST", "/v1/sessions/current/second-factor", `{"code":"`+g.code("alice")+`"}`, alice).want(t, http.StatusOK).decode(t, &sv)
	if sv.SecondFactorAt == nil || !sv.SecondFactorAt.Equal(g.clock.Now()) {
		t.Errorf("after a second factor: %+v", sv)
	}
	g.wantRows("second_factor alice ok")
	g.call("POST", "/v1/sessions/current/second-factor", `{"code":"123456"}`, bearer(g.admin)).refused(t, http.StatusBadRequest, lapse.EINVALID)

	r = g.call("DELETE", "/v1/sessions/current", "", alice).want(t, http.StatusNoContent)
	if c := sessionCookie(t, r); c.Value != "" || c.MaxAge >= 0 {
		t.Errorf("logout set %+v, want the cookie cleared", c)
	}
	g.wantRows("logout alice ok")
	g.call("GET", "/v1/sessions/current", "", alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("POST", "/v1/orders", order("S-3"), alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	if g.orderExists("S-3") {
		t.Error("a request after logout made an order")
	}
	g.wantRows("order.create alice refused: the session is not valid or has ended")
}

// TestAccessLoginEndsTheSessionItReplaces: a login that comes with a
// session cookie replaces it in the browser; the session it named ends
// there and then, with its logout row, rather than living on unseen until
// it expires.
func TestAccessLoginEndsTheSessionItReplaces(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	alice := g.login("alice")
	g.rows()
	r := g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":"bob","password":%q,"code":%q}`, password, g.code("bob")), session(alice)).
		want(t, http.StatusCreated)
	bob := sessionCookie(t, r).Value
	g.wantRows("login bob ok", "logout alice ok")
	g.call("GET", "/v1/sessions/current", "", session(alice)).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("GET", "/v1/sessions/current", "", session(bob)).want(t, http.StatusOK)
	// A failed login leaves the session it came with as it was.
	g.call("POST", "/v1/sessions", `{"name":"alice","password":"wrong","code":"000000"}`, session(bob)).
		refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("GET", "/v1/sessions/current", "", session(bob)).want(t, http.StatusOK)
}

// TestAccessEndedCredentialsAreAudited: a write refused because its
// credential has ended (a revoked key, a session logged out or expired, an
// operator disabled) is
// in the audit log in the name of the credential's holder (the key's name
// and prefix, the operator), never with its secret, as any refusal is
// (S9). A request without a credential, or with one that names no holder
// (an unknown key, a right prefix with a wrong secret, a token of no
// session), is refused without a row; so is a read.
func TestAccessEndedCredentialsAreAudited(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.operator("alice", access.RoleOperator)
	shop := g.key("shop", access.ScopeOrdersWrite, access.ScopeOrdersRead)
	_, k, err := g.access.CreateKey(context.Background(), g.root, "spare", []string{access.ScopeOrdersRead})
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.Split(shop, "_")[1]
	if _, _, err := g.access.RevokeKey(context.Background(), g.root, prefix); err != nil {
		t.Fatal(err)
	}
	order := func(no string) string {
		return `{"order_no":"` + no + `","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`
	}
	g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":5}`, bearer(g.admin)).want(t, http.StatusOK)
	g.rows()

	// The revoked key: refused, in its name.
	p := g.call("POST", "/v1/orders", order("E-1"), bearer(shop)).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	if p.Detail != "the API key is not valid" {
		t.Errorf("the revoked key's answer %q tells more than that the key is not valid", p.Detail)
	}
	rows := g.wantRows("order.create shop refused: the API key is revoked")
	if len(rows) == 1 {
		if e := rows[0]; e.ActorKind != access.KindKey || e.ActorID != prefix || e.Target != "order:E-1" ||
			e.ClientAddr == "" || strings.Contains(fmt.Sprintf("%+v %s", e, e.Params), shop[len("lapse_")+13:]) {
			t.Errorf("the revoked key's row %+v", e)
		}
	}
	g.call("GET", "/v1/orders", "", bearer(shop)).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	// Not its holder's: no row.
	wrongSecret := shop[:len(shop)-4] + "AAAA"
	unknown := "lapse_aaaaaaaaaaaa_" + shop[len("lapse_")+13:]
	for _, c := range []cred{bearer(wrongSecret), bearer(unknown), bearer("lapse_" + k.Prefix), session(strings.Repeat("A", 43)), func(*http.Request) {}} {
		g.call("POST", "/v1/orders", order("E-2"), c).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	}
	g.wantRows()

	// A session logged out, then one expired: refused, in alice's name.
	alice := session(g.login("alice"))
	g.call("DELETE", "/v1/sessions/current", "", alice).want(t, http.StatusNoContent)
	g.wantRows("login alice ok", "logout alice ok")
	g.call("POST", "/v1/orders", order("E-3"), alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("PUT", "/v1/stock/SKU-1", `{"on_hand":0}`, alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("DELETE", "/v1/sessions/current", "", alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	rows = g.wantRows("order.create alice refused: the session is not valid or has ended", "stock.set alice refused: the session is not valid or has ended")
	for _, e := range rows {
		if e.ActorKind != access.KindOperator || e.Role != access.RoleOperator {
			t.Errorf("the ended session's row %+v", e)
		}
	}
	alice = session(g.login("alice"))
	g.clock.Advance(access.DefaultSessionTTL)
	g.call("POST", "/v1/orders", order("E-4"), alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.wantRows("login alice ok", "order.create alice refused: the session is not valid or has ended")
	// Disabled: her sessions end, and she is still named.
	alice = session(g.login("alice"))
	if _, _, err := g.access.DisableOperator(context.Background(), g.root, "alice"); err != nil {
		t.Fatal(err)
	}
	g.call("POST", "/v1/orders", order("E-5"), alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.wantRows("login alice ok", "operator.disable root ok", "order.create alice refused: the session is not valid or has ended")
	for _, no := range []string{"E-1", "E-2", "E-3", "E-4", "E-5"} {
		if g.orderExists(no) {
			t.Errorf("a refused request made order %s", no)
		}
	}
	if n := g.stockOnHand("SKU-1"); n != 5 {
		t.Errorf("a refused request set stock to %d", n)
	}
}

// TestAccessSecondFactorAndFourEyes is the seeds' rule: an operator's
// refund needs a fresh second factor; above ApprovalAmount it waits for a
// second operator, who is never its maker and must give their own second
// factor, and it then happens once, with the maker, the approver, the
// second factor and the approval in its audit row. An expired request
// cannot be approved, a viewer cannot approve, every attempt to decide is
// in the audit log, and a key acts within its scopes without a code.
func TestAccessSecondFactorAndFourEyes(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500, ApprovalTTL: 10 * time.Minute})
	for _, o := range []struct{ name, role string }{{"alice", access.RoleOperator}, {"bob", access.RoleOperator}, {"vic", access.RoleViewer}} {
		g.operator(o.name, o.role)
	}
	for _, no := range []string{"R-1", "R-2", "R-3", "R-4", "R-5", "R-6"} {
		g.paidOrder(no, 1000)
	}
	alice := session(g.login("alice"))
	g.rows()

	// No fresh second factor: refused, nothing refunded.
	p := g.call("POST", "/v1/orders/R-1/refunds", `{"amount":100}`, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if !strings.Contains(p.Detail, "second factor") {
		t.Errorf("refusal %q does not say why", p.Detail)
	}
	if rs := g.refunds("R-1"); len(rs) != 0 {
		t.Fatalf("a refused refund made %+v", rs)
	}
	g.wantRows("refund.create alice refused: this action needs a fresh second factor")
	wrong, _ := totp.GenerateCode(g.secrets["alice"], g.clock.Now().Add(-time.Hour))
	g.call("POST", "/v1/orders/R-1/refunds", `{"amount":100}`, alice, header(lapsehttp.SecondFactorHeader, wrong)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if rs := g.refunds("R-1"); len(rs) != 0 {
		t.Fatalf("a refund with a wrong code made %+v", rs)
	}
	g.wantRows("second_factor alice wrong code", "refund.create alice refused: the code is wrong")

	// With a code, below the threshold: refunded.
	var ref lapse.OrderRefund
	g.call("POST", "/v1/orders/R-1/refunds", `{"amount":100}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusCreated).decode(t, &ref)
	if rs := g.refunds("R-1"); len(rs) != 1 || rs[0].Amount != 100 {
		t.Fatalf("refunds of R-1: %+v", rs)
	}
	rows := g.wantRows("second_factor alice ok", "refund.create alice ok")
	if len(rows) == 2 && (rows[1].SecondFactor != "totp" || rows[1].Target != "order:R-1" || rows[1].Approver != "" || rows[1].ApprovalID != 0) {
		t.Errorf("refund row %+v", rows[1])
	}
	// The code is fresh for a while, then not.
	g.call("POST", "/v1/orders/R-2/refunds", `{"amount":50}`, alice).want(t, http.StatusCreated)
	g.wantRows("refund.create alice ok")
	g.clock.Advance(access.DefaultSecondFactorWindow)
	g.call("POST", "/v1/orders/R-3/refunds", `{"amount":50}`, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.wantRows("refund.create alice refused: ")

	// Above the threshold: a pending approval request, no refund.
	a := g.call("POST", "/v1/orders/R-3/refunds", `{"amount":600,"reason":"broken lid"}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.ID == 0 || a.Status != lapse.ApprovalPending || a.Action != "refund.create" || a.Target != "order:R-3" || a.Amount != 600 ||
		a.Currency != "CNY" || a.Maker != "alice" || a.Approver != "" {
		t.Errorf("approval request %+v", a)
	}
	if rs := g.refunds("R-3"); len(rs) != 0 {
		t.Fatalf("a refund waiting for approval was made: %+v", rs)
	}
	g.wantRows("second_factor alice ok", "approval.request alice ok")
	approve := fmt.Sprintf("/v1/approvals/%d/approve", a.ID)

	// Not the maker, not without a code, not a viewer, not a key.
	g.call("POST", approve, `{"code":"`+g.code("alice")+`"}`, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	bob := session(g.login("bob"))
	g.call("POST", approve, `{}`, bob).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	vic := session(g.login("vic"))
	g.call("POST", approve, `{"code":"`+g.code("vic")+`"}`, vic).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", approve, `{}`, bearer(g.admin)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if got := g.call("GET", fmt.Sprintf("/v1/approvals/%d", a.ID), "", vic).want(t, http.StatusOK).approval(t); got.Status != lapse.ApprovalPending {
		t.Fatalf("after refused approvals the request is %s", got.Status)
	}
	if rs := g.refunds("R-3"); len(rs) != 0 {
		t.Fatalf("refused approvals refunded: %+v", rs)
	}
	// Every attempt is in the log, about the request, without its code.
	rows = g.wantRows("approval.approve alice refused: the operator who made a request cannot approve it", "login bob ok",
		"approval.approve bob refused: this action needs a fresh second factor", "login vic ok",
		"approval.approve vic refused: approving refund.create needs the scope refunds:write", "approval.approve admin refused: only an operator")
	for _, e := range rows {
		if e.Action == "approval.approve" && (e.Target != "order:R-3" || e.ApprovalID != a.ID || e.Params != nil || e.SecondFactor != "") {
			t.Errorf("refused approval's row %+v", e)
		}
	}

	// bob approves with his code: the refund happens, once.
	done := g.call("POST", approve, `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK).approval(t)
	if done.Status != lapse.ApprovalExecuted || done.Approver != "bob" || !strings.HasPrefix(done.Result, "201 ") {
		t.Errorf("approved request %+v", done)
	}
	rs := g.refunds("R-3")
	if len(rs) != 1 || rs[0].Amount != 600 || rs[0].Reason != "broken lid" {
		t.Fatalf("refunds of R-3 after approval: %+v", rs)
	}
	rows = g.wantRows("second_factor bob ok", "approval.approve bob ok", "refund.create alice ok")
	if len(rows) == 3 {
		if e := rows[1]; e.ApprovalID != a.ID || e.SecondFactor != "totp" || e.Approver != "bob" {
			t.Errorf("approval row %+v", e)
		}
		if e := rows[2]; e.ActorKind != access.KindOperator || e.Approver != "bob" || e.ApprovalID != a.ID || e.SecondFactor != "totp" ||
			e.Target != "order:R-3" || !strings.Contains(string(e.Params), `"amount":600`) {
			t.Errorf("the approved refund's row %+v", e)
		}
	}
	g.call("POST", approve, `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if rs := g.refunds("R-3"); len(rs) != 1 {
		t.Fatalf("a second approval refunded again: %+v", rs)
	}
	g.wantRows("approval.approve bob 409 conflict: the request is executed, not pending")

	// An expired request cannot be approved.
	a = g.call("POST", "/v1/orders/R-4/refunds", `{"amount":700}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	g.wantRows("second_factor alice ok", "approval.request alice ok")
	g.clock.Advance(10 * time.Minute)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if got := g.call("GET", fmt.Sprintf("/v1/approvals/%d", a.ID), "", bob).want(t, http.StatusOK).approval(t); got.Status != lapse.ApprovalExpired {
		t.Errorf("the late request is %s", got.Status)
	}
	if rs := g.refunds("R-4"); len(rs) != 0 {
		t.Fatalf("an expired request refunded: %+v", rs)
	}
	g.wantRows("approval.expire lapse ok", "approval.approve bob 409 conflict: the request is expired, not pending")

	// Rejected: nothing happens; a viewer cannot reject another's request.
	a = g.call("POST", "/v1/orders/R-5/refunds", `{"amount":800}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	g.wantRows("second_factor alice ok", "approval.request alice ok")
	reject := fmt.Sprintf("/v1/approvals/%d/reject", a.ID)
	g.call("POST", reject, `{"reason":"no"}`, vic).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if got := g.call("POST", reject, `{"reason":"not this one"}`, bob).want(t, http.StatusOK).approval(t); got.Status != lapse.ApprovalRejected || got.Approver != "bob" {
		t.Errorf("rejected request %+v", got)
	}
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if rs := g.refunds("R-5"); len(rs) != 0 {
		t.Fatalf("a rejected request refunded: %+v", rs)
	}
	g.wantRows("approval.reject vic refused: an operator with the role viewer cannot reject", "approval.reject bob ok",
		"approval.approve bob 409 conflict: the request is rejected, not pending")

	var list struct{ Approvals []approvalView }
	g.call("GET", "/v1/approvals?status=pending", "", vic).want(t, http.StatusOK).decode(t, &list)
	if len(list.Approvals) != 0 {
		t.Errorf("pending: %+v", list.Approvals)
	}
	g.call("GET", "/v1/approvals", "", vic).want(t, http.StatusOK).decode(t, &list)
	var statuses []lapse.ApprovalStatus
	for _, a := range list.Approvals {
		statuses = append(statuses, a.Status)
	}
	if !slices.Equal(statuses, []lapse.ApprovalStatus{lapse.ApprovalRejected, lapse.ApprovalExpired, lapse.ApprovalExecuted}) {
		t.Errorf("approvals, newest first: %v", statuses)
	}
	g.call("GET", "/v1/approvals?status=maybe", "", vic).refused(t, http.StatusBadRequest, lapse.EINVALID)
	// A page at a time, each request once: older requests are reached.
	var paged []lapse.ApprovalStatus
	for q := "/v1/approvals?limit=2"; q != ""; {
		var page struct {
			Approvals  []approvalView
			NextCursor *string `json:"next_cursor"`
		}
		g.call("GET", q, "", vic).want(t, http.StatusOK).decode(t, &page)
		for _, a := range page.Approvals {
			paged = append(paged, a.Status)
		}
		if q = ""; page.NextCursor != nil {
			if len(page.Approvals) != 2 {
				t.Fatalf("a page of %d with a next cursor, want 2", len(page.Approvals))
			}
			q = "/v1/approvals?limit=2&cursor=" + *page.NextCursor
		}
	}
	if !slices.Equal(paged, statuses) {
		t.Errorf("approvals by pages of 2: %v, want %v", paged, statuses)
	}

	// A key acts within its scopes: no code, no approval, whatever the amount.
	refunder := g.key("refunder", access.ScopeRefundsWrite)
	g.rows()
	g.call("POST", "/v1/orders/R-6/refunds", `{"amount":900}`, bearer(refunder)).want(t, http.StatusCreated)
	if rs := g.refunds("R-6"); len(rs) != 1 || rs[0].Amount != 900 {
		t.Fatalf("the key's refund: %+v", rs)
	}
	rows = g.wantRows("refund.create refunder ok")
	if len(rows) == 1 && (rows[0].SecondFactor != "" || rows[0].ActorKind != access.KindKey) {
		t.Errorf("the key's refund row %+v", rows[0])
	}
}

// auditPage is GET /v1/audit's answer.
type auditPage struct {
	Entries []struct {
		ID           int64
		Seq          int64
		Action       string
		Actor        string
		Target       string
		Result       string
		SecondFactor string `json:"second_factor"`
		Hash         string
	}
	NextCursor *int64 `json:"next_cursor"`
}

// TestAccessAuditAPI pages and filters the audit log, and verifies it
// before and after a row is edited in the database file.
func TestAccessAuditAPI(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.operator("vic", access.RoleViewer)
	for i := range 3 {
		g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":"AU-%d","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, i), bearer(g.admin)).want(t, http.StatusCreated)
	}
	g.call("POST", "/v1/orders/AU-0/events", `{"event":"CANCEL"}`, bearer(g.admin)).want(t, http.StatusOK)
	auditor := bearer(g.key("auditor", access.ScopeAuditRead))
	vic := session(g.login("vic"))
	all := g.rows()
	if len(all) < 8 {
		t.Fatalf("%d rows", len(all))
	}
	ids := func(p auditPage) []int64 {
		var out []int64
		for _, e := range p.Entries {
			out = append(out, e.ID)
		}
		return out
	}
	var want []int64
	for _, e := range all {
		want = append(want, e.ID)
	}

	// Pages of 3, oldest first, then newest first: every row once.
	for _, order := range []string{"asc", "desc"} {
		var got []int64
		cursor := ""
		for range len(all) {
			var p auditPage
			g.call("GET", "/v1/audit?limit=3&order="+order+cursor, "", auditor).want(t, http.StatusOK).decode(t, &p)
			got = append(got, ids(p)...)
			if p.NextCursor == nil {
				break
			}
			cursor = fmt.Sprintf("&cursor=%d", *p.NextCursor)
		}
		w := slices.Clone(want)
		if order == "desc" {
			slices.Reverse(w)
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s pages: %v, want %v", order, got, w)
		}
	}
	var p auditPage
	g.call("GET", "/v1/audit", "", vic).want(t, http.StatusOK).decode(t, &p)
	if len(p.Entries) != len(all) || p.Entries[0].ID != all[len(all)-1].ID || p.NextCursor != nil {
		t.Errorf("the default page: %v, next %v", ids(p), p.NextCursor)
	}
	if e := p.Entries[0]; e.Seq != 0 || e.Hash != "" {
		t.Errorf("a row not sealed yet shows seq %d, hash %q; want neither", e.Seq, e.Hash)
	}
	for q, n := range map[string]int{"action=order.create": 3, "actor=admin": 4, "target=order:AU-0": 2, "action=order.fire&target=order:AU-0": 1, "action=login&actor=vic": 1, "actor=nobody": 0} {
		g.call("GET", "/v1/audit?"+q, "", auditor).want(t, http.StatusOK).decode(t, &p)
		if len(p.Entries) != n {
			t.Errorf("%s: %d rows, want %d", q, len(p.Entries), n)
		}
	}
	for _, q := range []string{"limit=0", "limit=1001", "order=sideways", "cursor=-1", "batch=x"} {
		g.call("GET", "/v1/audit?"+q, "", auditor).refused(t, http.StatusBadRequest, lapse.EINVALID)
	}
	g.call("GET", "/v1/audit", "", bearer(g.key("reader", access.ScopeOrdersRead))).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)

	type verification struct {
		OK         bool
		Rows       int64
		Unsealed   int64
		Oldest     *time.Time `json:"oldest_unsealed_at"`
		BrokenAt   int64      `json:"broken_at"`
		Reason     string
		Checkpoint string
	}
	var v verification
	g.call("GET", "/v1/audit/verify", "", auditor).want(t, http.StatusOK).decode(t, &v)
	if !v.OK || v.Rows != 0 || v.Unsealed < int64(len(all)) || v.Oldest == nil || !v.Oldest.Equal(all[0].At) {
		t.Errorf("verify before sealing: %+v, want ok, no row sealed and at least %d not yet, from %v", v, len(all), all[0].At)
	}
	g.seal()
	v = verification{}
	g.call("GET", "/v1/audit/verify", "", auditor).want(t, http.StatusOK).decode(t, &v)
	n, _, err := g.db.AuditHead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK || v.Rows != n || v.Rows < int64(len(all)) || v.Unsealed != 0 || v.Oldest != nil || v.BrokenAt != 0 {
		t.Errorf("verify: %+v, want ok over %d rows", v, n)
	}
	g.call("GET", "/v1/audit?limit=1", "", auditor).want(t, http.StatusOK).decode(t, &p)
	if e := p.Entries[0]; e.Seq != n || len(e.Hash) != 64 {
		t.Errorf("the newest row sealed shows seq %d, hash %q; want %d and its hash", e.Seq, e.Hash, n)
	} else if want := fmt.Sprintf("%d:%s", n, e.Hash); v.Checkpoint != want {
		t.Errorf("verify's checkpoint = %q, want the newest row's %q", v.Checkpoint, want)
	}
	// A checkpoint given back is checked: one the chain holds, one it
	// does not (a row past its end, another hash); a malformed one is 400.
	cp := v.Checkpoint
	v = verification{}
	g.call("GET", "/v1/audit/verify?checkpoint="+cp, "", auditor).want(t, http.StatusOK).decode(t, &v)
	if !v.OK || v.Checkpoint != cp {
		t.Errorf("verify?checkpoint=%s: %+v, want ok", cp, v)
	}
	for _, bad := range []string{fmt.Sprintf("%d:%s", n+1, strings.Repeat("ab", 32)), "1:" + strings.Repeat("ab", 32)} {
		v = verification{}
		g.call("GET", "/v1/audit/verify?checkpoint="+bad, "", auditor).want(t, http.StatusOK).decode(t, &v)
		if v.OK || v.BrokenAt == 0 || v.Reason == "" {
			t.Errorf("verify?checkpoint=%s: %+v, want it not ok", bad, v)
		}
	}
	for _, q := range []string{"checkpoint=1", "checkpoint=0:" + strings.Repeat("ab", 32), "head=1"} {
		g.call("GET", "/v1/audit/verify?"+q, "", auditor).refused(t, http.StatusBadRequest, lapse.EINVALID)
	}

	// Edit a row in the file, as someone with the database could.
	db, err := sql.Open("sqlite", g.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g.tampered = true
	if res, err := db.Exec(`UPDATE audit_log SET result = 'ok, nothing to see' WHERE seq = 2`); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("the edit changed %d rows", n)
	}
	g.call("GET", "/v1/audit/verify", "", vic).want(t, http.StatusOK).decode(t, &v)
	if v.OK || v.BrokenAt != 2 || v.Rows != 1 || !strings.Contains(v.Reason, "changed") {
		t.Errorf("verify after the edit: %+v", v)
	}
}

// batchView is a close batch as the API shows it.
type batchView struct {
	ID         int64
	Status     string
	Total      int64
	Closed     int64
	ApprovalID int64  `json:"approval_id"`
	CreatedBy  string `json:"created_by"`
}

// waitBatch polls batch id, which runs in the background, until it is
// done, and returns it.
func (g *guardedEnv) waitBatch(id int64, as cred) *batchView {
	g.t.Helper()
	var b batchView
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		g.call("GET", fmt.Sprintf("/v1/closes/%d", id), "", as).want(g.t, http.StatusOK).decode(g.t, &b)
		if b.Status == string(lapse.CloseBatchDone) || time.Now().After(deadline) {
			return &b
		}
	}
}

// TestAccessCloses: a key within its scope closes at once; a manual close
// by an operator above ApprovalCount waits for approval and closes nothing
// until a second operator approves it, and then its rows name both; a
// preview needs only orders:read.
func TestAccessCloses(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 1})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	for _, no := range []string{"C-1", "C-2", "C-3"} {
		g.call("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(g.admin)).want(t, http.StatusCreated)
	}
	alice := session(g.login("alice"))
	closer := bearer(g.key("closer", access.ScopeOperationsWrite))
	reader := bearer(g.key("reader", access.ScopeOrdersRead))
	g.rows()
	state := func(no string) lapse.State {
		o, err := g.engine.Order(context.Background(), no)
		if err != nil {
			t.Fatal(err)
		}
		return o.State
	}

	var b batchView
	g.call("POST", "/v1/closes", `{"selector":{"order_nos":["C-3"]},"reason":"customer asked"}`, closer).want(t, http.StatusAccepted).decode(t, &b)
	if b.ID == 0 || b.Total != 1 || b.CreatedBy != "key:closer" || b.ApprovalID != 0 {
		t.Fatalf("the key's close: %+v", b)
	}
	if done := g.waitBatch(b.ID, reader); done.Status != "done" || done.Closed != 1 || state("C-3") != "CLOSED" {
		t.Fatalf("the key's close ended %+v, C-3 %s", done, state("C-3"))
	}
	g.wantRows("close.batch closer ok", "order.close closer ok")

	two := `{"selector":{"order_nos":["C-1","C-2"]},"reason":"fraud ring"}`
	var pv struct{ Count, Skipped int64 }
	g.call("POST", "/v1/closes/preview", two, reader).want(t, http.StatusOK).decode(t, &pv)
	if pv.Count != 2 || pv.Skipped != 0 {
		t.Errorf("preview %+v", pv)
	}
	g.call("POST", "/v1/closes", two, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	a := g.call("POST", "/v1/closes", two, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Action != "close.batch" || a.Count != 2 || a.Maker != "alice" {
		t.Errorf("close above the threshold: %+v", a)
	}
	var list struct{ Batches []batchView }
	g.call("GET", "/v1/closes", "", reader).want(t, http.StatusOK).decode(t, &list)
	if len(list.Batches) != 1 || state("C-1") != "UNPAID" || state("C-2") != "UNPAID" {
		t.Errorf("a close waiting for approval started: %+v, %s, %s", list.Batches, state("C-1"), state("C-2"))
	}
	g.wantRows("close.batch alice refused: ", "second_factor alice ok", "approval.request alice ok")

	bob := session(g.login("bob"))
	done := g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK).approval(t)
	if done.Status != lapse.ApprovalExecuted || !strings.HasPrefix(done.Result, "202 ") {
		t.Fatalf("approved close %+v", done)
	}
	g.call("GET", "/v1/closes?status=running", "", reader).want(t, http.StatusOK)
	g.call("GET", "/v1/closes", "", reader).want(t, http.StatusOK).decode(t, &list)
	if len(list.Batches) != 2 || list.Batches[0].ApprovalID != a.ID || list.Batches[0].CreatedBy != "operator:alice" {
		t.Fatalf("batches after the approval: %+v", list.Batches)
	}
	if b := g.waitBatch(list.Batches[0].ID, reader); b.Status != "done" || b.Closed != 2 || state("C-1") != "CLOSED" || state("C-2") != "CLOSED" {
		t.Fatalf("the approved close ended %+v, %s, %s", b, state("C-1"), state("C-2"))
	}
	rows := g.wantRows("login bob ok", "second_factor bob ok", "approval.approve bob ok", "close.batch alice ok", "order.close alice ok", "order.close alice ok")
	for _, e := range rows[min(3, len(rows)):] {
		if e.Approver != "bob" || e.ApprovalID != a.ID || e.SecondFactor != "totp" || e.Batch != list.Batches[0].ID {
			t.Errorf("a row of the approved close: %+v", e)
		}
	}
}

// TestAccessClosesAddUpPerOperator: the orders an operator closes by hand
// add up toward ApprovalCount over 24 hours, so that closing a few at a
// time does not get past four eyes: once the day's closes would pass it,
// the next close waits for approval. Each operator has their own count;
// what a second operator approved does not count; a key has none; after 24
// hours a close counts no more.
func TestAccessClosesAddUpPerOperator(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 2})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	for i := 1; i <= 9; i++ {
		g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":"CU-%d","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"72h"}`, i),
			bearer(g.admin)).want(t, http.StatusCreated)
	}
	as := map[string]cred{"alice": session(g.login("alice")), "bob": session(g.login("bob")),
		"closer": bearer(g.key("closer", access.ScopeOperationsWrite))}
	closeAs := func(who string, nos ...string) (*batchView, *approvalView) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"selector": map[string]any{"order_nos": nos}, "reason": "fraud ring"})
		creds := []cred{as[who]}
		if who != "closer" {
			creds = append(creds, header(lapsehttp.SecondFactorHeader, g.code(who)))
		}
		r := g.call("POST", "/v1/closes", string(body), creds...).want(t, http.StatusAccepted)
		if a := r.approval(t); a.Status == lapse.ApprovalPending {
			return nil, a
		}
		var b batchView
		r.decode(t, &b)
		g.waitBatch(b.ID, bearer(g.admin))
		return &b, nil
	}
	wantClosed := func(what string, b *batchView, a *approvalView) {
		t.Helper()
		if b == nil || b.ID == 0 {
			t.Fatalf("%s: %+v, want it closed at once", what, a)
		}
	}
	wantHeld := func(what string, b *batchView, a *approvalView) {
		t.Helper()
		if a == nil {
			t.Fatalf("%s: %+v, want it waiting for approval", what, b)
		}
	}
	b, a := closeAs("alice", "CU-1")
	wantClosed("alice's first", b, a)
	b, a = closeAs("alice", "CU-2", "CU-3") // 3 in one day
	wantHeld("alice's next two", b, a)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, as["bob"]).want(t, http.StatusOK)
	b, a = closeAs("bob", "CU-4")
	wantClosed("bob's, who has his own count", b, a)
	b, a = closeAs("closer", "CU-5", "CU-6", "CU-7")
	wantClosed("the key's", b, a)
	b, a = closeAs("alice", "CU-8") // her second on her own word: what bob approved does not count
	wantClosed("alice's second on her own word", b, a)
	b, a = closeAs("alice", "CU-9")
	wantHeld("alice's third on her own word", b, a)

	g.clock.Advance(24 * time.Hour)
	as["alice"] = session(g.login("alice"))
	b, a = closeAs("alice", "CU-9")
	wantClosed("alice's close a day later", b, a)
	for i := 1; i <= 9; i++ {
		if o, err := g.engine.Order(context.Background(), fmt.Sprintf("CU-%d", i)); err != nil || o.State != "CLOSED" {
			t.Errorf("CU-%d: %+v, %v; want it closed", i, o, err)
		}
	}
}

// TestAccessCancelsAddUpWithCloses: an event an operator fires that ends an
// order (CANCEL of an unpaid one) closes it on their own word, as a manual
// close of it does: it counts one order toward four eyes, with their
// closes, so that closing orders one CANCEL at a time is no way around a
// second operator. Keys are not counted; an event that does not end the
// order counts nothing; an approved CANCEL is carried out as approved.
func TestAccessCancelsAddUpWithCloses(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 2})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	for i := 1; i <= 5; i++ {
		g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":"CC-%d","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"72h"}`, i),
			bearer(g.admin)).want(t, http.StatusCreated)
	}
	g.call("POST", "/v1/orders", `{"order_no":"CM-1","flow":"membership","user_id":"u","amount":100,"currency":"CNY","ttl":"72h"}`,
		bearer(g.admin)).want(t, http.StatusCreated)
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	cancel := func(no string, as ...cred) *response {
		t.Helper()
		return g.call("POST", "/v1/orders/"+no+"/events", `{"event":"CANCEL","reason":"fraud"}`, as...)
	}
	cancel("CC-1", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusOK)
	// An event that does not end the order counts nothing.
	g.call("POST", "/v1/orders/CM-1/events", `{"event":"SUBMIT"}`, alice).want(t, http.StatusOK)
	body, _ := json.Marshal(map[string]any{"selector": map[string]any{"order_nos": []string{"CC-2"}}, "reason": "fraud"})
	if a := g.call("POST", "/v1/closes", string(body), alice).want(t, http.StatusAccepted).approval(t); a.Status == lapse.ApprovalPending {
		t.Fatalf("alice's second order closed on her word waits for approval: %+v", a)
	}
	// Two orders ended on her word today: the third waits.
	a := cancel("CC-3", alice).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Action != "order.fire" || a.Count != 1 || a.Target != "order:CC-3" {
		t.Fatalf("alice's third order ended on her word: %+v, want it waiting for approval", a)
	}
	if o, _ := g.engine.Order(context.Background(), "CC-3"); o.State != "UNPAID" {
		t.Fatalf("CC-3 is %s while its cancel waits for approval", o.State)
	}
	// A key cancels within its scope, uncounted.
	writer := bearer(g.key("shop", access.ScopeOrdersWrite))
	cancel("CC-4", writer).want(t, http.StatusOK)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	for _, no := range []string{"CC-1", "CC-2", "CC-3", "CC-4"} {
		waitState(t, g, no, "CLOSED")
	}
	if o, _ := g.engine.Order(context.Background(), "CC-5"); o.State != "UNPAID" {
		t.Errorf("CC-5 is %s; nothing closed it", o.State)
	}
}

// waitState waits for the order no to reach state: a manual close runs
// behind its answer.
func waitState(t *testing.T, g *guardedEnv, no string, state lapse.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, err := g.engine.Order(context.Background(), no)
		if err == nil && o.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s: %+v, %v; want it %s", no, o, err, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAccessApprovalOnlyForValidRequests: a risky request above a threshold
// is read as its handler reads it before it is held for approval, so that
// a request its handler would refuse is refused at once, not held for a
// second operator to approve in vain.
func TestAccessApprovalOnlyForValidRequests(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500, ApprovalCount: 1})
	g.operator("alice", access.RoleOperator)
	g.paidOrder("V-1", 1000)
	for _, no := range []string{"C-1", "C-2"} {
		g.call("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(g.admin)).want(t, http.StatusCreated)
	}
	alice := session(g.login("alice"))
	for _, c := range []struct {
		path, body  string
		status      int
		contentType string
	}{
		{"/v1/orders/V-1/refunds", `{"amount":600,"bogus":true}`, http.StatusBadRequest, ""},
		{"/v1/orders/V-1/refunds", `{"amount":700,"amount":600}`, http.StatusBadRequest, ""},
		{"/v1/orders/V-1/refunds", `{"Amount":600}`, http.StatusBadRequest, ""},
		{"/v1/orders/V-1/refunds", `{"amount":600}`, http.StatusUnsupportedMediaType, "text/plain"},
		{"/v1/orders/V-1/retry", `{"reson":"typo"}`, http.StatusBadRequest, ""},
		{"/v1/closes", `{"selector":{"order_nos":["C-1","C-2"]},"reason":"x","extra":1}`, http.StatusBadRequest, ""},
		{"/v1/closes", `{"selector":{"order_nos":["C-1","C-2"],"user_id":"u"},"reason":"x"}`, http.StatusBadRequest, ""},
	} {
		creds := []cred{alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))}
		if c.contentType != "" {
			creds = append(creds, header("Content-Type", c.contentType))
		}
		if r := g.call("POST", c.path, c.body, creds...); r.status != c.status {
			t.Errorf("POST %s %s: %d %s, want %d", c.path, c.body, r.status, r.body, c.status)
		}
	}
	var list struct{ Approvals []approvalView }
	g.call("GET", "/v1/approvals", "", alice).want(t, http.StatusOK).decode(t, &list)
	if len(list.Approvals) != 0 {
		t.Errorf("requests the handler refuses were held for approval: %+v", list.Approvals)
	}
	if rs := g.refunds("V-1"); len(rs) != 0 {
		t.Errorf("refunds: %+v", rs)
	}
}

// TestAccessCloseFailuresAreAudited: POST /v1/closes records its own rows;
// a close that fails leaves one row with how it failed, as every audited
// route's failure does, whether closes.Start records it (nothing to close)
// or the handler (a body it cannot read, an invalid selector or reason, no
// closer on the server).
func TestAccessCloseFailuresAreAudited(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	closer := bearer(g.key("closer", access.ScopeOperationsWrite))
	g.rows()
	for _, c := range []struct {
		body   string
		status int
		row    string
	}{
		{`not json`, http.StatusBadRequest, "close.batch closer 400 invalid: "},
		{`{"selector":{},"reason":"x"}`, http.StatusBadRequest, "close.batch closer 400 invalid: order_nos: "},
		{`{"selector":{"order_nos":["C-1"]}}`, http.StatusBadRequest, "close.batch closer 400 invalid: reason: "},
		{`{"selector":{"order_nos":["C-1"]},"reason":"x"}`, http.StatusConflict, "close.batch closer nothing to close"},
	} {
		g.call("POST", "/v1/closes", c.body, closer).want(t, c.status)
		g.wantRows(c.row)
	}

	bare := newEnvWith(t, options{access: &access.Config{}})
	key, _, err := bare.access.CreateKey(context.Background(), access.CLI("root"), "closer", []string{access.ScopeOperationsWrite})
	if err != nil {
		t.Fatal(err)
	}
	bare.call("POST", "/v1/closes", `{"selector":{"order_nos":["C-1"]},"reason":"x"}`, bearer(key)).refused(t, http.StatusServiceUnavailable, lapse.EUNAVAILABLE)
	rows, err := bare.db.AuditList(context.Background(), &lapse.AuditListParams{Action: "close.batch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || !strings.HasPrefix(rows[0].Result, "503 unavailable: ") {
		t.Errorf("a close without a closer left %+v", rows)
	}
}

// TestAccessRacingApprovers: two operators approve one request at once;
// one carries it out, the other is told it was decided, and the refund is
// made once.
func TestAccessRacingApprovers(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500})
	for _, o := range []struct{ name, role string }{{"alice", access.RoleOperator}, {"bob", access.RoleOperator}, {"carol", access.RoleAdmin}} {
		g.operator(o.name, o.role)
	}
	g.paidOrder("RA-1", 1000)
	alice, bob, carol := session(g.login("alice")), session(g.login("bob")), session(g.login("carol"))
	a := g.call("POST", "/v1/orders/RA-1/refunds", `{"amount":600}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	path := fmt.Sprintf("/v1/approvals/%d/approve", a.ID)
	bodies := []string{`{"code":"` + g.code("bob") + `"}`, `{"code":"` + g.code("carol") + `"}`}
	statuses := make([]int, 2)
	var wg sync.WaitGroup
	for i, who := range []cred{bob, carol} {
		wg.Go(func() { statuses[i] = g.call("POST", path, bodies[i], who).status })
	}
	wg.Wait()
	slices.Sort(statuses)
	if !slices.Equal(statuses, []int{http.StatusOK, http.StatusConflict}) {
		t.Errorf("racing approvers were answered %v, want one 200 and one 409", statuses)
	}
	if rs := g.refunds("RA-1"); len(rs) != 1 || rs[0].Amount != 600 {
		t.Fatalf("refunds after racing approvals: %+v", rs)
	}
}

// TestAccessFourEyesAddsUpRefunds: refunds of one order add up against the
// threshold, so that splitting a refund into pieces below it still needs a
// second operator once they pass it.
func TestAccessFourEyesAddsUpRefunds(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500})
	g.operator("alice", access.RoleOperator)
	g.paidOrder("S-1", 1000)
	alice := session(g.login("alice"))
	code := header(lapsehttp.SecondFactorHeader, g.code("alice"))
	g.call("POST", "/v1/orders/S-1/refunds", `{"amount":300}`, alice, code, header("Idempotency-Key", "k1")).want(t, http.StatusCreated)
	// The same request again is the same refund, not a second one.
	g.call("POST", "/v1/orders/S-1/refunds", `{"amount":300}`, alice, header("Idempotency-Key", "k1")).want(t, http.StatusOK)
	// 300 + 250 is past 500: it waits.
	a := g.call("POST", "/v1/orders/S-1/refunds", `{"amount":250}`, alice).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Amount != 250 {
		t.Fatalf("a refund that adds up past the threshold: %+v", a)
	}
	if rs := g.refunds("S-1"); len(rs) != 1 {
		t.Fatalf("refunds of S-1: %+v", rs)
	}
}

// TestAccessServiceRowsHaveTheClientAddress: the rows the access service
// writes for a request (a second factor, an approval request, a decision,
// a logout) say where the request came from, as the rows of the route do.
func TestAccessServiceRowsHaveTheClientAddress(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.paidOrder("C-1", 1000)
	g.paidOrder("C-2", 1000)
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	g.rows()

	g.call("POST", "/v1/sessions/current/second-factor", `{"code":"`+g.code("alice")+`"}`, alice).want(t, http.StatusOK)
	a := g.call("POST", "/v1/orders/C-1/refunds", `{"amount":600}`, alice).want(t, http.StatusAccepted).approval(t)
	b := g.call("POST", "/v1/orders/C-2/refunds", `{"amount":700}`, alice).want(t, http.StatusAccepted).approval(t)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/reject", b.ID), `{"reason":"no"}`, bob).want(t, http.StatusOK)
	g.call("DELETE", "/v1/sessions/current", "", alice).want(t, http.StatusNoContent)
	rows := g.wantRows("second_factor alice ok", "approval.request alice ok", "approval.request alice ok",
		"second_factor bob ok", "approval.approve bob ok", "refund.create alice ok", "approval.reject bob ok", "logout alice ok")
	for _, e := range rows {
		if e.ClientAddr != "127.0.0.1" {
			t.Errorf("the row %s of %s has the client address %q", e.Action, e.ActorName, e.ClientAddr)
		}
	}
}

// TestAccessApprovalRequestHasTheSecondFactor: the row of an approval
// request is the maker's action, made with the second factor the risky
// route asked for (S9): it says so, whether the code came with the request
// or was still fresh in the session.
func TestAccessApprovalRequestHasTheSecondFactor(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500})
	g.operator("alice", access.RoleOperator)
	g.paidOrder("F-1", 1000)
	g.paidOrder("F-2", 1000)
	alice := session(g.login("alice"))
	g.rows()

	g.call("POST", "/v1/orders/F-1/refunds", `{"amount":600}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted)
	g.call("POST", "/v1/orders/F-2/refunds", `{"amount":700}`, alice).want(t, http.StatusAccepted)
	rows := g.wantRows("second_factor alice ok", "approval.request alice ok", "approval.request alice ok")
	for _, e := range rows {
		if e.SecondFactor != "totp" {
			t.Errorf("the row %s %s of %s has the second factor %q, want totp", e.Action, e.Target, e.ActorName, e.SecondFactor)
		}
	}
}

// TestAccessNoOpNeedsItsAuditRow: a call that succeeds without changing
// anything (the same create again) commits no row with a change, so its row
// is written after it; when that row cannot be written, the call is not
// answered as done (S9) but with 503, and nothing else is sent of it.
func TestAccessNoOpNeedsItsAuditRow(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	writer := bearer(g.key("shop", access.ScopeOrdersWrite))
	body := `{"order_no":"NOOP-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"2h"}`
	g.call("POST", "/v1/orders", body, writer).want(t, http.StatusCreated)
	g.rows()

	db, err := sql.Open("sqlite", g.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER audit_full BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'the audit log is full'); END`); err != nil {
		t.Fatal(err)
	}
	r := g.call("POST", "/v1/orders", body, writer)
	r.refused(t, http.StatusServiceUnavailable, lapse.EUNAVAILABLE)
	if loc := r.header.Get("Location"); loc != "" {
		t.Errorf("the refused answer carries the create's Location %q", loc)
	}
	if _, err := db.Exec(`DROP TRIGGER audit_full`); err != nil {
		t.Fatal(err)
	}
	g.call("POST", "/v1/orders", body, writer).want(t, http.StatusOK)
	g.wantRows("order.create shop ok: the same request again; nothing changed")
}

// TestDeadlineAsItStandsAudited: a PATCH of an order's deadline to where it
// stands (a retry of one that went through) changes nothing, and its audit
// row says so, as a repeated create's does; a move is "ok".
func TestDeadlineAsItStandsAudited(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	writer := bearer(g.key("shop", access.ScopeOrdersWrite, access.ScopeOrdersRead))
	g.call("POST", "/v1/orders", `{"order_no":"DS-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"2h"}`, writer).
		want(t, http.StatusCreated)
	g.rows()
	moved := g.call("PATCH", "/v1/orders/DS-1/deadline", `{"extend_by":"10m"}`, writer).want(t, http.StatusOK).order(t)
	body := fmt.Sprintf(`{"deadline_at":%q}`, moved.DeadlineAt.Format(time.RFC3339Nano))
	again := g.call("PATCH", "/v1/orders/DS-1/deadline", body, writer).want(t, http.StatusOK).order(t)
	if again.Version != moved.Version || !again.DeadlineAt.Equal(*moved.DeadlineAt) {
		t.Errorf("the deadline set where it stands: %+v; want the order as it was, version %d", again, moved.Version)
	}
	g.wantRows("order.deadline shop ok", "order.deadline shop ok: the same request again; nothing changed")
}
