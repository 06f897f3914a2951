package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// SettleSubscriber names the built-in subscription that charges the members
// of closed group buys.
const SettleSubscriber = "settle"

// DefaultGroupRetries is seed 000's schedule for a group whose charges fail:
// retried after 1 s, 2 s, 4 s, 8 s and 16 s, then failed.
var DefaultGroupRetries = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// groupCharges bounds the charges of one group in flight at once.
const groupCharges = 8

// JoinRequest asks for a member to join an open group buy.
type JoinRequest struct {
	UserID string
	// Provider is the payment provider that charges the member. Default:
	// the only provider configured.
	Provider string
	// Method is what the provider charges: a stored card's token, a wallet.
	Method string
	By     Actor
}

// JoinGroup adds a member to an open group buy: the member's row and the
// group's JOIN transition (which keeps the group open, its deadline
// unchanged) commit together, so a join and the deadline never both win:
// a member either joined before the group closed, and is charged, or is
// refused. The same user joining again with the same method changes nothing
// and returns the member with created=false.
//
// Errors, with nothing written: EINVALID for a missing user or method, an
// unknown provider, or an order that is not a group buy; ECONFLICT when the
// group no longer takes members, or the user joined with another method;
// ENOTFOUND.
func (e *Engine) JoinGroup(ctx context.Context, groupID string, req JoinRequest) (m *lapse.GroupMember, created bool, err error) {
	switch {
	case req.UserID == "":
		return nil, false, lapse.FieldError("user_id", "is required")
	case len(req.UserID) > 128:
		return nil, false, lapse.FieldError("user_id", "must be at most 128 bytes")
	case req.Method == "":
		return nil, false, lapse.FieldError("method", "is required: the payment method the provider charges")
	case len(req.Method) > 256:
		return nil, false, lapse.FieldError("method", "must be at most 256 bytes")
	}
	provider, err := e.chargeProvider(req.Provider)
	if err != nil {
		return nil, false, err
	}
	// Joins of one group contend for its version: each round reads the
	// group and its members and writes in one transaction.
	var p *lapse.OrderTransitionParams
	var flow *lapse.Flow
	c := orderChange{orderNo: groupID, stale: "group " + groupID, contended: true}
	m, err = changeOrder(ctx, e, c, func(tx lapse.Store, o *lapse.Order, f *lapse.Flow) (*lapse.GroupMember, error) {
		flow, p, created = f, nil, false
		if flow.Group.Join == "" {
			return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
		}
		want := &lapse.GroupMember{OrderID: o.ID, GroupID: o.OrderNo, UserID: req.UserID, Provider: provider, Method: req.Method,
			Amount: o.Amount, Currency: o.Currency, Key: chargeKey(o.OrderNo, req.UserID), Status: lapse.ChargePending}
		members, err := tx.GroupMemberList(ctx, o.ID)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(members, func(x *lapse.GroupMember) bool { return x.UserID == req.UserID }); i >= 0 {
			if m := members[i]; m.Method != req.Method || m.Provider != provider {
				return nil, lapse.Errorf(lapse.ECONFLICT, "user %s joined group %s with another payment method", req.UserID, o.OrderNo)
			}
			return members[i], nil
		}
		now := e.clock.Now()
		p, err = flow.Plan(o, lapse.Firing{Event: flow.Group.Join, Now: now, FiredBy: req.By.FiredBy, Actor: req.By.Name,
			Reason: "member " + req.UserID + " joined"})
		if lapse.ErrorCode(err) == lapse.ECONFLICT {
			return nil, lapse.Errorf(lapse.ECONFLICT, "group %s is %s and takes no more members", o.OrderNo, o.State)
		}
		if err != nil {
			return nil, err
		}
		want.JoinedAt, want.UpdatedAt = now, now
		m, added, err := tx.GroupMemberAdd(ctx, want)
		if created = added; err != nil || !added {
			return m, err
		}
		_, err = e.transition(ctx, tx, o, p)
		return m, err
	})
	if err != nil {
		return nil, false, err
	}
	if created {
		e.committed(flow.Name, p)
	}
	return m, created, nil
}

// chargeKey is a member's charge idempotency key: the same group and user
// always make the same key, so a charge sent twice is one charge.
func chargeKey(groupID, userID string) string {
	sum := sha256.Sum256([]byte(groupID + "\x00" + userID))
	return "lapse-charge-" + hex.EncodeToString(sum[:12])
}

// chargeProvider names the provider that charges a member.
func (e *Engine) chargeProvider(name string) (string, error) {
	if name == "" {
		if len(e.payments.providers) != 1 {
			return "", lapse.FieldError("provider", "is required: %d payment providers are configured", len(e.payments.providers))
		}
		for n := range e.payments.providers {
			name = n
		}
	}
	if e.payments.providers[name] == nil {
		return "", lapse.FieldError("provider", "no payment provider port %q is configured", name)
	}
	return name, nil
}

// Group is a group buy as it stands: its order and its members with their
// charges.
type Group struct {
	Order   *lapse.Order
	Members []*lapse.GroupMember
}

// Group returns the group buy groupID with its members. Errors: ENOTFOUND;
// EINVALID when the order is not a group buy.
func (e *Engine) Group(ctx context.Context, groupID string) (*Group, error) {
	o, err := e.store.OrderGet(ctx, groupID)
	if err != nil {
		return nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, err
	}
	if flow.Group.Join == "" {
		return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
	}
	ms, err := e.store.GroupMemberList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	return &Group{Order: o, Members: ms}, nil
}

// settleSubscriptions returns the subscription that charges the members of
// closed groups, when some flow is a group buy and some provider port is
// configured.
func settleSubscriptions(flows []*lapse.Flow, e *Engine, retries []time.Duration) []Subscription {
	var names, events []string
	for _, f := range flows {
		if f.Group.Join == "" {
			continue
		}
		names = append(names, f.Name)
		if !slices.Contains(events, f.Group.Charge) {
			events = append(events, f.Group.Charge)
		}
	}
	if len(names) == 0 || len(e.payments.providers) == 0 {
		return nil
	}
	if len(retries) == 0 {
		retries = DefaultGroupRetries
	}
	return []Subscription{{
		Name:    SettleSubscriber,
		Events:  events,
		Flows:   names,
		Handler: settler{e},
		// Seed 000's schedule, as it stands: no jitter.
		Schedule:    lapse.Schedule{Steps: slices.Clone(retries)},
		Concurrency: 4,
	}}
}

// settler charges every member of a closed group, then settles it; when
// charges still fail on the last attempt of its schedule, it fails the
// group. Each round reads the group and its members again, so a settlement
// interrupted anywhere (a crash, a lost lease) resumes where it stopped:
// members charged are never charged again, and a member whose charge was
// under way is asked about at the provider before it is charged.
type settler struct{ e *Engine }

func (s settler) Deliver(ctx context.Context, d *lapse.Delivery) error {
	e := s.e
	g, err := e.Group(ctx, d.OrderNo)
	if err != nil {
		return err
	}
	flow := e.flows.get(g.Order.Flow)
	if flow.Transition(g.Order.State, flow.Group.Settled) == nil {
		return nil // settled, failed or retried meanwhile: this round has nothing to do
	}
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
		slots  = make(chan struct{}, groupCharges)
	)
	for _, m := range g.Members {
		if m.Status == lapse.ChargeCharged {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := s.charge(ctx, m); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", m.UserID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	by := Actor{FiredBy: lapse.FiredByEffect, Name: "engine " + e.node}
	if len(failed) == 0 {
		_, err := e.Fire(ctx, g.Order.OrderNo, Fire{Event: flow.Group.Settled, By: by,
			Reason: fmt.Sprintf("all %d members charged", len(g.Members))})
		if lapse.ErrorCode(err) == lapse.ECONFLICT {
			return nil // another round settled it first
		}
		return err
	}
	slices.Sort(failed)
	why := fmt.Sprintf("%d of %d charges failed: %s", len(failed), len(g.Members), failed[0])
	if len(failed) > 1 {
		why += fmt.Sprintf(" (and %d more)", len(failed)-1)
	}
	if d.Final {
		_, err := e.Fire(ctx, g.Order.OrderNo, Fire{Event: flow.Group.Failed, By: by, Reason: why + "; retries exhausted"})
		if err != nil && lapse.ErrorCode(err) != lapse.ECONFLICT {
			return err
		}
		e.log.Error("group buy failed: charges failed through the whole retry schedule", "group", g.Order.OrderNo, "err", why)
		// Failing is this settlement's end, not an error: an operator's
		// RETRY starts another.
		return nil
	}
	return errors.New(why)
}

// charge charges one member at most once: the member is claimed (pending or
// failed → charging, one more attempt) before the provider is called, and a
// member found charging (a call whose answer was lost, or a worker that
// died) is asked about first.
func (s settler) charge(ctx context.Context, m *lapse.GroupMember) error {
	e := s.e
	prov := e.payments.providers[m.Provider]
	if prov == nil {
		return fmt.Errorf("no payment provider port %q is configured", m.Provider)
	}
	update := func(from, to lapse.ChargeStatus, attempt bool, txn, why string) error {
		p := &lapse.GroupMemberUpdateParams{ID: m.ID, From: from, To: to, Attempt: attempt, TxnID: txn, Error: why, At: e.clock.Now()}
		if to == lapse.ChargeCharged {
			p.ChargedAt = &p.At
		}
		got, err := e.store.GroupMemberUpdate(ctx, p)
		if err == nil {
			*m = *got
		}
		return err
	}
	if m.Status == lapse.ChargeCharging {
		pay, err := prov.Query(ctx, m.Key)
		switch {
		case err == nil && pay.Status == lapse.ProviderPaid:
			if pay.Amount != m.Amount || pay.Currency != m.Currency {
				return update(lapse.ChargeCharging, lapse.ChargeFailed, false, pay.TxnID,
					fmt.Sprintf("the provider charged %d %s, not %d %s: an operator must look", pay.Amount, pay.Currency, m.Amount, m.Currency))
			}
			return update(lapse.ChargeCharging, lapse.ChargeCharged, false, pay.TxnID, "")
		case err != nil && !errors.Is(err, lapse.ErrProviderNotFound):
			return fmt.Errorf("asking %s about the charge under way: %w", m.Provider, err)
		}
		// Not made: charge under the same key, which is safe to send again.
	} else if err := update(m.Status, lapse.ChargeCharging, true, "", ""); err != nil {
		if errors.Is(err, lapse.ErrStale) {
			return fmt.Errorf("another worker has the charge")
		}
		return err
	}
	pay, err := prov.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: m.Key, OrderNo: m.Key, Amount: m.Amount,
		Currency: m.Currency, Method: m.Method})
	switch {
	case err == nil && pay.Status == lapse.ProviderPaid:
		return update(lapse.ChargeCharging, lapse.ChargeCharged, false, pay.TxnID, "")
	case err == nil:
		return fmt.Errorf("the provider answered the charge with status %s", pay.Status)
	case errors.Is(err, lapse.ErrUnknownOutcome):
		// Left charging: the next round asks before charging again.
		return err
	}
	if uerr := update(lapse.ChargeCharging, lapse.ChargeFailed, false, "", lapse.Reason(err)); uerr != nil {
		return uerr
	}
	return err
}
