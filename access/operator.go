package access

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
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
	enr := &Enrolment{}
	switch n := utf8.RuneCountInString(password); {
	case password == "":
		var b [18]byte
		rand.Read(b[:])
		password = base64.RawURLEncoding.EncodeToString(b[:]) // 144 bits
		enr.Password = password
	case n < MinPasswordLen:
		return nil, nil, lapse.FieldError("password", "must be at least %d characters", MinPasswordLen)
	case n > MaxPasswordLen:
		return nil, nil, lapse.FieldError("password", "must be at most %d characters", MaxPasswordLen)
	}
	hash, err := s.hashPassword(ctx, password)
	if err != nil {
		return nil, nil, err
	}
	key, err := totp.Generate(totp.GenerateOpts{Issuer: s.cfg.Issuer, AccountName: name})
	if err != nil {
		return nil, nil, lapse.Errorf(lapse.EINTERNAL, "access: make a TOTP secret: %v", err)
	}
	enr.Secret, enr.URI = key.Secret(), key.URL()
	qr, err := qrcode.New(enr.URI, qrcode.Medium)
	if err != nil {
		return nil, nil, lapse.Errorf(lapse.EINTERNAL, "access: make a QR code: %v", err)
	}
	enr.QR = qr.ToSmallString(false)

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
// name: SessionHolder), on behalf of by, who needs the admin scope (else EFORBIDDEN).
// An unknown name is ENOTFOUND; an operator already disabled is returned
// as it is. The change and its audit row "operator.disable" are one
// transaction.
func (s *Service) DisableOperator(ctx context.Context, by *Principal, name string) (*lapse.Operator, error) {
	if err := requireAdmin(by, "disabling an operator"); err != nil {
		return nil, err
	}
	var o *lapse.Operator
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		now := s.clock.Now()
		var err error
		if o, err = lockOperator(ctx, as, name); err != nil || !o.DisabledAt.IsZero() {
			return err
		}
		o.DisabledAt = now
		if err := as.OperatorUpdate(ctx, o); err != nil {
			return err
		}
		if err := as.SessionEndOperator(ctx, o.ID, now); err != nil {
			return err
		}
		e := by.Entry("operator.disable", operatorTarget(o), map[string]any{"name": o.Name})
		e.At, e.Result = now, "ok"
		return lapse.AuditAppend(ctx, as, e)
	})
	if err != nil {
		return nil, err
	}
	return redact(o), nil
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

func (s *Service) takeTurn(ctx context.Context) error {
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
