package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// Names of the built-in subscriptions that issue and revoke benefits.
const (
	IssueSubscriber  = "issue"
	RevokeSubscriber = "revoke"
)

// DefaultIssueRetries is seed 003's compensation schedule: after the first
// failed attempt to issue, retry after 1 min, 5 min, 15 min, 30 min and 1 h,
// then hand the order to an operator.
var DefaultIssueRetries = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour}

// maxCards bounds the cards of one order.
const maxCards = 50

// DefaultCardProduct is the product of the one card an order issues when
// its metadata names no cards (see CardSpecs): the built-in membership flow's
// card.
const DefaultCardProduct = "membership"

// cardIssuing is the card issuing feature (seed 003): it serves the flows
// whose orders issue benefits once paid (lapse.Flow.Issues). Its
// subscription IssueSubscriber issues the order's cards through the card
// issuer, Config.Cards, retrying on Config.IssueRetries before it hands the
// order to an operator; RevokeSubscriber revokes them when a refund starts.
// It keeps the built-in card ledger, which is the issuer unless Config.Cards
// names another, and whose cards Cards and UseCard read (card.go).
type cardIssuing struct {
	e       *Engine
	issuer  lapse.CardIssuer
	ledger  CardLedger
	retries []time.Duration
}

func newCardIssuing(e *Engine, cfg Config) *cardIssuing {
	ci := &cardIssuing{e: e, issuer: cfg.Cards, ledger: CardLedger{e}, retries: cfg.IssueRetries}
	if ci.issuer == nil {
		ci.issuer = ci.ledger
	}
	if len(ci.retries) == 0 {
		ci.retries = DefaultIssueRetries
	}
	return ci
}

func (ci *cardIssuing) serves(f *lapse.Flow) bool { return f.Issues.On != "" }

// subscriptions returns the subscriptions that issue the cards of paid
// orders and revoke them when a refund starts.
func (ci *cardIssuing) subscriptions(flows []*lapse.Flow) []Subscription {
	var issueOn, revokeOn []string
	for _, f := range flows {
		is := f.Issues
		addNew(&issueOn, is.On)
		for _, t := range f.Transitions {
			if t.Event == is.Retry {
				addNew(&issueOn, t.Emits...)
			}
		}
		addNew(&revokeOn, is.Revoke...)
	}
	names := flowNames(flows)
	out := []Subscription{{
		Name: IssueSubscriber, Events: issueOn, Flows: names, Handler: issuer{ci},
		Schedule: lapse.Schedule{Steps: slices.Clone(ci.retries), Jitter: 0.1}, Concurrency: 8,
	}}
	if len(revokeOn) > 0 {
		out = append(out, Subscription{
			Name: RevokeSubscriber, Events: revokeOn, Flows: names, Handler: revoker{ci},
			Schedule: lapse.Schedule{Base: time.Second, Cap: 5 * time.Minute, MaxAttempts: 30, Jitter: 0.2}, Concurrency: 8,
		})
	}
	return out
}

// checkCreate refuses an order whose metadata names cards CardSpecs refuses,
// or a product that is not text fit to show an operator (control
// characters, line separators, bidirectional controls), as a SKU or a user
// id is not: it is a card's name on the console and at the card service.
// It is checked here, at the door, not by CardSpecs: an order stored
// before, and paid, is still issued its cards.
func (ci *cardIssuing) checkCreate(req *lapse.OrderCreate) error {
	specs, err := CardSpecs(&lapse.Order{Metadata: req.Metadata})
	if err != nil {
		return err
	}
	for i, c := range specs {
		if err := lapse.CheckText(fmt.Sprintf("metadata.cards[%d].product", i), c.Product, 64); err != nil {
			return err
		}
	}
	return nil
}

// retryEvent is the event with which an operator runs the compensation of
// an order in manual review again.
func (ci *cardIssuing) retryEvent(f *lapse.Flow) lapse.Event { return f.Issues.Retry }

// checkRetry refuses to retry the compensation of an order whose cards
// were revoked: a refund started (a partial one hands the order to an
// operator with its cards voided), or the built-in ledger holds them
// voided. Issuing is idempotent per order, so a retry could only bring
// back the voided cards, and must not record them as issued. What is true
// of such an order is that the customer paid for benefits they no longer
// hold: the operator refunds what is left; granting new benefits is the
// merchant's decision, outside the order's flow.
func (ci *cardIssuing) checkRetry(ctx context.Context, tx lapse.Store, f *lapse.Flow, o *lapse.Order) error {
	why, err := refundRevoked(ctx, tx, f, o)
	if err != nil {
		return err
	}
	if why == "" {
		cs, err := tx.CardList(ctx, o.ID)
		if err != nil {
			return err
		}
		why = voided(cs)
	}
	if why == "" {
		return nil
	}
	return lapse.Refine(lapse.ErrCardsRevoked, "order %s cannot be retried: %s, and its cards are issued once, so a retry would "+
		"bring back the same cards, voided; refund what is left of the order instead", o.OrderNo, why)
}

// ErrReviveIssue: Engine.RetryDelivery was asked to revive the dead issue
// delivery of an order that waits for an operator's retry of the order
// (manual review), and was never refunded. The issuer issues nothing for
// an order there, keeping what an attempt issued for that retry, so the
// revived delivery would end done with nothing issued and its review
// resolved: the order, paid and without its cards, off the desk. The
// order's retry (Engine.Retry, POST /v1/orders/{order_no}/retry) is what
// issues it. Errors that refine it name the order.
var ErrReviveIssue = &lapse.Error{Code: lapse.ECONFLICT, Message: "the order waits for its own retry, not its issue delivery's"}

// checkRevive refuses to revive d, a dead delivery of IssueSubscriber,
// while its order is where the flow's retry, not its Issued event, applies
// and no refund of it started: there the issuer keeps what attempts issued
// for the operator's retry and does nothing else (ErrReviveIssue). Run
// through a transaction (tx), it locks the order first, so that the
// order's retry and the revival take turns. A delivery of another
// subscriber, or of an order a refund overtook, whose revoke of what an
// attempt issued the revival runs again (revokeLeft), is not its business.
func (ci *cardIssuing) checkRevive(ctx context.Context, tx lapse.Store, d *lapse.Delivery) error {
	if d.Subscriber != IssueSubscriber {
		return nil
	}
	o, err := tx.OrderLock(ctx, d.OrderNo)
	if err != nil {
		return err
	}
	f, err := ci.e.flows.of(o)
	if err != nil || !ci.serves(f) {
		return nil // a flow this engine does not know, or that issues nothing: the revive is the deliverer's to judge
	}
	if f.Transition(o.State, f.Issues.Issued) != nil || f.Transition(o.State, f.Issues.Retry) == nil {
		return nil
	}
	if why, err := refundRevoked(ctx, tx, f, o); err != nil || why != "" {
		return err // a refund started: revived, it revokes what attempts issued (revokeLeft)
	}
	return lapse.Refine(ErrReviveIssue, "order %s is %s: its issuing is started again by the order's retry "+
		"(POST /v1/orders/{order_no}/retry), not by reviving delivery %d, which would issue nothing and resolve its review; "+
		"retry the order, or resolve the review", o.OrderNo, o.State, d.ID)
}

// CardSpecs returns the cards a paid order issues: those its metadata names
// under "cards" ([{"product": "swim-10", "visits": 10}, …]; a bundle names
// several), or else one card of product DefaultCardProduct. An error is
// EINVALID and names the field.
func CardSpecs(o *lapse.Order) ([]lapse.CardSpec, error) {
	var md struct {
		Cards json.RawMessage `json:"cards"`
	}
	if len(o.Metadata) > 0 {
		if err := readMetadata(o.Metadata, &md, false); err != nil {
			return nil, err
		}
	}
	if len(md.Cards) == 0 || string(md.Cards) == "null" {
		return []lapse.CardSpec{{Product: DefaultCardProduct}}, nil
	}
	var cards struct {
		Cards []lapse.CardSpec `json:"cards"`
	}
	if err := readMetadata(append(append([]byte(`{"cards":`), md.Cards...), '}'), &cards, true); err != nil {
		return nil, err
	}
	specs := cards.Cards
	if len(specs) == 0 || len(specs) > maxCards {
		return nil, lapse.FieldError("metadata.cards", "must name 1 to %d cards", maxCards)
	}
	for i, c := range specs {
		switch {
		case c.Product == "" || len(c.Product) > 64:
			return nil, lapse.FieldError(fmt.Sprintf("metadata.cards[%d].product", i), "must be 1 to 64 bytes")
		case c.Visits < 0 || c.Visits > 100000:
			return nil, lapse.FieldError(fmt.Sprintf("metadata.cards[%d].visits", i), "must be 0 (not a count card) to 100000")
		}
	}
	return specs, nil
}

// issuer issues the cards of a paid order and moves it to issued. The order
// is read again before every attempt: one that was refunded or cancelled
// meanwhile gets no card, and a card issued while a refund overtook the
// attempt is revoked at once, so a late compensation never leaves a card on
// a refunded order. The order is moved to issued only with cards that can
// be used: issuing is idempotent per order, so for an order whose cards
// were revoked (a refund started, or they are voided) the issuer answers
// with those cards, voided, or a merchant's service with none, and the
// attempt is refused instead. The first failure moves the order to
// compensating; the last one of the schedule, or a refusal, hands it to an
// operator.
type issuer struct{ ci *cardIssuing }

func (h issuer) Deliver(ctx context.Context, d *lapse.Delivery) error {
	e := h.ci.e
	o, err := e.store.OrderGet(ctx, d.OrderNo)
	if err != nil {
		return err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return err
	}
	is := flow.Issues
	if flow.Transition(o.State, is.Issued) == nil {
		// Issued, cancelled, with an operator or refunded: take back what
		// an earlier attempt whose answer was lost may have issued, unless
		// the order may keep it.
		return h.ci.revokeLeft(ctx, flow, o, d)
	}
	specs, err := h.issue(ctx, flow, o)
	by := Actor{FiredBy: lapse.FiredByEffect, Name: "engine " + e.node}
	if err != nil {
		if _, ferr := e.Fire(ctx, o.OrderNo, Fire{Event: is.Failed, By: by, Reason: "issuing failed: " + lapse.Reason(err)}); ferr != nil &&
			lapse.ErrorCode(ferr) != lapse.ECONFLICT {
			return errors.Join(err, ferr)
		}
		if d.Final || errors.Is(err, lapse.ErrRefused) {
			// The order is handed to an operator in the commit that records
			// the delivery dead, with its review: never one without the other.
			return &onDeath{err: err, fire: Fire{Event: is.GiveUp, By: by, Reason: fmt.Sprintf("issuing failed %d times: %v", d.Failures(), err)}}
		}
		return err
	}
	_, err = e.Fire(ctx, o.OrderNo, Fire{Event: is.Issued, By: by, Reason: fmt.Sprintf("%d cards issued", len(specs))})
	if lapse.ErrorCode(err) != lapse.ECONFLICT {
		return err
	}
	// The order moved while the cards were being issued. Issued by another
	// attempt: fine. Refunded: take back what this attempt issued. Handed
	// to an operator: keep it for the operator's retry.
	now, gerr := e.store.OrderGet(ctx, o.OrderNo)
	if gerr != nil {
		return gerr
	}
	return h.ci.revokeLeft(ctx, flow, now, d)
}

// issue issues the cards of o, an order where the flow's Issued event
// applies, and returns those it asked for, once the issuer answered with
// none that is voided. An error wrapping lapse.ErrRefused is one that a
// retry would meet again: cards its metadata names wrongly, a request the
// issuer refuses, or cards that were revoked (lapse.ErrCardsRevoked), by a
// refund or otherwise, which issuing again, idempotent per order, could
// only bring back voided.
func (h issuer) issue(ctx context.Context, f *lapse.Flow, o *lapse.Order) ([]lapse.CardSpec, error) {
	revoked := func(why string) error {
		return fmt.Errorf("%w: %w", lapse.ErrRefused, lapse.Refine(lapse.ErrCardsRevoked, "order %s is not issued: %s", o.OrderNo, why))
	}
	why, err := refundRevoked(ctx, h.ci.e.store, f, o)
	if err != nil {
		return nil, err
	}
	if why != "" {
		return nil, revoked(why)
	}
	specs, err := CardSpecs(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", lapse.ErrRefused, err)
	}
	got, err := h.ci.issuer.Issue(ctx, &lapse.CardIssueRequest{IdempotencyKey: "lapse-cards-" + o.OrderNo, OrderNo: o.OrderNo,
		UserID: o.UserID, Cards: specs})
	if err != nil && !errors.Is(err, lapse.ErrRefused) && lapse.ErrorCode(err) == lapse.EINVALID {
		err = fmt.Errorf("%w: %v", lapse.ErrRefused, err)
	}
	if err != nil {
		return nil, err
	}
	if why := voided(got); why != "" {
		return nil, revoked(why)
	}
	return specs, nil
}

// revokeKey is the idempotency key with which the revoke subscriber revokes
// an order's cards when a refund starts.
func revokeKey(orderNo string) string { return "lapse-revoke-" + orderNo }

// issueRevokeKey is the idempotency key with which attempt d of the issue
// subscriber revokes what it, or an earlier attempt, may have issued for
// order orderNo. It is not revokeKey: the refund's revoke may have reached
// the card service before the cards an attempt was issuing, and found none,
// and a service that revokes once per key would take the same key again for
// that revoke, and revoke nothing. Each attempt has its own, as an earlier
// attempt's revoke may have come before the cards too. Nor can it be the
// revokeKey of another order: order numbers hold '-' and letters, so a key
// lapse-revoke-<order_no>-issue-… would be the refund's key of the order
// numbered <order_no>-issue-…, whose revoke a service that revokes once per
// key would take for a replay, leaving that refunded order its cards. Its
// prefix is its own, and the order number comes last, after the numbers.
func issueRevokeKey(orderNo string, d *lapse.Delivery) string {
	return fmt.Sprintf("lapse-unissue-%d-%d-%s", d.ID, d.Attempts, orderNo)
}

// revokeLeft revokes the cards of order o, which the issuer does not move
// to issued (it is not where the flow's Issued event applies), unless o
// may keep them: it is issued, or it may still be, through the issuer or an
// operator's retry, and no refund of it started. The cards an order in
// manual review holds (an attempt took effect and lost its answer) are
// thus kept for the operator's retry, which records them as issued, or for
// the refund, which revokes them. d is the issue subscriber's delivery
// whose attempt revokes them (issueRevokeKey).
func (ci *cardIssuing) revokeLeft(ctx context.Context, f *lapse.Flow, o *lapse.Order, d *lapse.Delivery) error {
	why, err := refundRevoked(ctx, ci.e.store, f, o)
	if err != nil {
		return err
	}
	if why == "" && (issuedState(f, o.State) || f.Transition(o.State, f.Issues.Issued) != nil || f.Transition(o.State, f.Issues.Retry) != nil) {
		return nil
	}
	revoked, err := ci.issuer.Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: issueRevokeKey(o.OrderNo, d), OrderNo: o.OrderNo})
	if err == nil && len(revoked) > 0 {
		ci.e.log.Warn("cards issued for an order that may not keep them were revoked", "order_no", o.OrderNo, "state", o.State, "cards", len(revoked))
	}
	return err
}

// issuedState reports whether s is where the flow's Issued event leads.
func issuedState(f *lapse.Flow, s lapse.State) bool {
	for _, t := range f.Transitions {
		if t.Event == f.Issues.Issued && t.To == s {
			return true
		}
	}
	return false
}

// refundRevoked says when the cards of order o were revoked by a refund:
// its transition log holds a transition of f that emits one of f's Revoke
// events. It returns "" when none does. The log, not the state, decides:
// manual review is reached both when issuing gave up (nothing revoked) and
// when a partial refund ended (everything revoked).
func refundRevoked(ctx context.Context, s lapse.Store, f *lapse.Flow, o *lapse.Order) (string, error) {
	trs, err := s.TransitionList(ctx, o.ID)
	if err != nil {
		return "", err
	}
	for _, tr := range trs {
		for _, t := range f.Transitions {
			if t.From != tr.FromState || t.Event != tr.Event || t.To != tr.ToState {
				continue
			}
			for _, ev := range f.Issues.Revoke {
				if slices.Contains(t.Emits, ev) {
					return fmt.Sprintf("its cards were revoked when a refund started (%s at %s)", tr.Event, tr.CreatedAt.UTC().Format(time.RFC3339)), nil
				}
			}
		}
	}
	return "", nil
}

// voided says how many of an order's cards cs are not active, or "" when
// all are (or there are none: a merchant's service answers with none).
func voided(cs []*lapse.Card) string {
	n := 0
	for _, c := range cs {
		if c.Status != lapse.CardActive {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of its %d cards are voided", n, len(cs))
}

// revoker revokes every card of an order whose refund started.
type revoker struct{ ci *cardIssuing }

func (h revoker) Deliver(ctx context.Context, d *lapse.Delivery) error {
	revoked, err := h.ci.issuer.Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: revokeKey(d.OrderNo), OrderNo: d.OrderNo})
	if err == nil && len(revoked) > 0 {
		h.ci.e.log.Info("cards revoked", "order_no", d.OrderNo, "cards", len(revoked))
	}
	return err
}
