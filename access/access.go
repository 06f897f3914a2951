// Package access holds the rules of who may do what in Lapse, above the
// storage seam (lapse.AccessStore): services' API keys and their scopes,
// operators with passwords and TOTP codes, their sessions and lockout, the
// second factor that risky actions need, four-eyes approval, and the audit
// rows every one of these leaves.
//
// Secrets (passwords, keys, TOTP secrets and codes, session tokens) are
// shown once, when they are made, and never kept in the clear, logged, put
// in an audit row or an error message. What is kept is a hash: argon2id for
// passwords, SHA-256 for keys and tokens (they are long random strings, so
// a fast hash is enough). TOTP secrets are the exception: the server must
// know them to check a code, so the store keeps them as they are.
package access

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"runtime"
	"time"

	"github.com/alexedwards/argon2id"
	"golang.org/x/crypto/argon2"

	"github.com/lapsehq/lapse"
)

// Defaults of Config.
const (
	DefaultSecondFactorWindow = 5 * time.Minute
	DefaultSessionTTL         = 12 * time.Hour
	DefaultSessionIdle        = 30 * time.Minute
	DefaultLockoutAfter       = 5
	DefaultLockoutBase        = time.Minute
	DefaultLockoutMax         = time.Hour
	DefaultApprovalTTL        = 24 * time.Hour
	DefaultApprovalWindow     = 24 * time.Hour
	DefaultIssuer             = "Lapse"
)

// MinAdminKeyLen is the shortest Config.AdminKey that New accepts.
const MinAdminKeyLen = 32

// bearerToken reports whether key is printable ASCII without blanks: a
// key that a client can send as Authorization: Bearer KEY. A line ending
// left on it (an env file with CRLF lines) or a blank would make a key that
// no request can present.
func bearerToken(key string) bool {
	for i := range len(key) {
		if key[i] <= ' ' || key[i] > '~' {
			return false
		}
	}
	return true
}

// Config tunes a Service. The zero value is ready to use.
type Config struct {
	// Clock tells the time. Default lapse.SystemClock{}.
	Clock lapse.Clock
	// AdminKey is a configured key with the admin scope, at least
	// MinAdminKeyLen characters of printable ASCII without blanks. The
	// Service keeps only its hash, so Config() returns it empty.
	AdminKey string
	// SecondFactorWindow is how recent an operator's TOTP code must be for
	// a risky action without a new one. Default 5m.
	SecondFactorWindow time.Duration
	// SessionTTL is how long a login lasts at most, however busy its
	// session. Default 12h.
	SessionTTL time.Duration
	// SessionIdle is how long a session lasts without a request: each
	// request through it moves its end to SessionIdle later (in steps of a
	// minute at most, so that a busy session writes its store once a minute
	// at most), never past SessionTTL from its login. A browser left
	// signed in ends soon, not hours later. Default 30m; one of SessionTTL
	// or longer leaves only SessionTTL.
	SessionIdle time.Duration
	// LockoutAfter is how many failed logins (or second factors) since the
	// last good login lock an operator out. Default 5.
	LockoutAfter int
	// LockoutBase is the first lockout; each further failure doubles it, up
	// to LockoutMax. Defaults 1m and 1h.
	LockoutBase time.Duration
	LockoutMax  time.Duration
	// ApprovalTTL is how long an approval request waits for a second
	// operator. Default 24h.
	ApprovalTTL time.Duration
	// ApprovalAmount is the money, in minor units, above which an
	// operator's risky action needs a second operator's approval; 0: never.
	ApprovalAmount int64
	// ApprovalCount is the number of orders an operator may put at stake on
	// their own word (manual closes, group buys cancelled while open, their
	// members, events that end an order, deadlines brought earlier) within
	// ApprovalWindow: an action
	// that would take them above it needs approval; 0: never.
	ApprovalCount int64
	// ApprovalWindow is how long an operator's action counts toward
	// ApprovalCount: a rolling window. Default 24h.
	ApprovalWindow time.Duration
	// LoginsPerMinute is how many logins a client address may try at once,
	// and then in a minute: past it, a login is refused at once with a
	// *LoginLimitError, before its password is looked at, and only the
	// first such refusal in a minute leaves an audit row. A good login does
	// not count. Each Service counts on its own, in memory. Default 10.
	LoginsPerMinute int
	// Issuer names Lapse in operators' authenticator apps. Default "Lapse".
	Issuer string
	// HashParams is the argon2id cost of new password hashes. Default
	// argon2id.DefaultParams. A hash keeps the parameters it was made with,
	// so changing them affects only passwords set afterwards.
	HashParams *argon2id.Params
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.AdminKey != "" && len(c.AdminKey) < MinAdminKeyLen:
		return c, lapse.FieldError("admin_key", "must be at least %d characters", MinAdminKeyLen)
	case !bearerToken(c.AdminKey):
		return c, lapse.FieldError("admin_key", "must be printable ASCII without blanks: no Authorization header could carry it")
	case c.SecondFactorWindow < 0:
		return c, lapse.FieldError("second_factor_window", "must not be negative")
	case c.SessionTTL < 0:
		return c, lapse.FieldError("session_ttl", "must not be negative")
	case c.SessionIdle < 0:
		return c, lapse.FieldError("session_idle", "must not be negative")
	case c.LockoutAfter < 0:
		return c, lapse.FieldError("lockout_after", "must not be negative")
	case c.LockoutBase < 0:
		return c, lapse.FieldError("lockout_base", "must not be negative")
	case c.LockoutMax < 0:
		return c, lapse.FieldError("lockout_max", "must not be negative")
	case c.ApprovalTTL < 0:
		return c, lapse.FieldError("approval_ttl", "must not be negative")
	case c.ApprovalAmount < 0:
		return c, lapse.FieldError("approval_amount", "must not be negative")
	case c.ApprovalCount < 0:
		return c, lapse.FieldError("approval_count", "must not be negative")
	case c.ApprovalWindow < 0:
		return c, lapse.FieldError("approval_window", "must not be negative")
	case c.LoginsPerMinute < 0:
		return c, lapse.FieldError("logins_per_minute", "must not be negative")
	}
	if c.Clock == nil {
		c.Clock = lapse.SystemClock{}
	}
	c.SecondFactorWindow = cmp.Or(c.SecondFactorWindow, DefaultSecondFactorWindow)
	c.SessionTTL = cmp.Or(c.SessionTTL, DefaultSessionTTL)
	c.SessionIdle = min(cmp.Or(c.SessionIdle, DefaultSessionIdle), c.SessionTTL)
	c.LockoutAfter = cmp.Or(c.LockoutAfter, DefaultLockoutAfter)
	c.LockoutBase = cmp.Or(c.LockoutBase, DefaultLockoutBase)
	c.LockoutMax = cmp.Or(c.LockoutMax, DefaultLockoutMax)
	c.ApprovalTTL = cmp.Or(c.ApprovalTTL, DefaultApprovalTTL)
	c.ApprovalWindow = cmp.Or(c.ApprovalWindow, DefaultApprovalWindow)
	c.LoginsPerMinute = cmp.Or(c.LoginsPerMinute, DefaultLoginsPerMinute)
	c.Issuer = cmp.Or(c.Issuer, DefaultIssuer)
	if c.HashParams == nil {
		c.HashParams = argon2id.DefaultParams
	}
	if c.LockoutBase > c.LockoutMax {
		return c, lapse.FieldError("lockout_base", "must not exceed lockout_max (%s)", c.LockoutMax)
	}
	return c, nil
}

// Service applies the rules. It is safe for concurrent use.
type Service struct {
	store  lapse.Store
	access lapse.AccessStore
	cfg    Config
	clock  lapse.Clock

	adminHash []byte // SHA-256 of Config.AdminKey; nil when none is configured
	// dummyHash is what a login for an unknown name is compared against,
	// so that it costs what a known name's does.
	dummyHash string
	// hashing bounds the argon2id computations running at once: each takes
	// HashParams.Memory, and a burst of logins must not exhaust memory.
	hashing chan struct{}
	// waiting bounds the computations that wait for a hashing slot
	// (takeTurn).
	waiting chan struct{}
	// logins counts the login attempts of each client address, so that no
	// caller takes the hashing slots, and the audit log, with a flood.
	logins *loginLimiter
}

// New returns a Service over store, which must also be a lapse.AccessStore
// (every built-in store is). It fails with an EINVALID error when it is
// not, or when cfg is invalid (an AdminKey that is too short among them).
func New(store lapse.Store, cfg Config) (*Service, error) {
	as, ok := store.(lapse.AccessStore)
	if !ok {
		return nil, lapse.Errorf(lapse.EINVALID, "the store %T keeps no API keys or operators (it is not a lapse.AccessStore)", store)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Service{
		store:   store,
		access:  as,
		cfg:     cfg,
		clock:   cfg.Clock,
		hashing: make(chan struct{}, min(4, max(1, runtime.GOMAXPROCS(0)))),
		waiting: make(chan struct{}, hashWaiting),
		logins:  newLoginLimiter(cfg.LoginsPerMinute),
	}
	if cfg.AdminKey != "" {
		h := sha256.Sum256([]byte(cfg.AdminKey))
		s.adminHash = h[:]
		s.cfg.AdminKey = ""
	}
	s.dummyHash = dummyHash(cfg.HashParams)
	return s, nil
}

// dummyHash returns an argon2id hash with params, a random salt and a
// random key: a password compared against it costs what one compared
// against a real hash of params costs (the comparison derives a key with
// the hash's own parameters), and matches none. It is made rather than
// computed because computing it took HashParams.Memory (64 MiB by default)
// and tens of milliseconds at every start, which the runtime then spent
// giving back to the system while the server was already serving.
func dummyHash(params *argon2id.Params) string {
	salt, key := make([]byte, params.SaltLength), make([]byte, params.KeyLength)
	rand.Read(salt) // crypto/rand.Read never fails; it crashes the program first
	rand.Read(key)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, params.Memory, params.Iterations,
		params.Parallelism, base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// Config returns the Service's configuration with its defaults filled in,
// and without the AdminKey, which the Service does not keep.
func (s *Service) Config() Config { return s.cfg }

// tx runs fn in one transaction of the store, on its AccessStore.
func (s *Service) tx(ctx context.Context, fn func(as lapse.AccessStore) error) error {
	return s.store.Tx(ctx, func(tx lapse.Store) error {
		as, ok := tx.(lapse.AccessStore)
		if !ok {
			return lapse.Errorf(lapse.EINTERNAL, "access: the transaction %T keeps no audit log", tx)
		}
		return fn(as)
	})
}

// Store is the store's access records: the audit log, approvals, batches.
func (s *Service) Store() lapse.AccessStore { return s.access }

// Record appends e to the audit log in a transaction of its own: the row of
// an action that failed, was refused, or changed nothing in the store.
func (s *Service) Record(ctx context.Context, e *lapse.AuditEntry) error {
	if e.At.IsZero() {
		e.At = s.clock.Now()
	}
	return lapse.AuditRecord(ctx, s.store, e)
}

// MaxRefusalParams is the most of an action's parameters (the request's
// body) that the row of its refusal keeps as they are.
const MaxRefusalParams = 4 << 10

// RecordRefusal appends the row of e for an action refused with err before
// it was tried (the origin, a session, a scope, a second factor, a form that
// could not be sent on): e with the result "refused: " and err's reason. e
// itself is not changed. Parameters longer than MaxRefusalParams are kept as
// their length and SHA-256: a caller refused (a key without the scope, one
// revoked) may send refusals as fast as it likes, and the audit log, which
// is never pruned, must not grow by a whole body with each.
func (s *Service) RecordRefusal(ctx context.Context, e *lapse.AuditEntry, err error) error {
	row := *e
	row.Result = "refused: " + lapse.Reason(err)
	if len(row.Params) > MaxRefusalParams {
		sum := sha256.Sum256(row.Params)
		row.Params = marshal(map[string]any{"omitted_bytes": len(row.Params), "sha256": hex.EncodeToString(sum[:])})
	}
	return s.Record(ctx, &row)
}
