package http_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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
	e := newEnvWith(t, options{
		access: &cfg,
		closer: true,
		cfg:    lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}},
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"hmac": closedProvider{}}}
		},
	})
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
		g.seen = rows[len(rows)-1].Seq
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

func (g *guardedEnv) verifyAudit() {
	g.t.Helper()
	if n, err := lapse.AuditVerify(context.Background(), g.db, 7); err != nil {
		g.t.Errorf("AuditVerify after %d rows: %v", n, err)
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
