package access

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alexedwards/argon2id"
	"github.com/pquerna/otp/totp"
	"github.com/skip2/go-qrcode"

	"github.com/lapsehq/lapse"
)

// Password lengths, in characters. The most bounds the work a login asks of
// the hash.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 1024
)

// Enrolment is what a new operator is given, once: their password when it
// was generated, and their TOTP secret, as base32, as an otpauth:// URI and
// as a QR code of the URI for a terminal. None of it is kept in the clear
// but the secret, which the store keeps to check codes.
type Enrolment struct {
	Password string // set only when it was generated
	Secret   string
	URI      string
	QR       string
}

// AddOperator adds the operator name with role, on behalf of by, who needs
// the admin scope (else EFORBIDDEN). An empty password has one generated
// (returned in the Enrolment); else it must be MinPasswordLen to
// MaxPasswordLen characters. name is an RFC 8265 user name in its normal
// form, of one script, that does not read as another operator's (name.go;
// else EINVALID about name). The password is kept as an argon2id hash; a
// TOTP secret is generated. The operator and the audit row "operator.add"
// (name and role, no secret) are written in one transaction; a taken name
// is ECONFLICT.
func (s *Service) AddOperator(ctx context.Context, by *Principal, name, role, password string) (*lapse.Operator, *Enrolment, error) {
	if err := requireAdmin(by, "adding an operator"); err != nil {
		return nil, nil, err
	}
	name, err := checkOperatorName("name", name)
	if err != nil {
		return nil, nil, err
	}
	if _, err := RoleScopes(role); err != nil {
		return nil, nil, err
	}
	password, generated, err := newPassword(password)
	if err != nil {
		return nil, nil, err
	}
	hash, err := s.hashPassword(ctx, password)
	if err != nil {
		return nil, nil, err
	}
	enr, err := s.enrol(name)
	if err != nil {
		return nil, nil, err
	}
	enr.Password = generated

	var o *lapse.Operator
	err = s.tx(ctx, func(as lapse.AccessStore) error {
		now := s.clock.Now()
		ops, err := as.OperatorList(ctx)
		if err != nil {
			return err
		}
		if other, ok := lookAlike(name, ops, func(o *lapse.Operator) string { return o.Name }, operatorFold); ok {
			return errLookAlike("name", "operator", other)
		}
		o, err = as.OperatorCreate(ctx, &lapse.Operator{
			Name: name, Role: role, PasswordHash: hash, TOTPSecret: enr.Secret,
			Lang: "en", TimeZone: "UTC", CreatedAt: now,
		})
		if errors.Is(err, lapse.ErrAccessExists) {
			return lapse.Refine(lapse.ErrAccessExists, "an operator named %q exists", name)
		}
		if err != nil {
			return err
		}
		e := by.Entry("operator.add", operatorTarget(o), map[string]any{"name": name, "role": role})
		e.At, e.Result = now, "ok"
		return lapse.AuditAppend(ctx, as, e)
	})
	if err != nil {
		return nil, nil, err
	}
	return redact(o), enr, nil
}

// newPassword is password checked as AddOperator and ResetOperator take
// it: MinPasswordLen to MaxPasswordLen characters, else EINVALID about
// password. An empty one has one made instead (144 random bits), which is
// returned as generated too.
func newPassword(password string) (pw, generated string, err error) {
	switch n := utf8.RuneCountInString(password); {
	case password == "":
		var b [18]byte
		rand.Read(b[:])
		password = base64.RawURLEncoding.EncodeToString(b[:]) // 144 bits
		return password, password, nil
	case n < MinPasswordLen:
		return "", "", lapse.FieldError("password", "must be at least %d characters", MinPasswordLen)
	case n > MaxPasswordLen:
		return "", "", lapse.FieldError("password", "must be at most %d characters", MaxPasswordLen)
	}
	return password, "", nil
}

// enrol makes a new TOTP secret for the operator name: the Enrolment's
// Secret, URI and QR.
func (s *Service) enrol(name string) (*Enrolment, error) {
	key, err := totp.Generate(totp.GenerateOpts{Issuer: s.cfg.Issuer, AccountName: name})
	if err != nil {
		return nil, lapse.Errorf(lapse.EINTERNAL, "access: make a TOTP secret: %v", err)
	}
	enr := &Enrolment{Secret: key.Secret(), URI: key.URL()}
	qr, err := qrcode.New(enr.URI, qrcode.Medium)
	if err != nil {
		return nil, lapse.Errorf(lapse.EINTERNAL, "access: make a QR code: %v", err)
	}
	enr.QR = qr.ToSmallString(false)
	return enr, nil
}

// Operators returns every operator, by ID, without password hashes and
// TOTP secrets.
func (s *Service) Operators(ctx context.Context) ([]*lapse.Operator, error) {
	ops, err := s.access.OperatorList(ctx)
	for _, o := range ops {
		redact(o)
	}
	return ops, err
}

// DisableOperator stops the operator name from logging in and ends their
// sessions (kept, ended, so that a request through one is refused in their
// name: SessionHolder), on behalf of by, who needs the admin scope (else EFORBIDDEN),
// and cancels the approval requests they made that are still pending, so
// that none is carried out in their name (cancelMade).
// An unknown name is ENOTFOUND; an operator already disabled is returned
// as it is, with changed false and no audit row; the last enabled admin
// is ECONFLICT (changeOperator). The change, the sessions' end, the
// cancellations and the audit row "operator.disable" (the name, and
// "approvals_cancelled": how many) are one transaction.
func (s *Service) DisableOperator(ctx context.Context, by *Principal, name string) (*lapse.Operator, bool, error) {
	if err := requireAdmin(by, "disabling an operator"); err != nil {
		return nil, false, err
	}
	return s.changeOperator(ctx, by, name, "operator.disable", func(o *lapse.Operator, now time.Time) (operatorChange, error) {
		if !o.DisabledAt.IsZero() {
			return operatorChange{}, nil
		}
		o.DisabledAt = now
		return operatorChange{details: map[string]any{"name": o.Name}, endSessions: true, cancelApprovals: "disabled"}, nil
	})
}

// EnableOperator lets the operator name log in again, on behalf of by, who
// needs the admin scope (else EFORBIDDEN): it clears their DisabledAt and
// their lockout (FailedLogins and LockedUntil), so that an operator locked
// out by failed logins, disabled or not, may try again at once. An unknown
// name is ENOTFOUND. An operator with nothing to clear (not disabled, no
// failed logins counted) is returned as it is, with changed false and no
// audit row, as DisableOperator does with one disabled already; otherwise
// the change and its audit row "operator.enable" (the name and what was
// cleared) are one transaction. Sessions ended by the disable stay ended.
func (s *Service) EnableOperator(ctx context.Context, by *Principal, name string) (*lapse.Operator, bool, error) {
	if err := requireAdmin(by, "enabling an operator"); err != nil {
		return nil, false, err
	}
	return s.changeOperator(ctx, by, name, "operator.enable", func(o *lapse.Operator, _ time.Time) (operatorChange, error) {
		if o.DisabledAt.IsZero() && o.FailedLogins == 0 && o.LockedUntil.IsZero() {
			return operatorChange{}, nil
		}
		details := map[string]any{"name": o.Name, "was_disabled": !o.DisabledAt.IsZero(), "failed_logins": o.FailedLogins}
		if !o.LockedUntil.IsZero() {
			details["locked_until"] = o.LockedUntil
		}
		o.DisabledAt, o.FailedLogins, o.LockedUntil = time.Time{}, 0, time.Time{}
		return operatorChange{details: details}, nil
	})
}

// SetOperatorRole gives the operator name role (viewer, operator or
// admin; else EINVALID about role, as AddOperator), on behalf of by, who
// needs the admin scope (else EFORBIDDEN), and ends their sessions: a
// session's scopes are its operator's role's, so they log in again under
// the new one. An unknown name is ENOTFOUND. An operator who has role
// already is returned as it is, with changed false, no session ended and
// no audit row; otherwise the change, the sessions' end and the audit row
// "operator.role" (the name, the role before and after) are one
// transaction. A disabled operator's role changes too; they stay disabled.
// The last enabled admin keeps the role admin: another is ECONFLICT
// (changeOperator).
func (s *Service) SetOperatorRole(ctx context.Context, by *Principal, name, role string) (*lapse.Operator, bool, error) {
	if err := requireAdmin(by, "changing an operator's role"); err != nil {
		return nil, false, err
	}
	if _, err := RoleScopes(role); err != nil {
		return nil, false, err
	}
	return s.changeOperator(ctx, by, name, "operator.role", func(o *lapse.Operator, _ time.Time) (operatorChange, error) {
		if o.Role == role {
			return operatorChange{}, nil
		}
		from := o.Role
		o.Role = role
		return operatorChange{details: map[string]any{"name": o.Name, "from": from, "to": role}, endSessions: true}, nil
	})
}

// ResetOperator gives the operator name, who lost their password or
// authenticator, a new password and a new TOTP secret, on behalf of by,
// who needs the admin scope (else EFORBIDDEN). password is taken as
// AddOperator takes it (empty: one is made, and returned in the
// Enrolment), and the Enrolment holds the new secret as AddOperator's
// does. Their lockout (FailedLogins, LockedUntil) is cleared, and so is
// LastTOTPStep, the step of the last code of the old secret, lest it
// refuse the new secret's codes of that step; their sessions end, and the
// approval requests they made that are still pending are cancelled
// (cancelMade): a reset is for credentials lost, perhaps to someone else,
// and what was asked with them is not to be carried out in their name. An
// unknown name is ENOTFOUND; bad input changes nothing. The change, the
// sessions' end, the cancellations and the audit row "operator.reset" (the
// name, whether the password was made, neither it nor the secret, and
// "approvals_cancelled") are one transaction.
// A disabled operator stays disabled (EnableOperator).
func (s *Service) ResetOperator(ctx context.Context, by *Principal, name, password string) (*lapse.Operator, *Enrolment, error) {
	if err := requireAdmin(by, "resetting an operator"); err != nil {
		return nil, nil, err
	}
	password, generated, err := newPassword(password)
	if err != nil {
		return nil, nil, err
	}
	hash, err := s.hashPassword(ctx, password) // before the row is locked: it takes a while
	if err != nil {
		return nil, nil, err
	}
	var enr *Enrolment
	o, _, err := s.changeOperator(ctx, by, name, "operator.reset", func(o *lapse.Operator, _ time.Time) (operatorChange, error) {
		var err error
		if enr, err = s.enrol(o.Name); err != nil {
			return operatorChange{}, err
		}
		enr.Password = generated
		o.PasswordHash, o.TOTPSecret = hash, enr.Secret
		o.FailedLogins, o.LockedUntil, o.LastTOTPStep = 0, time.Time{}, 0
		return operatorChange{details: map[string]any{"name": o.Name, "password_generated": generated != ""}, endSessions: true, cancelApprovals: "reset"}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return o, enr, nil
}

// EndOperatorSessions logs the operator name out everywhere, on behalf of
// by, who needs the admin scope (else EFORBIDDEN): every session of theirs
// in force ends (kept, ended, as a logout leaves it), so that a request
// through any of them is refused from then on. They may log in again
// (DisableOperator keeps them out). An unknown name is ENOTFOUND. The
// sessions' end and the audit row "operator.logout" (the name) are one
// transaction, written whether a session was in force or not: the admin
// asked, and no session of theirs is in force after it either way.
func (s *Service) EndOperatorSessions(ctx context.Context, by *Principal, name string) (*lapse.Operator, error) {
	if err := requireAdmin(by, "logging an operator out"); err != nil {
		return nil, err
	}
	o, _, err := s.changeOperator(ctx, by, name, "operator.logout", func(o *lapse.Operator, _ time.Time) (operatorChange, error) {
		return operatorChange{details: map[string]any{"name": o.Name}, endSessions: true}, nil
	})
	return o, err
}

// operatorChange is what a change of an operator made (changeOperator):
// the details of its audit row, nil when it changed nothing, whether it
// ends the operator's sessions, and, when not "", what was done to them
// ("disabled", "reset") that cancels the approval requests they made that
// are still pending.
type operatorChange struct {
	details         map[string]any
	endSessions     bool
	cancelApprovals string
}

// changeOperator runs change on the operator name (as Login takes it:
// operatorName), locked, in a transaction, and writes what it changed with
// its audit row action (by's, the change's details) and, when it says so,
// the end of the operator's sessions, all in that transaction. A change
// that changed nothing writes nothing; changed says which. The operator
// comes back redacted; an unknown name is lockOperator's ENOTFOUND.
//
// A change that would leave no enabled admin operator (it disables the
// last one, or gives them another role) is ECONFLICT, "… is the last
// enabled admin …", and changes nothing, so that someone remains who may
// manage operators and keys; the command line and admin keys, which stay
// admin whatever the operators are, make another operator admin first.
func (s *Service) changeOperator(ctx context.Context, by *Principal, name, action string,
	change func(o *lapse.Operator, now time.Time) (operatorChange, error)) (_ *lapse.Operator, changed bool, _ error) {
	name = operatorName(name)
	var o *lapse.Operator
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		changed = false // a retried transaction starts over
		now := s.clock.Now()
		admins, err := lockAdmins(ctx, as, name)
		if err != nil {
			return err
		}
		if o, err = lockOperator(ctx, as, name); err != nil {
			return err
		}
		wasAdmin := enabledAdmin(o)
		c, err := change(o, now)
		if err != nil || c.details == nil {
			return err
		}
		if wasAdmin && !enabledAdmin(o) && !slices.ContainsFunc(admins, func(a *lapse.Operator) bool { return a.ID != o.ID }) {
			return lapse.Errorf(lapse.ECONFLICT, "operator %q is the last enabled admin, and this would leave none: make another "+
				"operator admin first (lapse operator add --role admin, or lapse operator role NAME admin)", o.Name)
		}
		if err := as.OperatorUpdate(ctx, o); err != nil {
			return err
		}
		if c.endSessions {
			if err := as.SessionEndOperator(ctx, o.ID, now); err != nil {
				return err
			}
		}
		if c.cancelApprovals != "" {
			n, err := cancelMade(ctx, as, by, o, c.cancelApprovals, now)
			if err != nil {
				return err
			}
			c.details["approvals_cancelled"] = n
		}
		e := by.Entry(action, operatorTarget(o), c.details)
		e.At, e.Result = now, "ok"
		changed = true
		return lapse.AuditAppend(ctx, as, e)
	})
	if err != nil {
		return nil, false, err
	}
	return redact(o), changed, nil
}

// operatorName is an operator's name as it is looked up: without
// surrounding space, as AddOperator keeps it and Login reads it, so that
// "alice " names alice in every command as it does at the login.
func operatorName(name string) string { return strings.TrimSpace(name) }

// enabledAdmin reports whether o is an admin who is not disabled.
func enabledAdmin(o *lapse.Operator) bool { return o.Role == RoleAdmin && o.DisabledAt.IsZero() }

// lockAdmins locks, in the transaction as, the rows of the enabled admin
// operators and of the operator name, in the order of their IDs, and
// returns the admins that are enabled once locked. A change of an operator
// takes these locks first, in that one order, so that two changes that
// each take an admin away (the two last admins disabled at once) take
// turns without deadlocking, and the second sees what the first did.
func lockAdmins(ctx context.Context, as lapse.AccessStore, name string) ([]*lapse.Operator, error) {
	ops, err := as.OperatorList(ctx) // by ID
	if err != nil {
		return nil, err
	}
	var admins []*lapse.Operator
	for _, op := range ops {
		if op.Name != name && !enabledAdmin(op) {
			continue
		}
		locked, err := as.OperatorLock(ctx, op.Name)
		if err != nil {
			return nil, err
		}
		if enabledAdmin(locked) {
			admins = append(admins, locked)
		}
	}
	return admins, nil
}

// lockOperator is OperatorLock with a not-found error naming name.
func lockOperator(ctx context.Context, as lapse.AccessStore, name string) (*lapse.Operator, error) {
	o, err := as.OperatorLock(ctx, name)
	if errors.Is(err, lapse.ErrAccessNotFound) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no operator is named %q", lapse.CleanReason(name))
	}
	return o, err
}

// operatorByID returns the operator with id. The seam finds operators by
// name only, so it reads them all; there are as many as there are people
// running the shop.
func operatorByID(ctx context.Context, as lapse.AccessStore, id int64) (*lapse.Operator, error) {
	ops, err := as.OperatorList(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range ops {
		if o.ID == id {
			return o, nil
		}
	}
	return nil, lapse.Refine(lapse.ErrAccessNotFound, "no operator has the id %d", id)
}

func operatorTarget(o *lapse.Operator) string { return "operator:" + strconv.FormatInt(o.ID, 10) }

// redact removes o's secrets and returns it.
func redact(o *lapse.Operator) *lapse.Operator {
	o.PasswordHash, o.TOTPSecret = "", ""
	return o
}

// hashPassword hashes password with the configured cost, taking a turn
// among the hashes running at once.
func (s *Service) hashPassword(ctx context.Context, password string) (string, error) {
	if err := s.takeTurn(ctx); err != nil {
		return "", err
	}
	defer func() { <-s.hashing }()
	h, err := argon2id.CreateHash(password, s.cfg.HashParams)
	if err != nil {
		return "", lapse.Errorf(lapse.EINTERNAL, "access: hash a password: %v", err)
	}
	return h, nil
}

// checkPassword compares password with hash, taking a turn likewise. A hash
// that does not decode does not match.
func (s *Service) checkPassword(ctx context.Context, password, hash string) (bool, error) {
	if err := s.takeTurn(ctx); err != nil {
		return false, err
	}
	defer func() { <-s.hashing }()
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	return ok && err == nil, nil
}

// takeTurn waits for a free hashing slot, among at most hashWaiting others:
// past them it fails at once with errHashBusy. Without that bound a flood of
// logins from many addresses, each within its address's limit, would queue
// without end, every one holding an API in-flight slot (and a goroutine)
// while it waits, until nothing else is served.
func (s *Service) takeTurn(ctx context.Context) error {
	select {
	case s.hashing <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.waiting <- struct{}{}:
	default:
		return errHashBusy
	}
	defer func() { <-s.waiting }()
	select {
	case s.hashing <- struct{}{}:
		return nil
	case <-ctx.Done():
		return lapse.Errorf(lapse.EUNAVAILABLE, "too many logins at once; try again later")
	}
}

// SetPreferences keeps an operator's console language (en or zh) and time
// zone (an IANA name) for their next pages. Only the operator themself
// sets them; it is not an action on money and is not audited.
func (s *Service) SetPreferences(ctx context.Context, p *Principal, lang, zone string) error {
	if p == nil || p.Kind != KindOperator {
		return lapse.Errorf(lapse.EINVALID, "only operators have console preferences")
	}
	if lang != "en" && lang != "zh" {
		return lapse.FieldError("lang", "must be en or zh")
	}
	if _, err := time.LoadLocation(zone); err != nil || zone == "" || zone == "Local" {
		return lapse.FieldError("time_zone", "%q is not an IANA time zone (e.g. Asia/Shanghai)", zone)
	}
	return s.tx(ctx, func(as lapse.AccessStore) error {
		o, err := lockOperator(ctx, as, p.Name)
		if err != nil {
			return err
		}
		o.Lang, o.TimeZone = lang, zone
		if err := as.OperatorUpdate(ctx, o); err != nil {
			return err
		}
		p.Lang, p.TimeZone = lang, zone
		return nil
	})
}
