package access

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
)

// errBadSession is the one answer to a token that does not find a session
// in force, whatever is wrong with it.
func errBadSession() error {
	return lapse.Errorf(lapse.EUNAUTHORIZED, "the session is not valid or has ended; log in again")
}

// Session returns the principal of the operator whose session token is
// token, and counts the call as the session's use: it then lasts
// Config.SessionIdle from now, never past Config.SessionTTL from its login
// (the end is moved once a minute at most). A token that is malformed,
// unknown, expired, idle too long or logged out, or whose operator is
// disabled, is the same EUNAUTHORIZED error. A failing store is its own
// error.
func (s *Service) Session(ctx context.Context, token string) (*Principal, error) {
	sess, o, err := s.sessionOf(ctx, token)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	if !now.Before(sess.ExpiresAt) || !o.DisabledAt.IsZero() {
		return nil, errBadSession()
	}
	if s.idleEnd(sess, now).Sub(sess.ExpiresAt).Abs() > s.touchStep() {
		if sess, err = s.touch(ctx, o, sess.ID, now); err != nil {
			return nil, err
		}
	}
	return operatorPrincipal(o, sess), nil
}

// idleEnd is when sess ends if it is used at now and not again:
// Config.SessionIdle later, but never past Config.SessionTTL from its login.
func (s *Service) idleEnd(sess *lapse.Session, now time.Time) time.Time {
	end, last := now.Add(s.cfg.SessionIdle), sess.CreatedAt.Add(s.cfg.SessionTTL)
	if last.Before(end) {
		return last
	}
	return end
}

// touchStep is how far a session's end may be from its idleEnd before a
// use writes it: a minute, or a tenth of a shorter SessionIdle.
func (s *Service) touchStep() time.Duration { return min(s.cfg.SessionIdle/10, time.Minute) }

// touch moves the end of the session id, used at now, to its idleEnd: later
// for a session in use, earlier for one made when sessions lasted longer
// (another SessionTTL, or before SessionIdle). It writes under the
// operator's lock, as every write of a session is (Logout), reading the
// session again there: one ended meanwhile stays ended, and is
// EUNAUTHORIZED.
func (s *Service) touch(ctx context.Context, o *lapse.Operator, id []byte, now time.Time) (*lapse.Session, error) {
	var sess *lapse.Session
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		locked, err := as.OperatorLock(ctx, o.Name)
		if errors.Is(err, lapse.ErrAccessNotFound) {
			return errBadSession()
		}
		if err != nil {
			return err
		}
		if sess, err = as.SessionGet(ctx, id); errors.Is(err, lapse.ErrAccessNotFound) {
			return errBadSession()
		}
		if err != nil {
			return err
		}
		if !now.Before(sess.ExpiresAt) || !locked.DisabledAt.IsZero() || sess.OperatorID != locked.ID {
			return errBadSession()
		}
		sess.ExpiresAt = s.idleEnd(sess, now)
		return as.SessionUpdate(ctx, sess)
	})
	if err != nil {
		return nil, err
	}
	if !now.Before(sess.ExpiresAt) {
		return nil, errBadSession() // past SessionTTL, made shorter since its login
	}
	return sess, nil
}

// SessionHolder returns the principal of the operator whose session token
// is token, whether the session is in force or not (expired, logged out, or
// its operator disabled): who sent a request that is refused for its session,
// for the refusal's audit row (S9). It lets no one act; Session does. A
// token that is malformed or names no session, or whose operator is gone,
// is Session's EUNAUTHORIZED error.
func (s *Service) SessionHolder(ctx context.Context, token string) (*Principal, error) {
	sess, o, err := s.sessionOf(ctx, token)
	if err != nil {
		return nil, err
	}
	return operatorPrincipal(o, sess), nil
}

// sessionOf returns the session token names and its operator, in force or
// not.
func (s *Service) sessionOf(ctx context.Context, token string) (*lapse.Session, *lapse.Operator, error) {
	if !validToken(token) {
		return nil, nil, errBadSession()
	}
	sess, err := s.access.SessionGet(ctx, hashSecret(token))
	if errors.Is(err, lapse.ErrAccessNotFound) {
		return nil, nil, errBadSession()
	}
	if err != nil {
		return nil, nil, err
	}
	o, err := operatorByID(ctx, s.access, sess.OperatorID)
	if errors.Is(err, lapse.ErrAccessNotFound) {
		return nil, nil, errBadSession()
	}
	if err != nil {
		return nil, nil, err
	}
	return sess, o, nil
}

// Logout ends the session of token, leaving an audit row "logout" that
// names clientAddr, where the request to log out came from. The
// session is kept, ended (its ExpiresAt now), so that a request that comes
// with its token later is refused in its operator's name (SessionHolder).
// A token that finds no session in force is not an error and writes
// nothing: the session has ended either way.
//
// The session is ended under its operator's lock, as every other write of
// a session is (VerifySecondFactor, a use that moves its end, the changes
// that end an operator's sessions): a second factor given in the session
// meanwhile, which read the session before the logout and writes it back
// whole, would otherwise put back the expiry the logout took away, and the
// session would live on.
func (s *Service) Logout(ctx context.Context, token, clientAddr string) error {
	if !validToken(token) {
		return nil
	}
	id := hashSecret(token)
	return s.tx(ctx, func(as lapse.AccessStore) error {
		sess, err := as.SessionGet(ctx, id)
		if errors.Is(err, lapse.ErrAccessNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		o, err := operatorByID(ctx, as, sess.OperatorID)
		if err != nil && !errors.Is(err, lapse.ErrAccessNotFound) {
			return err
		}
		if o != nil {
			if o, err = as.OperatorLock(ctx, o.Name); err != nil && !errors.Is(err, lapse.ErrAccessNotFound) {
				return err
			}
			// Read again under the lock: what a writer that held it
			// committed is in it now.
			if sess, err = as.SessionGet(ctx, id); err != nil {
				return err
			}
		}
		now := s.clock.Now()
		if !now.Before(sess.ExpiresAt) {
			return nil
		}
		sess.ExpiresAt = now
		if err := as.SessionUpdate(ctx, sess); err != nil {
			return err
		}
		var e *lapse.AuditEntry
		if o != nil {
			e = operatorPrincipal(o, sess).Entry("logout", operatorTarget(o), nil)
		} else {
			e = &lapse.AuditEntry{ActorKind: KindOperator, ActorID: strconv.FormatInt(sess.OperatorID, 10), Action: "logout"}
		}
		e.At, e.Result, e.ClientAddr = now, "ok", clientAddr
		return lapse.AuditAppend(ctx, as, e)
	})
}

// LogoutEverywhere ends every session in force of the operator p, the one
// p acts through too: for an operator who left a session open elsewhere,
// or fears its token was taken. Each is kept, ended, as Logout leaves it.
// One audit row "logout.all" names clientAddr, where the request came
// from. Only an operator has sessions (else EINVALID); one whose session
// ended, or who was disabled, since the request was let in is
// EUNAUTHORIZED (actorInForce) and ends nothing. The sessions' end and
// the row are one transaction, under the operator's lock, as every write
// of a session is (Logout).
func (s *Service) LogoutEverywhere(ctx context.Context, p *Principal, clientAddr string) error {
	if p == nil || p.Kind != KindOperator {
		return lapse.Errorf(lapse.EINVALID, "only an operator has sessions to end")
	}
	return s.tx(ctx, func(as lapse.AccessStore) error {
		now := s.clock.Now()
		o, err := actorInForce(ctx, as, p, now)
		if err != nil {
			return err
		}
		if err := as.SessionEndOperator(ctx, o.ID, now); err != nil {
			return err
		}
		e := p.Entry("logout.all", operatorTarget(o), nil)
		e.At, e.Result, e.ClientAddr = now, "ok", clientAddr
		return lapse.AuditAppend(ctx, as, e)
	})
}

// actorInForce checks, in the transaction as, that the operator p may
// still act, and returns their row, locked: it is theirs and not
// disabled, and the session p acts through, when it does, is in force at
// now. Otherwise it is errBadSession: a disable, a reset or a logout that
// committed after p's request was let in (Session) stops the request
// here, for what it writes under the operator's lock.
func actorInForce(ctx context.Context, as lapse.AccessStore, p *Principal, now time.Time) (*lapse.Operator, error) {
	o, err := as.OperatorLock(ctx, p.Name)
	if errors.Is(err, lapse.ErrAccessNotFound) {
		return nil, errBadSession()
	}
	if err != nil {
		return nil, err
	}
	if o.ID != p.OperatorID || !o.DisabledAt.IsZero() {
		return nil, errBadSession()
	}
	if p.Session != nil {
		sess, err := as.SessionGet(ctx, p.Session.ID)
		if errors.Is(err, lapse.ErrAccessNotFound) {
			return nil, errBadSession()
		}
		if err != nil {
			return nil, err
		}
		if sess.OperatorID != o.ID || !now.Before(sess.ExpiresAt) {
			return nil, errBadSession()
		}
	}
	return o, nil
}
