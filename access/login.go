package access

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
)

// errLoginFailed is the one answer to a login that fails for any reason
// but a lockout, so that it tells nothing about which part was wrong.
func errLoginFailed() error {
	return lapse.Errorf(lapse.EUNAUTHORIZED, "name, password or code is wrong")
}

func errLocked(code string, o *lapse.Operator) error {
	return lapse.Errorf(code, "too many failed attempts: locked until %s", o.LockedUntil.Format(time.RFC3339))
}

// Login checks an operator's name, password and TOTP code and starts a
// session: it returns the session's token, shown this once and kept only as
// its SHA-256, and the operator's principal. The login is not a second
// factor: a risky action still needs a code of its own (or a fresh one).
//
// Any failure is the same EUNAUTHORIZED error, "name, password or code is
// wrong", and counts against the operator: after Config.LockoutAfter
// failures since the last good login the operator is locked out for
// LockoutBase, doubling with each further failure up to LockoutMax. While
// locked out a login is EUNAUTHORIZED "… locked until …", without a look at
// the password and without counting. A good login resets the count. A code
// is accepted for its time step and one step either side, once.
//
// Every attempt leaves an audit row "login" with its result ("ok" or why it
// failed) in the transaction that counts it; a name that is not text every
// store can keep (lapse.StorableText) is an unknown one. An unknown name costs the same
// password hash as a known one, so timing does not tell which names exist.
// (A lockout message does: that is the price of telling an operator why.)
//
// Before any of that, clientAddr's attempts are counted (for IPv6, its
// /64's): past Config.LoginsPerMinute, a login is refused with a
// *LoginLimitError, whatever its name, without a look at the store or the
// password, so that no caller holds the hashing slots real operators wait
// for. Such a refusal leaves a row ("refused: too many login attempts …")
// at most once a minute per address, with the count of those refused
// without one since, so that a flood is seen and does not grow the log
// with it. A good login gives its attempt back.
//
// Addresses within their limits can still, together, ask for more password
// checks than the server computes: when every hashing slot is taken and a
// few more logins wait for one, a login is refused at once with a
// *LoginLimitError whose Busy is set, without a row, rather than wait in a
// queue that would grow with the flood.
func (s *Service) Login(ctx context.Context, name, password, code, clientAddr string) (string, *Principal, error) {
	name = operatorName(name)
	if err := s.admitLogin(ctx, name, clientAddr); err != nil {
		return "", nil, err
	}
	// The password hash is compared before the transaction: argon2id takes
	// tens of milliseconds and much memory, too long to hold the operator's
	// row (on SQLite, the whole file) locked. What it decides is taken under
	// the lock: that the hash compared is still the operator's, that they
	// are not locked out, the count and the code's step, so concurrent
	// guesses cannot get more answers than the count allows.
	// A name that is not text no store can keep (a console form may send
	// one) names no operator; PostgreSQL would refuse to look for it, and
	// the attempt would leave no row.
	text := lapse.StorableText(name)
	var pre *lapse.Operator
	var err error
	if text {
		if pre, err = s.access.OperatorGet(ctx, name); err != nil && !errors.Is(err, lapse.ErrAccessNotFound) {
			return "", nil, err
		}
	}
	now := s.clock.Now()
	if pre != nil && now.Before(pre.LockedUntil) {
		err := errLocked(lapse.EUNAUTHORIZED, pre)
		e := loginEntry(name, clientAddr, pre, now)
		e.Result = lapse.ErrorMessage(err)
		if aerr := lapse.AuditRecord(ctx, s.store, e); aerr != nil {
			return "", nil, aerr
		}
		return "", nil, err
	}
	hash := s.dummyHash
	if pre != nil {
		hash = pre.PasswordHash
	}
	passOK, err := s.checkPassword(ctx, password, hash)
	if errors.Is(err, errHashBusy) {
		return "", nil, &LoginLimitError{RetryAfter: time.Second, Busy: true}
	}
	if err != nil {
		return "", nil, err
	}

	var (
		token   string
		p       *Principal
		outcome error
	)
	err = s.tx(ctx, func(as lapse.AccessStore) error {
		token, p, outcome = "", nil, nil
		now := s.clock.Now()
		var o *lapse.Operator
		if text {
			var err error
			if o, err = as.OperatorLock(ctx, name); err != nil && !errors.Is(err, lapse.ErrAccessNotFound) {
				return err
			}
		}
		e := loginEntry(name, clientAddr, o, now)
		counts, reason := false, ""
		var step int64
		switch {
		case o == nil:
			reason = "unknown operator"
		case !o.DisabledAt.IsZero():
			reason = "operator disabled"
		case now.Before(o.LockedUntil):
			outcome = errLocked(lapse.EUNAUTHORIZED, o)
			reason = lapse.ErrorMessage(outcome)
		case o.PasswordHash != hash || !passOK:
			counts, reason = true, "wrong password"
		case code == "":
			counts, reason = true, "no code"
		default:
			if step, reason = codeStep(o.TOTPSecret, code, now, o.LastTOTPStep); reason != "" {
				counts = true
			}
		}
		if reason != "" {
			if outcome == nil {
				outcome = errLoginFailed()
			}
			if counts {
				s.fail(o, now)
				if err := as.OperatorUpdate(ctx, o); err != nil {
					return err
				}
			}
			e.Result = reason
			return lapse.AuditAppend(ctx, as, e)
		}

		o.FailedLogins, o.LockedUntil, o.LastTOTPStep = 0, time.Time{}, step
		if err := as.OperatorUpdate(ctx, o); err != nil {
			return err
		}
		token = newToken()
		sess := &lapse.Session{
			ID: hashSecret(token), OperatorID: o.ID, CreatedAt: now,
			ExpiresAt: now.Add(s.cfg.SessionIdle), ClientAddr: clientAddr,
		}
		if err := as.SessionCreate(ctx, sess); err != nil {
			return err
		}
		p = operatorPrincipal(o, sess)
		p.ClientAddr = clientAddr
		e.Result = "ok"
		return lapse.AuditAppend(ctx, as, e)
	})
	switch {
	case err != nil:
		return "", nil, err
	case outcome != nil:
		return "", nil, outcome
	}
	s.logins.giveBack(clientAddr)
	return token, p, nil
}

// admitLogin counts a login attempt as name from clientAddr and refuses it
// past the address's limit, with its row when the limiter says it is to
// leave one (Login).
func (s *Service) admitLogin(ctx context.Context, name, clientAddr string) error {
	now := s.clock.Now()
	wait, row, unrowed := s.logins.take(clientAddr, now)
	if wait <= 0 {
		return nil
	}
	err := &LoginLimitError{RetryAfter: wait}
	if !row {
		return err
	}
	e := loginEntry(name, clientAddr, nil, now)
	e.Result = fmt.Sprintf("refused: too many login attempts from this address (more than %d a minute); %d more were "+
		"refused without a row since its previous one; those of the next minute are refused without one", s.cfg.LoginsPerMinute, unrowed)
	if aerr := lapse.AuditRecord(ctx, s.store, e); aerr != nil {
		return aerr
	}
	return err
}

// loginEntry is the audit row of a login as name; o is the operator of
// that name, nil when there is none.
func loginEntry(name, clientAddr string, o *lapse.Operator, now time.Time) *lapse.AuditEntry {
	e := &lapse.AuditEntry{
		At: now, ActorKind: KindOperator, ActorName: lapse.CleanReason(name),
		Action: "login", ClientAddr: clientAddr,
	}
	if o != nil {
		e.ActorID, e.Role, e.Target = strconv.FormatInt(o.ID, 10), o.Role, operatorTarget(o)
	}
	return e
}

// fail counts a failed login or second factor of o and, from the
// LockoutAfter-th on, locks o out: LockoutBase, doubled for each failure
// past that, at most LockoutMax.
func (s *Service) fail(o *lapse.Operator, now time.Time) {
	o.FailedLogins++
	if o.FailedLogins < s.cfg.LockoutAfter {
		return
	}
	d := s.cfg.LockoutBase
	for i := o.FailedLogins - s.cfg.LockoutAfter; i > 0 && d < s.cfg.LockoutMax; i-- {
		d = min(d, s.cfg.LockoutMax/2) * 2 // never overflows
	}
	o.LockedUntil = now.Add(min(d, s.cfg.LockoutMax))
}

// newToken returns a new session token: 32 random bytes, base64url.
func newToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func validToken(t string) bool {
	b, err := base64.RawURLEncoding.DecodeString(t)
	return err == nil && len(b) == 32
}
