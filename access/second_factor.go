package access

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
)

// TOTP codes are RFC 6238's defaults, which every authenticator app uses.
const totpPeriod = 30 // seconds

var totpOpts = totp.ValidateOpts{Period: totpPeriod, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// codeStep returns the time step that code is right for, with secret, at
// now or one step either side, and later than last, the step of the last
// code accepted. When there is none, reason says why.
func codeStep(secret, code string, now time.Time, last int64) (step int64, reason string) {
	code = strings.ReplaceAll(code, " ", "")
	if len(code) != 6 || strings.IndexFunc(code, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, "malformed code"
	}
	cur := now.Unix() / totpPeriod
	found, used := false, false
	for st := cur - 1; st <= cur+1; st++ {
		want, err := totp.GenerateCodeCustom(secret, time.Unix(st*totpPeriod, 0), totpOpts)
		if err != nil {
			return 0, "the operator's TOTP secret is unusable"
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			if st > last {
				step, found = st, true
			} else {
				used = true
			}
		}
	}
	switch {
	case found:
		return step, ""
	case used:
		return 0, codeUsed
	}
	return 0, "wrong code"
}

// codeUsed is codeStep's reason for a code accepted before.
const codeUsed = "code already used"

// VerifySecondFactor checks a TOTP code of the operator p and, when p acts
// through a session, records in it that a second factor was given now
// (p.Session is updated too). Only operators give one: for keys and the
// command line it is EINVALID. An empty code is EINVALID. A wrong code, or
// one accepted before (a code is good once), is EFORBIDDEN and counts
// toward the operator's lockout as a failed login does; while locked out it
// is EFORBIDDEN without a look at the code. A code accepted before, sent
// while the session's second factor is fresh (a form sent twice), is
// admitted without moving that second factor's time: the session needs no
// code then. A session that ended is
// EUNAUTHORIZED. Every attempt leaves an audit row "second_factor".
func (s *Service) VerifySecondFactor(ctx context.Context, p *Principal, code string) error {
	if p == nil || p.Kind != KindOperator {
		return lapse.Errorf(lapse.EINVALID, "only operators give a second factor")
	}
	if strings.TrimSpace(code) == "" {
		return lapse.FieldError("code", "is required")
	}
	var (
		outcome error
		at      time.Time
	)
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		outcome = nil
		now := s.clock.Now()
		e := p.Entry("second_factor", "operator:"+p.ID, nil)
		e.At = now
		o, err := as.OperatorLock(ctx, p.Name)
		if err != nil && !errors.Is(err, lapse.ErrAccessNotFound) {
			return err
		}
		var sess *lapse.Session
		if p.Session != nil {
			if sess, err = as.SessionGet(ctx, p.Session.ID); err != nil && !errors.Is(err, lapse.ErrAccessNotFound) {
				return err
			}
		}
		var reason string
		counts := false
		switch {
		case o == nil || o.ID != p.OperatorID || !o.DisabledAt.IsZero():
			outcome, reason = errBadSession(), "operator disabled or gone"
		case p.Session != nil && (sess == nil || sess.OperatorID != o.ID || !now.Before(sess.ExpiresAt)):
			outcome, reason = errBadSession(), "session ended"
		case now.Before(o.LockedUntil):
			outcome = errLocked(lapse.EFORBIDDEN, o)
			reason = lapse.ErrorMessage(outcome)
		default:
			var step int64
			if step, reason = codeStep(o.TOTPSecret, code, now, o.LastTOTPStep); reason != "" {
				if reason == codeUsed && sess != nil && s.fresh(sess, now) {
					// The operator's own code again (a form sent twice) while
					// the second factor given with it still counts: nothing
					// more to prove, nothing to count against them.
					at, e.Result, e.SecondFactor = sess.SecondFactorAt, "ok: "+codeUsed+", the second factor still fresh", "totp"
					return lapse.AuditAppend(ctx, as, e)
				}
				counts, outcome = true, lapse.Errorf(lapse.EFORBIDDEN, "the code is wrong")
				if reason == codeUsed {
					outcome = lapse.Errorf(lapse.EFORBIDDEN, "the code was used already: give the next one")
				}
				break
			}
			o.LastTOTPStep = step
			if err := as.OperatorUpdate(ctx, o); err != nil {
				return err
			}
			if sess != nil {
				sess.SecondFactorAt = now
				if err := as.SessionUpdate(ctx, sess); err != nil {
					return err
				}
			}
			at, e.Result, e.SecondFactor = now, "ok", "totp"
			return lapse.AuditAppend(ctx, as, e)
		}
		if counts {
			s.fail(o, now)
			if err := as.OperatorUpdate(ctx, o); err != nil {
				return err
			}
		}
		e.Result = reason
		return lapse.AuditAppend(ctx, as, e)
	})
	switch {
	case err != nil:
		return err
	case outcome != nil:
		return outcome
	}
	if p.Session != nil {
		p.Session.SecondFactorAt = at
	}
	return nil
}

// SecondFactorFresh reports whether p is an operator whose session, still
// in force, had a second factor given less than SecondFactorWindow ago.
func (s *Service) SecondFactorFresh(p *Principal) bool {
	if p == nil || p.Kind != KindOperator || p.Session == nil {
		return false
	}
	return s.fresh(p.Session, s.clock.Now())
}

// fresh reports whether sess, in force at now, had a second factor given
// less than SecondFactorWindow before.
func (s *Service) fresh(sess *lapse.Session, now time.Time) bool {
	if sess.SecondFactorAt.IsZero() {
		return false
	}
	age := now.Sub(sess.SecondFactorAt)
	return age >= 0 && age < s.cfg.SecondFactorWindow && now.Before(sess.ExpiresAt)
}

// RequireSecondFactor admits p to a risky action and returns the second
// factor it used, for the action's audit row (AuditEntry.SecondFactor).
// Keys and the command line act within their scopes without one: ("",
// nil). An operator who gives a code has it checked by VerifySecondFactor
// (its errors are RequireSecondFactor's): ("totp", nil). An operator
// without a code passes when SecondFactorFresh; otherwise it is
// EFORBIDDEN, "this action needs a fresh second factor: …".
func (s *Service) RequireSecondFactor(ctx context.Context, p *Principal, code string) (string, error) {
	switch {
	case p == nil:
		return "", lapse.Errorf(lapse.EUNAUTHORIZED, "no credential")
	case p.Kind == KindKey || p.Kind == KindCLI:
		return "", nil
	case p.Kind != KindOperator:
		return "", lapse.Errorf(lapse.EFORBIDDEN, "a %s principal cannot take risky actions", lapse.CleanReason(p.Kind))
	case code != "":
		if err := s.VerifySecondFactor(ctx, p, code); err != nil {
			return "", err
		}
		return "totp", nil
	case s.SecondFactorFresh(p):
		return "totp", nil
	}
	return "", lapse.Errorf(lapse.EFORBIDDEN, "this action needs a fresh second factor: give a TOTP code (one given in the last %s counts)", s.cfg.SecondFactorWindow)
}
