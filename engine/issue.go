package engine

import (
	"bytes"
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

// issueSubscriptions returns the subscriptions that issue the cards of paid
// orders and revoke them when a refund starts, for flows that issue.
func issueSubscriptions(flows []*lapse.Flow, e *Engine, cards lapse.CardIssuer, retries []time.Duration) []Subscription {
	var names, issueOn, revokeOn []string
	for _, f := range flows {
		is := f.Issues
		if is.On == "" {
			continue
		}
		names = append(names, f.Name)
		add := func(to *[]string, types ...string) {
			for _, t := range types {
				if !slices.Contains(*to, t) {
					*to = append(*to, t)
				}
			}
		}
		add(&issueOn, is.On)
		for _, t := range f.Transitions {
			if t.Event == is.Retry {
				add(&issueOn, t.Emits...)
			}
		}
		add(&revokeOn, is.Revoke...)
	}
	if len(names) == 0 {
		return nil
	}
	if cards == nil {
		cards = CardLedger{e}
	}
	if len(retries) == 0 {
		retries = DefaultIssueRetries
	}
	out := []Subscription{{
		Name: IssueSubscriber, Events: issueOn, Flows: names, Handler: issuer{e, cards},
		Schedule: lapse.Schedule{Steps: slices.Clone(retries), Jitter: 0.1}, Concurrency: 8,
	}}
	if len(revokeOn) > 0 {
		out = append(out, Subscription{
			Name: RevokeSubscriber, Events: revokeOn, Flows: names, Handler: revoker{e, cards},
			Schedule: lapse.Schedule{Base: time.Second, Cap: 5 * time.Minute, MaxAttempts: 30, Jitter: 0.2}, Concurrency: 8,
		})
	}
	return out
}

// CardSpecs returns the cards a paid order issues: those its metadata names
// under "cards" ([{"product": "swim-10", "visits": 10}, …]; a bundle names
// several), or else one card of product "membership". An error is EINVALID
// and names the field.
func CardSpecs(o *lapse.Order) ([]lapse.CardSpec, error) {
	var md struct {
		Cards json.RawMessage `json:"cards"`
	}
	if len(o.Metadata) > 0 {
		if err := json.Unmarshal(o.Metadata, &md); err != nil {
			return nil, lapse.FieldError("metadata", "must be a JSON object")
		}
	}
	if len(md.Cards) == 0 || string(md.Cards) == "null" {
		return []lapse.CardSpec{{Product: "membership"}}, nil
	}
	var specs []lapse.CardSpec
	dec := json.NewDecoder(bytes.NewReader(md.Cards))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&specs); err != nil {
		return nil, lapse.FieldError("metadata.cards", "must be a list of {\"product\": name, \"visits\": count}: %v", err)
	}
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
// a refunded order. The first failure moves the order to compensating; the
// last one of the schedule hands it to an operator.
type issuer struct {
	e     *Engine
	cards lapse.CardIssuer
}

func (h issuer) Deliver(ctx context.Context, d *lapse.Delivery) error {
	e := h.e
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
		if revokedState(flow, o.State) {
			// A refund overtook this delivery: make sure nothing an earlier
			// attempt issued, whose answer was lost, outlives it.
			_, err := h.cards.Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: revokeKey(o), OrderNo: o.OrderNo})
			return err
		}
		return nil // issued, cancelled or with an operator: nothing to do
	}
	specs, err := CardSpecs(o)
	if err == nil {
		_, err = h.cards.Issue(ctx, &lapse.CardIssueRequest{IdempotencyKey: "lapse-cards-" + o.OrderNo, OrderNo: o.OrderNo,
			UserID: o.UserID, Cards: specs})
		if err != nil && !errors.Is(err, lapse.ErrRefused) && lapse.ErrorCode(err) == lapse.EINVALID {
			err = fmt.Errorf("%w: %v", lapse.ErrRefused, err)
		}
	} else {
		err = fmt.Errorf("%w: %v", lapse.ErrRefused, err)
	}
	by := Actor{FiredBy: lapse.FiredByEffect, Name: "engine " + e.node}
	if err != nil {
		if _, ferr := e.Fire(ctx, o.OrderNo, Fire{Event: is.Failed, By: by, Reason: "issuing failed: " + lapse.Reason(err)}); ferr != nil &&
			lapse.ErrorCode(ferr) != lapse.ECONFLICT {
			return errors.Join(err, ferr)
		}
		if d.Final || errors.Is(err, lapse.ErrRefused) {
			why := fmt.Sprintf("issuing failed %d times: %v", d.Failures(), err)
			if _, ferr := e.Fire(ctx, o.OrderNo, Fire{Event: is.GiveUp, By: by, Reason: why}); ferr != nil && lapse.ErrorCode(ferr) != lapse.ECONFLICT {
				return errors.Join(err, ferr)
			}
		}
		return err
	}
	_, err = e.Fire(ctx, o.OrderNo, Fire{Event: is.Issued, By: by, Reason: fmt.Sprintf("%d cards issued", len(specs))})
	if lapse.ErrorCode(err) != lapse.ECONFLICT {
		return err
	}
	// The order moved while the cards were being issued. Issued by another
	// attempt: fine. Anything else (a refund, an operator): take back what
	// this attempt issued.
	now, gerr := e.store.OrderGet(ctx, o.OrderNo)
	if gerr != nil {
		return gerr
	}
	if issuedState(flow, now.State) {
		return nil
	}
	revoked, rerr := h.cards.Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: revokeKey(o), OrderNo: o.OrderNo})
	if rerr == nil {
		e.log.Warn("cards issued while the order moved on were revoked", "order_no", o.OrderNo, "state", now.State, "cards", len(revoked))
	}
	return rerr
}

func revokeKey(o *lapse.Order) string { return "lapse-revoke-" + o.OrderNo }

// issuedState reports whether s is where the flow's Issued event leads.
func issuedState(f *lapse.Flow, s lapse.State) bool {
	for _, t := range f.Transitions {
		if t.Event == f.Issues.Issued && t.To == s {
			return true
		}
	}
	return false
}

// revokedState reports whether an order in s has had its cards revoked: s
// is reached by a transition that emits a Revoke event, or follows one.
func revokedState(f *lapse.Flow, s lapse.State) bool {
	var reached []lapse.State
	for _, t := range f.Transitions {
		for _, ev := range f.Issues.Revoke {
			if slices.Contains(t.Emits, ev) && !slices.Contains(reached, t.To) {
				reached = append(reached, t.To)
			}
		}
	}
	for i := 0; i < len(reached); i++ {
		for _, t := range f.Transitions {
			// Leaving through the compensation's own path (a partial refund
			// handed to an operator) does not re-grant anything.
			if t.From == reached[i] && !slices.Contains(reached, t.To) && t.Event != f.Issues.Retry {
				reached = append(reached, t.To)
			}
		}
	}
	return slices.Contains(reached, s)
}

// revoker revokes every card of an order whose refund started.
type revoker struct {
	e     *Engine
	cards lapse.CardIssuer
}

func (h revoker) Deliver(ctx context.Context, d *lapse.Delivery) error {
	revoked, err := h.cards.Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: "lapse-revoke-" + d.OrderNo, OrderNo: d.OrderNo})
	if err == nil && len(revoked) > 0 {
		h.e.log.Info("cards revoked", "order_no", d.OrderNo, "cards", len(revoked))
	}
	return err
}

// CardLedger is the built-in card issuer: cards and their visits in the
// engine's database.
type CardLedger struct{ e *Engine }

var _ lapse.CardIssuer = CardLedger{}

// NewCardLedger returns the built-in card issuer of e's database, for a
// CardIssuer that wraps it.
func NewCardLedger(e *Engine) CardLedger { return CardLedger{e} }

// Issue records the order's cards, once per order.
func (l CardLedger) Issue(ctx context.Context, r *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	o, err := l.e.store.OrderGet(ctx, r.OrderNo)
	if err != nil {
		return nil, err
	}
	now := l.e.clock.Now()
	cards := make([]*lapse.Card, len(r.Cards))
	for i, c := range r.Cards {
		cards[i] = &lapse.Card{OrderID: o.ID, OrderNo: o.OrderNo, UserID: r.UserID, Product: c.Product, Visits: c.Visits,
			Status: lapse.CardActive, IssuedAt: now}
	}
	got, _, err := l.e.store.CardIssue(ctx, &lapse.CardIssueParams{OrderID: o.ID, Cards: cards})
	return got, err
}

// Revoke voids the order's active cards.
func (l CardLedger) Revoke(ctx context.Context, r *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	o, err := l.e.store.OrderGet(ctx, r.OrderNo)
	if err != nil {
		return nil, err
	}
	return l.e.store.CardRevoke(ctx, o.ID, l.e.clock.Now())
}

// Cards returns the cards of an order of the built-in ledger.
func (e *Engine) Cards(ctx context.Context, orderNo string) ([]*lapse.Card, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	return e.store.CardList(ctx, o.ID)
}

// UseCard counts one visit of a card of the built-in ledger. Errors:
// ENOTFOUND; ECONFLICT when the card is voided or has no visits left.
func (e *Engine) UseCard(ctx context.Context, id int64) (*lapse.Card, error) {
	c, err := e.store.CardUse(ctx, id)
	if errors.Is(err, lapse.ErrStale) {
		cur, gerr := e.store.CardGet(ctx, id)
		if gerr != nil {
			return nil, gerr
		}
		if cur.Status != lapse.CardActive {
			return nil, lapse.Errorf(lapse.ECONFLICT, "card %d is %s", id, cur.Status)
		}
		return nil, lapse.Errorf(lapse.ECONFLICT, "card %d has no visits left (%d of %d used)", id, cur.Used, cur.Visits)
	}
	return c, err
}

// Retry has an operator retry what automation gave up on: a failed group
// buy's settlement, or a membership's compensation from manual review.
// Errors: ECONFLICT when the order is not waiting for a retry; EINVALID for
// an order of a flow with nothing to retry; ENOTFOUND.
func (e *Engine) Retry(ctx context.Context, orderNo, reason string, by Actor) (*lapse.Order, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, err
	}
	ev := flow.Group.Retry
	if ev == "" {
		ev = flow.Issues.Retry
	}
	if ev == "" {
		return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which has nothing to retry", o.OrderNo, flow.Name)
	}
	if reason == "" {
		reason = "retried by an operator"
	}
	moved, err := e.Fire(ctx, orderNo, Fire{Event: ev, Reason: reason, By: by})
	if lapse.ErrorCode(err) == lapse.ECONFLICT {
		return nil, lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which has nothing to retry", o.OrderNo, o.State)
	}
	return moved, err
}
