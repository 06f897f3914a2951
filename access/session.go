package access

import (
	"context"
	"errors"
	"strconv"

	"github.com/lapsehq/lapse"
)

// errBadSession is the one answer to a token that does not find a session
// in force, whatever is wrong with it.
func errBadSession() error {
	return lapse.Errorf(lapse.EUNAUTHORIZED, "the session is not valid or has ended; log in again")
}

// Session returns the principal of the operator whose session token is
// token. A token that is malformed, unknown or expired, or whose operator
// is disabled, is the same EUNAUTHORIZED error. A failing store is its own
// error.
func (s *Service) Session(ctx context.Context, token string) (*Principal, error) {
	sess, o, err := s.sessionOf(ctx, token)
	if err != nil {
		return nil, err
	}
	if !s.clock.Now().Before(sess.ExpiresAt) || !o.DisabledAt.IsZero() {
		return nil, errBadSession()
	}
	return operatorPrincipal(o, sess), nil
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
// a session is (VerifySecondFactor, the changes that end an operator's
// sessions): a second factor given in the session meanwhile, which read the
// session before the logout and writes it back whole, would otherwise put
// back the expiry the logout took away, and the session would live on.
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
