package access_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/sqlite"
)

// start is the time every test's clock starts at.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fastHash keeps argon2id cheap in tests (the race detector slows it
// tenfold); the rules do not depend on its cost.
var fastHash = &argon2id.Params{Memory: 1024, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}

// password is every test operator's password.
const password = "correct horse battery staple"

// env is a Service over a fresh SQLite file, with a manual clock.
type env struct {
	t     *testing.T
	ctx   context.Context
	path  string
	clock *lapse.ManualClock
	db    *sqlite.Store
	svc   *access.Service
	root  *access.Principal // the command line: admin
}

func newEnv(t *testing.T, cfg access.Config) *env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	db := openDB(t, path)
	e := &env{t: t, ctx: ctx, path: path, clock: lapse.NewManualClock(start), db: db, root: access.CLI("root")}
	e.svc = e.service(db, cfg)
	t.Cleanup(func() { e.verifyAudit() })
	return e
}

// openDB opens and migrates the SQLite file at path.
func openDB(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return db
}

// service is a Service over db with the env's clock and fast hashing
// unless cfg says otherwise.
func (e *env) service(db lapse.Store, cfg access.Config) *access.Service {
	e.t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	if cfg.HashParams == nil {
		cfg.HashParams = fastHash
	}
	svc, err := access.New(db, cfg)
	if err != nil {
		e.t.Fatalf("access.New: %v", err)
	}
	return svc
}

// verifyAudit seals the audit log, checks the whole chain and returns its
// length.
func (e *env) verifyAudit() int64 {
	e.t.Helper()
	if _, err := lapse.AuditSeal(e.ctx, e.db, 5); err != nil {
		e.t.Fatalf("AuditSeal: %v", err)
	}
	c, err := lapse.AuditVerify(e.ctx, e.db, 7) // a small page, to cross pages
	if err != nil || c.Unsealed != 0 {
		e.t.Errorf("AuditVerify = %+v, %v; want every row sealed and the chain unbroken", c, err)
	}
	return c.Rows
}

// audit returns the audit rows of action, in order.
func (e *env) audit(action string) []*lapse.AuditEntry {
	e.t.Helper()
	rows, err := e.db.AuditList(e.ctx, &lapse.AuditListParams{Action: action})
	if err != nil {
		e.t.Fatalf("AuditList: %v", err)
	}
	return rows
}

// lastAudit returns the last audit row of action.
func (e *env) lastAudit(action string) *lapse.AuditEntry {
	e.t.Helper()
	rows := e.audit(action)
	if len(rows) == 0 {
		e.t.Fatalf("no audit row %q", action)
	}
	return rows[len(rows)-1]
}

// addOperator adds an operator with the test password and returns it with
// its TOTP secret.
func (e *env) addOperator(name, role string) (*lapse.Operator, string) {
	e.t.Helper()
	o, enr, err := e.svc.AddOperator(e.ctx, e.root, name, role, password)
	if err != nil {
		e.t.Fatalf("AddOperator(%s): %v", name, err)
	}
	return o, enr.Secret
}

// code is the TOTP code of secret now.
func (e *env) code(secret string) string {
	e.t.Helper()
	c, err := totp.GenerateCode(secret, e.clock.Now())
	if err != nil {
		e.t.Fatalf("GenerateCode: %v", err)
	}
	return c
}

// next moves the clock to the next TOTP step and returns the code of
// secret there, so that it is one not accepted before.
func (e *env) next(secret string) string {
	e.t.Helper()
	e.clock.Advance(30 * time.Second)
	return e.code(secret)
}

// login logs name in with a new code and returns the token and principal.
func (e *env) login(name, secret string) (string, *access.Principal) {
	e.t.Helper()
	token, p, err := e.svc.Login(e.ctx, name, password, e.next(secret), "192.0.2.1")
	if err != nil {
		e.t.Fatalf("Login(%s): %v", name, err)
	}
	return token, p
}

// operator reads name's record from the store, secrets and counters too.
func (e *env) operator(name string) *lapse.Operator {
	e.t.Helper()
	o, err := e.db.OperatorGet(e.ctx, name)
	if err != nil {
		e.t.Fatalf("OperatorGet(%s): %v", name, err)
	}
	return o
}

// wantErr fails unless err has code and, when msg is not "", a message
// holding msg.
func wantErr(t *testing.T, err error, code, msg string) {
	t.Helper()
	if lapse.ErrorCode(err) != code {
		t.Fatalf("error %v: want code %s", err, code)
	}
	if msg != "" && !strings.Contains(lapse.ErrorMessage(err), msg) {
		t.Fatalf("error %q: want it to say %q", lapse.ErrorMessage(err), msg)
	}
}

// noSecret fails when any audit row holds one of secrets.
func (e *env) noSecret(secrets ...string) {
	e.t.Helper()
	rows, err := e.db.AuditList(e.ctx, &lapse.AuditListParams{})
	if err != nil {
		e.t.Fatalf("AuditList: %v", err)
	}
	for _, r := range rows {
		text := strings.Join([]string{r.ActorID, r.ActorName, r.Role, r.Target, string(r.Params), r.Result, r.Reason}, "\x00")
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				e.t.Errorf("audit row id %d (%s) holds a secret", r.ID, r.Action)
			}
		}
	}
}

func TestNewRefusesAStoreWithoutAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, err := access.New(struct{ lapse.Store }{e.db}, access.Config{})
	wantErr(t, err, lapse.EINVALID, "")
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	for _, cfg := range []access.Config{
		{AdminKey: strings.Repeat("k", access.MinAdminKeyLen-1)},
		// A line ending left on it, or a blank: no request could send it.
		{AdminKey: strings.Repeat("k", access.MinAdminKeyLen) + "\r"},
		{AdminKey: strings.Repeat("k", access.MinAdminKeyLen) + " k"},
		{AdminKey: strings.Repeat("k", access.MinAdminKeyLen) + "é"},
		{LockoutAfter: -1},
		{LockoutBase: time.Hour, LockoutMax: time.Minute},
		{ApprovalAmount: -1},
		{SessionIdle: -time.Minute},
	} {
		_, err := access.New(e.db, cfg)
		wantErr(t, err, lapse.EINVALID, "")
	}
	svc := e.service(e.db, access.Config{})
	c := svc.Config()
	if c.SecondFactorWindow != 5*time.Minute || c.SessionTTL != 12*time.Hour || c.SessionIdle != 30*time.Minute || c.LockoutAfter != 5 ||
		c.LockoutBase != time.Minute || c.LockoutMax != time.Hour || c.ApprovalTTL != 24*time.Hour || c.Issuer != "Lapse" {
		t.Fatalf("defaults: %+v", c)
	}
	if c := e.service(e.db, access.Config{SessionTTL: 10 * time.Minute}).Config(); c.SessionIdle != 10*time.Minute {
		t.Fatalf("an idle limit past the session's TTL: %v, want the TTL", c.SessionIdle)
	}
}

func TestShortAdminKeyErrorHidesTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	key := "short-but-secret-admin-key"
	_, err := access.New(e.db, access.Config{AdminKey: key})
	wantErr(t, err, lapse.EINVALID, "")
	if strings.Contains(err.Error(), key) {
		t.Fatalf("the error shows the key: %v", err)
	}
}

func asError(err error, target **lapse.Error) bool { return errors.As(err, target) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// totpAt is the TOTP code of secret at t.
func totpAt(secret string, t time.Time) (string, error) { return totp.GenerateCode(secret, t) }
