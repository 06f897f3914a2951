package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// Actor says who asks for a change, for the transition log.
type Actor struct {
	FiredBy lapse.FiredBy // the path: api, app, …
	Name    string        // who: "api", an operator, a service
}

// CreateOrder creates an order in its flow's initial state, with the initial
// state's deadline (the flow's default, or req.TTL, or req.DeadlineAt), a
// creation log row and an order.created event, in one transaction.
//
// It is idempotent on order_no: the same request again returns the existing
// order with created=false; a different request with the same order_no
// returns an error wrapping lapse.ErrOrderExists. Invalid requests return
// EINVALID errors naming the field, and write nothing; so do order numbers
// with lapse.ProbeOrderPrefix, which only the engine's Prober creates, and
// with lapse.ChargeKeyPrefix, which names group members' charges at their
// providers.
func (e *Engine) CreateOrder(ctx context.Context, req *lapse.OrderCreate, by Actor) (o *lapse.Order, created bool, err error) {
	if lapse.IsProbeOrderNo(req.OrderNo) {
		return nil, false, lapse.FieldError("order_no", "%s… is reserved for the orders of Lapse's synthetic probe", lapse.ProbeOrderPrefix)
	}
	if lapse.IsChargeKey(req.OrderNo) {
		return nil, false, lapse.FieldError("order_no", "%s… is reserved for the charges of group buy members, which providers know by it", lapse.ChargeKeyPrefix)
	}
	return e.createOrder(ctx, req, by)
}

// createOrder is CreateOrder for any order number.
func (e *Engine) createOrder(ctx context.Context, req *lapse.OrderCreate, by Actor) (o *lapse.Order, created bool, err error) {
	if err := req.Validate(); err != nil {
		return nil, false, err
	}
	flow := e.flows.get(req.Flow)
	if flow == nil {
		return nil, false, lapse.FieldError("flow", "unknown flow %q (this service runs %s)", req.Flow, strings.Join(e.flows.names, ", "))
	}
	if !flow.Holds {
		// Nothing would reserve the lines or lock the coupon (S4): a
		// coupon named on any number of orders, stock never held.
		switch {
		case len(req.Items) > 0:
			return nil, false, lapse.FieldError("items", "flow %s holds no stock: its orders take no items (lines kept for show go in metadata)", flow.Name)
		case req.Coupon != "":
			return nil, false, lapse.FieldError("coupon", "flow %s holds no coupons: its orders take none", flow.Name)
		}
	}
	for _, ft := range e.feat.all {
		if c, ok := ft.(creationCheck); ok && ft.serves(flow) {
			if err := c.checkCreate(req); err != nil {
				return nil, false, err
			}
		}
	}
	now := e.clock.Now()
	initial := flow.State(flow.Initial)
	var deadline *time.Time
	switch {
	case req.DeadlineAt != nil || req.TTL > 0:
		// Rounded up to the microsecond a store keeps: a deadline is
		// never before the time asked for (nothing closes early, and a
		// payment made before it is in time).
		field, at := "ttl", lapse.Ceil(now.Add(req.TTL))
		if req.DeadlineAt != nil {
			field, at = "deadline_at", lapse.Ceil(*req.DeadlineAt)
		}
		if initial.Deadline == nil {
			return nil, false, lapse.FieldError(field, "flow %s starts in %s, which has no deadline", flow.Name, flow.Initial)
		}
		if err := e.checkDeadline(field, at, now); err != nil {
			// A retry of a request that succeeded before its deadline passed
			// is still the same request: answer it as such.
			if got, gerr := e.store.OrderGet(ctx, req.OrderNo); gerr == nil && req.SameRequest(got.RequestHash) {
				return got, false, nil
			}
			return nil, false, err
		}
		deadline = &at
	case initial.Deadline != nil:
		at := lapse.Ceil(now.Add(initial.Deadline.After))
		deadline = &at
	}
	o = &lapse.Order{
		OrderNo:     req.OrderNo,
		Flow:        flow.Name,
		State:       flow.Initial,
		DeadlineAt:  deadline,
		Amount:      req.Amount,
		Currency:    req.Currency,
		UserID:      req.UserID,
		Items:       req.Items,
		Coupon:      req.Coupon,
		Metadata:    req.Metadata,
		Version:     1,
		CreatedAt:   now,
		UpdatedAt:   now,
		FiredBy:     by.FiredBy,
		RequestHash: req.Fingerprint(),
	}
	if len(o.Metadata) == 0 {
		o.Metadata = nil
	}
	if len(o.Items) == 0 {
		o.Items = nil
	}
	p := &lapse.OrderCreateParams{
		Order: o,
		Log: lapse.TransitionRecord{ToState: flow.Initial, Event: lapse.EventCreate, Version: 1,
			FiredBy: by.FiredBy, Actor: by.Name, Reason: "created", CreatedAt: now},
		Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)},
	}
	e.fanOut(o, p.Outbox)
	holds := e.holdsFor(flow, o)
	got, created, with, err := e.createWith(ctx, p, holds)
	switch {
	case with:
	case len(holds) > 0:
		// The order and what it holds commit together, or neither does.
		err = e.store.Tx(ctx, func(tx lapse.Store) error {
			got, created, err = tx.OrderCreate(ctx, p)
			if err != nil || !created {
				return err
			}
			for _, h := range holds {
				if err := h.hold(ctx, tx, got, now); err != nil {
					return err
				}
			}
			return nil
		})
	default:
		got, created, err = e.store.OrderCreate(ctx, p)
	}
	if err != nil {
		return nil, false, err
	}
	e.delivered(p.Outbox)
	if !created {
		if !req.SameRequest(got.RequestHash) {
			return nil, false, fmt.Errorf("order %s: %w", req.OrderNo, lapse.ErrOrderExists)
		}
		return got, false, nil
	}
	if got.DeadlineAt != nil {
		e.deadlineSet(got.ID, *got.DeadlineAt)
	}
	return got, true, nil
}

// createWith creates p, which holds holds, in one call of the store's
// lapse.OrderCreateWither (auditing.orderCreateWith) when that is all it
// takes: what it holds is its stock at most, which the store reserves with
// it, and it holds stock or is audited (a creation that does neither is
// one OrderCreate, which the store may write together with others
// already). with is false, and nothing was written, when it cannot: then
// the caller writes the creation in a transaction of its own.
func (e *Engine) createWith(ctx context.Context, p *lapse.OrderCreateParams, holds []creationHold) (got *lapse.Order, created, with bool, err error) {
	var reserve []lapse.Item
	switch {
	case len(holds) == 0 && pending(ctx) == nil:
		return nil, false, false, nil
	case len(holds) == 0:
	case len(holds) == 1 && holds[0] == creationHold(e.feat.stock):
		// Lines the ledger refuses are the transaction's to refuse, after
		// it found whether the order exists.
		if reserve, err = lapse.StockLines(p.Order.Items); err != nil {
			return nil, false, false, nil
		}
	default:
		return nil, false, false, nil
	}
	as, ok := e.store.(auditing)
	if !ok {
		return nil, false, false, nil
	}
	got, created, with, err = as.orderCreateWith(ctx, p, reserve)
	return got, created, with, reserveRefusal(err)
}

// holdsFor returns the features that hold something for o, a new order of
// flow.
func (e *Engine) holdsFor(flow *lapse.Flow, o *lapse.Order) []creationHold {
	var out []creationHold
	for _, ft := range e.feat.all {
		if h, ok := ft.(creationHold); ok && ft.serves(flow) && h.holds(o) {
			out = append(out, h)
		}
	}
	return out
}

func (e *Engine) checkDeadline(field string, at, now time.Time) error {
	if !at.After(now) {
		return lapse.FieldError(field, "the deadline %s is not in the future", at.Format(time.RFC3339Nano))
	}
	if at.Sub(now) > e.maxAt {
		return lapse.FieldError(field, "the deadline is more than %s ahead", e.maxAt)
	}
	return nil
}

// Order returns the order with orderNo, or lapse.ErrOrderNotFound.
func (e *Engine) Order(ctx context.Context, orderNo string) (*lapse.Order, error) {
	return e.store.OrderGet(ctx, orderNo)
}

// Orders lists orders, newest first. A filter that no order can match is a
// mistake, not an empty page: EINVALID naming flow when p.Flow is no flow
// of the engine, naming state when p.State is a state of no flow (of
// p.Flow, when it is given).
func (e *Engine) Orders(ctx context.Context, p *lapse.OrderListParams) ([]*lapse.Order, error) {
	if err := e.flows.checkFilter(p.Flow, p.State); err != nil {
		return nil, err
	}
	return e.store.OrderList(ctx, p)
}

// Fire is a request to fire an event at an order.
type Fire struct {
	Event  lapse.Event
	Reason string
	By     Actor
	// External marks a request from outside Lapse (the events API): it may
	// fire only events the flow does not mark Internal, and never the
	// event of an operator's retry (Retry, RetryGroup), which has callers
	// of its own, nor one that ends a group buy while it is open (a
	// CANCEL, which cancels every member's purchase) unless Group is set.
	External bool
	// Group marks an external request sent to a group buy as a whole (the
	// group's own events API, guarded as the mass action it is: see
	// GroupFireStake): it alone may end an open group. An order that is
	// not a group buy is refused.
	Group bool
}

// checkRequest refuses a request that no order could take: no event, or an
// external caller's reason that is not fit to keep.
func (f *Fire) checkRequest() error {
	if f.Event == "" {
		return lapse.FieldError("event", "is required")
	}
	if f.External || f.Group {
		// Lapse's own reasons are made fit to keep (lapse.Reason); a
		// caller's is refused unless it already is.
		return lapse.CheckReason("reason", f.Reason)
	}
	return nil
}

// checkFlow refuses what the caller of f may not fire at o, of flow.
func (f *Fire) checkFlow(flow *lapse.Flow, o *lapse.Order) error {
	external := f.External || f.Group
	if f.Group && flow.Group.Join == "" {
		return lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
	}
	if spec := flow.Event(f.Event); spec != nil && spec.Internal && external {
		return lapse.FieldError("event", "%s is fired by Lapse itself in flow %s and cannot be sent through this API", f.Event, flow.Name)
	}
	// A flow may leave the events of Lapse's features unmarked Internal;
	// an external caller of Fire (orders:write) firing one would mark an
	// order paid with no payment, or retry a group, which charges its
	// members.
	if external && flow.Group.Abandon != "" && f.Event == flow.Group.Abandon {
		return lapse.FieldError("event", "%s abandons a failed group in flow %s, refunding its members, and cannot be sent through this API: abandon the group (POST /v1/groups/{group_id}/abandon)", f.Event, flow.Name)
	}
	if external && (f.Event == flow.Group.Retry || f.Event == flow.Issues.Retry) {
		return lapse.FieldError("event", "%s is an operator's retry in flow %s and cannot be sent through this API: retry the order instead", f.Event, flow.Name)
	}
	if external && flow.FeatureEvent(f.Event) {
		return lapse.FieldError("event", "%s is fired by Lapse itself in flow %s (a payment, a refund, a group buy's or issuing's step) and cannot be sent through this API", f.Event, flow.Name)
	}
	if f.External && !f.Group && endsOpenGroup(flow, o.State, f.Event) {
		return lapse.FieldError("event", "%s ends the open group buy %s, which cancels every member's purchase: send it to the group (POST /v1/groups/{group_id}/events), which is guarded as the mass action it is", f.Event, o.OrderNo)
	}
	return nil
}

// endsOpenGroup reports whether ev, fired at an order of flow f in state
// st, takes a group buy out of the state its members join in: it ends the
// group early for every member at once.
func endsOpenGroup(f *lapse.Flow, st lapse.State, ev lapse.Event) bool {
	join := f.Group.Join
	if join == "" || ev == join || f.Transition(st, join) == nil {
		return false
	}
	t := f.Transition(st, ev)
	return t != nil && f.Transition(t.To, join) == nil
}

// GroupFireStake is what firing f at the group buy groupID as the group
// (f.Group) puts at stake, in orders: its members, each a purchase that
// ends with the group, when f's event ends the group while it is open;
// else 0. It changes nothing. Errors: those Fire would return for f before
// it changes anything (lapse.ErrOrderNotFound; EINVALID for an order that
// is not a group buy, an unknown or internal event, a bad reason;
// ECONFLICT when the group's state does not take the event).
func (e *Engine) GroupFireStake(ctx context.Context, groupID string, f Fire) (int64, error) {
	f.External, f.Group = true, true
	if err := f.checkRequest(); err != nil {
		return 0, err
	}
	o, err := e.store.OrderGet(ctx, groupID)
	if err != nil {
		return 0, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return 0, err
	}
	if err := f.checkFlow(flow, o); err != nil {
		return 0, err
	}
	if _, err := flow.Plan(o, lapse.Firing{Event: f.Event, Now: e.clock.Now(), FiredBy: f.By.FiredBy, Actor: f.By.Name, Reason: f.Reason}); err != nil {
		return 0, err
	}
	if !endsOpenGroup(flow, o.State, f.Event) {
		return 0, nil
	}
	ms, err := e.store.GroupMemberList(ctx, o.ID)
	return int64(len(ms)), err
}

// FireStake is what firing f at the order orderNo from outside (the events
// API: f.External) puts at stake, in orders: 1 when f's event ends the
// order, taking it to a terminal state (a CANCEL of an unpaid order), as a
// manual close of it does; else 0. It changes nothing. Errors: those Fire
// would return for f before it changes anything (lapse.ErrOrderNotFound;
// EINVALID for an unknown or internal event, a bad reason, an event that
// ends an open group buy; ECONFLICT when the order's state does not take
// the event).
func (e *Engine) FireStake(ctx context.Context, orderNo string, f Fire) (int64, error) {
	f.External, f.Group = true, false
	if err := f.checkRequest(); err != nil {
		return 0, err
	}
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return 0, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return 0, err
	}
	if err := f.checkFlow(flow, o); err != nil {
		return 0, err
	}
	p, err := flow.Plan(o, lapse.Firing{Event: f.Event, Now: e.clock.Now(), FiredBy: f.By.FiredBy, Actor: f.By.Name, Reason: f.Reason})
	if err != nil {
		return 0, err
	}
	if p.ClosedAt != nil { // the plan of a move to a terminal state
		return 1, nil
	}
	return 0, nil
}

// Fire fires an event at the order with orderNo through its flow and returns
// the order as it is afterwards. Errors: lapse.ErrOrderNotFound; EINVALID
// when the flow has no such event or an external caller fires an internal
// one or a retry's, or one that ends an open group buy without Group, or
// Group is set for an order that is not a group buy; ECONFLICT when the order's state does not accept the
// event or a guard refuses it. If the order moves concurrently, Fire reads
// it again and re-plans, so a CANCEL racing a deadline change still
// applies, while a PAY racing a TIMEOUT finds the order CLOSED and fails.
func (e *Engine) Fire(ctx context.Context, orderNo string, f Fire) (*lapse.Order, error) {
	return e.fire(ctx, orderNo, f, nil)
}

// fire is Fire that, when with is set, runs with in the transaction of the
// transition, after it, given the transition it wrote.
func (e *Engine) fire(ctx context.Context, orderNo string, f Fire, with func(tx lapse.Store, p *lapse.OrderTransitionParams) error) (*lapse.Order, error) {
	if err := f.checkRequest(); err != nil {
		return nil, err
	}
	return changeOrder(ctx, e, orderChange{orderNo: orderNo}, func(s lapse.Store, o *lapse.Order, flow *lapse.Flow) (*lapse.Order, error) {
		if err := f.checkFlow(flow, o); err != nil {
			return nil, err
		}
		p, err := flow.Plan(o, lapse.Firing{Event: f.Event, Now: e.clock.Now(), FiredBy: f.By.FiredBy, Actor: f.By.Name, Reason: f.Reason})
		if err != nil {
			return nil, err
		}
		var moved *lapse.Order
		if with == nil {
			moved, err = e.transition(ctx, s, o, p)
		} else {
			err = s.Tx(ctx, func(tx lapse.Store) error {
				var err error
				if moved, err = e.transition(ctx, tx, o, p); err != nil {
					return err
				}
				return with(tx, p)
			})
		}
		if err != nil {
			return nil, err
		}
		e.committed(moved.Flow, p)
		if moved.DeadlineAt != nil {
			e.deadlineSet(moved.ID, *moved.DeadlineAt)
		}
		return moved, nil
	})
}

// DeadlineChange moves the deadline of an order's current state: to At, or
// later by ExtendBy. Exactly one of them is set.
type DeadlineChange struct {
	At       *time.Time
	ExtendBy time.Duration
	Reason   string
	By       Actor
	// External is a change asked from outside (the API's order route):
	// it may not bring an open group buy's deadline earlier, which settles
	// the group early for every member (ErrDeadlineIsGroup), unless Group
	// is set too.
	External bool
	// Group is a change asked of a group buy as the group (the API's
	// group route, guarded as the mass action it is): it may bring an
	// open group's deadline earlier, and is refused (ErrDeadlineNotGroup)
	// for an order that is not a group buy.
	Group bool
	// Key makes the change idempotent: the same key again on the order
	// changes nothing and returns the order as it stands, however its
	// deadline moved since; the key with another change is refused
	// (ECONFLICT). The key is kept in the order.deadline_changed event of
	// the change it made, and found there as long as that event is kept
	// (the outbox's retention). Default: none (each call is a change).
	Key string
}

// Sentinels of a deadline change asked through the wrong door, nothing
// changed. Errors that refine them name the order.
var (
	// ErrDeadlineIsGroup: an external change that is not Group would
	// bring an open group buy's deadline earlier. EFORBIDDEN: the caller
	// of the order's route may not settle a group early for every member.
	ErrDeadlineIsGroup = &lapse.Error{Code: lapse.EFORBIDDEN, Message: "bringing an open group buy's deadline earlier settles it early for every member; change it as the group"}
	// ErrDeadlineNotGroup: a Group change of an order that is not a group
	// buy.
	ErrDeadlineNotGroup = &lapse.Error{Code: lapse.EINVALID, Message: "the order is not a group buy"}
	// ErrDeadlineKeyUsed: a change's Key made another change of the
	// order's deadline. ECONFLICT.
	ErrDeadlineKeyUsed = &lapse.Error{Code: lapse.ECONFLICT, Message: "the idempotency key moved the deadline with another request"}
)

// SetDeadline changes the deadline of the order's current state and emits an
// order.deadline_changed event. The new deadline must be in the future. For
// an order whose customer started paying, the window ends at its PayBy: an
// extension moves PayBy later by ExtendBy, and a new deadline At gets the
// flow's grace added, which is also its PayBy.
//
// A deadline that has passed cannot be moved (S2): neither the order's
// deadline nor, once its customer started paying, its PayBy. Whether it has
// passed is decided inside the transaction that moves it, with the order's
// row locked and the time read after the lock, so that the claimer firing the
// old deadline and a payment judged against it see either the old deadline
// or a new one set before the old one passed, never one set after it.
// A change to the deadline as it stands changes nothing and returns the
// order as it is, with moved false. Errors: ECONFLICT when the deadline has passed, the
// order's state has no deadline, or the order moved meanwhile; EINVALID for
// a bad change; ENOTFOUND; ErrDeadlineIsGroup (refined) for an external
// change that would bring an open group buy's deadline earlier, and
// ErrDeadlineNotGroup (refined) for a Group change of another order.
//
// A change with a Key that made a change of the order already changes
// nothing and returns the order as it stands, with moved false, before
// any of the checks above (a retry after the deadline it moved has passed
// is answered so too); ErrDeadlineKeyUsed (refined, ECONFLICT) when the
// key made another change (another extend_by or deadline_at, or another
// reason).
//
// Shortening a deadline does not change what a payment already made is
// judged by: every payment is judged at its provider time against the
// deadline then in force, and since a deadline can only be changed before it
// passes and only to a time still ahead, that is the order's deadline as it
// stands (a payment made before the change was made before the new deadline
// too). The order still closes at the shortened deadline: a payment whose
// callback arrives after that finds the order closed and is refunded.
func (e *Engine) SetDeadline(ctx context.Context, orderNo string, c DeadlineChange) (_ *lapse.Order, moved bool, _ error) {
	if err := c.check(); err != nil {
		return nil, false, err
	}
	var got *lapse.Order
	var evs []lapse.OutboxEvent
	err := e.store.Tx(ctx, func(tx lapse.Store) error {
		evs = nil // of this run: a store's Tx may run fn again
		o, err := tx.OrderLock(ctx, orderNo)
		if err != nil {
			return err
		}
		flow, err := e.flows.of(o)
		if err != nil {
			return err
		}
		if err := c.checkGroup(flow, o); err != nil {
			return err
		}
		if c.Key != "" {
			// Before anything else is judged: a retry after the
			// deadline it moved has passed finds its change all the same.
			done, err := c.madeIn(ctx, tx, o)
			if err != nil || done {
				got = o
				return err
			}
		}
		now := e.clock.Now() // after the lock: nothing moves the order until this commits
		read := o
		o = flow.InWindow(o) // a PayBy is the window of the state that took payments only
		at, was, err := e.deadlineMove(o, flow, c, now)
		if err != nil {
			return err
		}
		if err := c.checkEarlier(flow, o, at, was); err != nil {
			return err
		}
		if at.Equal(was) {
			// deadline_at as it stands (a retry, say): nothing to change,
			// and no event of a move that did not happen.
			got = read
			return nil
		}
		var payBy *time.Time
		if o.PayBy != nil {
			payBy = &at
		}
		after := *o
		after.DeadlineAt, after.Version, after.UpdatedAt = &at, o.Version+1, now
		if payBy != nil {
			after.PayBy = payBy
		}
		evs = []lapse.OutboxEvent{lapse.NewDeadlineChangedEvent(&after, c.move(o.DeadlineAt, &at))}
		e.fanOut(o, evs)
		got, err = tx.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{
			OrderID: o.ID, FromState: o.State, FromVersion: o.Version, DeadlineAt: at, At: now, Outbox: evs, PayBy: payBy,
		})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if evs == nil {
		return got, false, nil
	}
	e.deadlineSet(got.ID, *got.DeadlineAt)
	e.delivered(evs)
	return got, true, nil
}

// move is the order.deadline_changed event's account of c, which moves the
// deadline from prev to next.
func (c DeadlineChange) move(prev, next *time.Time) lapse.DeadlineMove {
	m := lapse.DeadlineMove{Previous: prev, Next: next, FiredBy: c.By.FiredBy, Actor: c.By.Name, Reason: c.Reason, Key: c.Key}
	if c.Key != "" {
		if c.At != nil {
			at := lapse.Ceil(*c.At) // as it is kept
			m.DeadlineAt = &at
		} else {
			m.ExtendBy = c.ExtendBy.String()
		}
	}
	return m
}

// madeIn reports whether the change under c.Key was made already on o,
// read through s with o locked: true when o's events hold the change that
// key made, and ErrDeadlineKeyUsed (refined) when the key made another.
func (c DeadlineChange) madeIn(ctx context.Context, s lapse.Store, o *lapse.Order) (bool, error) {
	evs, err := s.OutboxList(ctx, o.ID)
	if err != nil {
		return false, err
	}
	want := c.move(nil, nil)
	for _, ev := range evs {
		if ev.Type != lapse.EventOrderDeadlineChanged {
			continue
		}
		var p struct {
			Deadline *lapse.DeadlineMove `json:"deadline"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return false, fmt.Errorf("engine: event %s of order %s: %w", ev.ID, o.OrderNo, err)
		}
		m := p.Deadline
		if m == nil || m.Key != c.Key {
			continue
		}
		if m.ExtendBy != want.ExtendBy || !equalTimes(m.DeadlineAt, want.DeadlineAt) || m.Reason != want.Reason {
			return false, lapse.Refine(ErrDeadlineKeyUsed, "Idempotency-Key %s moved the deadline of order %s with another request (%s); use a key of its own for each change",
				c.Key, o.OrderNo, askedFor(m))
		}
		return true, nil
	}
	return false, nil
}

// askedFor says what the change m records was asked for.
func askedFor(m *lapse.DeadlineMove) string {
	what := "extend_by " + m.ExtendBy
	if m.DeadlineAt != nil {
		what = "deadline_at " + m.DeadlineAt.UTC().Format(time.RFC3339Nano)
	}
	if m.Reason != "" {
		what += ", with a reason"
	}
	return what
}

func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// check refuses a change that is not one: neither or both of At and
// ExtendBy, a negative ExtendBy, a bad reason or key.
func (c DeadlineChange) check() error {
	if err := checkIdempotencyKey(c.Key); err != nil {
		return err
	}
	switch {
	case c.At == nil && c.ExtendBy == 0:
		return lapse.FieldError("deadline_at", "send deadline_at or extend_by")
	case c.At != nil && c.ExtendBy != 0:
		return lapse.FieldError("deadline_at", "and extend_by exclude each other; send one")
	case c.ExtendBy < 0:
		return lapse.FieldError("extend_by", "must be positive; send deadline_at to shorten a deadline")
	case c.ExtendBy > 0 && c.ExtendBy < time.Microsecond:
		return lapse.FieldError("extend_by", "must be at least 1µs, the precision a deadline is kept to")
	}
	return lapse.CheckReason("reason", c.Reason)
}

// checkGroup refuses a Group change of an order that is not a group buy.
func (c DeadlineChange) checkGroup(flow *lapse.Flow, o *lapse.Order) error {
	if c.Group && flow.Group.Join == "" {
		return lapse.Refine(ErrDeadlineNotGroup, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
	}
	return nil
}

// checkEarlier refuses an external change that is not Group when it brings
// the deadline of o, an open group buy of flow, from was to the earlier at:
// its deadline settles it for every member, as a cancel of the group ends
// it for every member, and both are the group's (a mass action). A move
// later only keeps the group open longer, and the order's route may make it.
func (c DeadlineChange) checkEarlier(flow *lapse.Flow, o *lapse.Order, at, was time.Time) error {
	if c.External && !c.Group && openGroup(flow, o) && at.Before(was) {
		return lapse.Refine(ErrDeadlineIsGroup, "bringing the deadline of the open group buy %s earlier settles it early for every member; change it as the group",
			o.OrderNo)
	}
	return nil
}

// openGroup reports whether o, of flow, is a group buy open to members.
func openGroup(flow *lapse.Flow, o *lapse.Order) bool {
	join := flow.Group.Join
	return join != "" && flow.Transition(o.State, join) != nil
}

// deadlineMove returns where c moves the window of o, of flow, at now: its
// new end (the deadline, or the PayBy of a customer who started paying, as
// SetDeadline keeps it) and its end before, or SetDeadline's error for a
// change it refuses.
func (e *Engine) deadlineMove(o *lapse.Order, flow *lapse.Flow, c DeadlineChange, now time.Time) (at, was time.Time, err error) {
	if spec := flow.State(o.State); spec == nil || spec.Deadline == nil || o.DeadlineAt == nil {
		return at, was, lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which has no deadline to change", o.OrderNo, o.State)
	}
	if err := deadlinePassed(o, now); err != nil {
		return at, was, err
	}
	was = *o.DeadlineAt
	if o.PayBy != nil {
		was = *o.PayBy
	}
	// Rounded up, as CreateOrder rounds a deadline: never before the
	// time asked for.
	field, at := "extend_by", lapse.Ceil(was.Add(c.ExtendBy))
	if c.At != nil {
		field, at = "deadline_at", lapse.Ceil(*c.At)
		if o.PayBy != nil {
			// The time asked for must be ahead itself: with the grace
			// added it can be ahead when it is not, and a time already
			// past would be taken as a deadline.
			if !at.After(now) {
				return at, was, lapse.FieldError(field, "the deadline %s is not in the future", at.Format(time.RFC3339Nano))
			}
			at = lapse.Ceil(at.Add(flow.Grace)) // the customer started paying: the new window keeps its grace
		}
	}
	return at, was, e.checkDeadline(field, at, now)
}

// DeadlineStake is what the change c of the deadline of the order orderNo
// puts at stake, in orders: when c brings the deadline earlier, its timer
// acts sooner, as a manual close of the order does, so 1; for a group buy
// open to members, whose deadline settles it for every member, each
// member's purchase, as GroupFireStake counts the group's cancel; 0 when c
// does not bring it earlier. It changes nothing. Errors: those SetDeadline
// would return before it changes anything (lapse.ErrOrderNotFound;
// EINVALID for a bad change; ECONFLICT for a state without a deadline or a
// deadline that has passed).
func (e *Engine) DeadlineStake(ctx context.Context, orderNo string, c DeadlineChange) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return 0, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return 0, err
	}
	if err := c.checkGroup(flow, o); err != nil {
		return 0, err
	}
	if c.Key != "" {
		if done, err := c.madeIn(ctx, e.store, o); err != nil || done {
			return 0, err // a change made already puts nothing more at stake
		}
	}
	o = flow.InWindow(o)
	at, was, err := e.deadlineMove(o, flow, c, e.clock.Now()) // as SetDeadline judges it
	if err == nil {
		err = c.checkEarlier(flow, o, at, was)
	}
	switch {
	case err != nil:
		return 0, err
	case !at.Before(was):
		return 0, nil
	}
	if openGroup(flow, o) {
		ms, err := e.store.GroupMemberList(ctx, o.ID)
		return int64(len(ms)), err
	}
	return 1, nil
}

// deadlinePassed refuses a change to the deadline of o at now once the
// deadline, or the PayBy of a customer who started paying, has passed.
func deadlinePassed(o *lapse.Order, now time.Time) error {
	if o.PayBy != nil && !now.Before(*o.PayBy) {
		return lapse.Errorf(lapse.ECONFLICT, "order %s: its payment window closed at %s; a deadline that has passed cannot be moved",
			o.OrderNo, o.PayBy.Format(time.RFC3339Nano))
	}
	if !now.Before(*o.DeadlineAt) {
		return lapse.Errorf(lapse.ECONFLICT, "order %s: its deadline passed at %s; a deadline that has passed cannot be moved",
			o.OrderNo, o.DeadlineAt.Format(time.RFC3339Nano))
	}
	return nil
}

// Transitions returns the transition log of the order with orderNo.
func (e *Engine) Transitions(ctx context.Context, orderNo string) ([]*lapse.TransitionRecord, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	return e.store.TransitionList(ctx, o.ID)
}

// Events returns the outbox events of the order with orderNo.
func (e *Engine) Events(ctx context.Context, orderNo string) ([]*lapse.OutboxEvent, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	return e.store.OutboxList(ctx, o.ID)
}
