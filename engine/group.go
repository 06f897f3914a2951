package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// groupBuys is the group buy feature (seed 000): it serves the flows whose
// orders are group buys (lapse.Flow.Group). Members join an open group
// (JoinGroup) and, once it closes, its subscription SettleSubscriber charges
// each of them through the provider port they joined with and settles the
// group, or fails it after its retry schedule, Config.GroupRetries
// (group_settle.go). Without a provider port no member can join, and
// nothing is charged.
type groupBuys struct {
	e         *Engine
	providers map[string]lapse.PaymentProvider // Config.Payments.Providers
	retries   []time.Duration

	saltMu sync.Mutex
	salt   string // the database's charge key salt, once read (chargeSalt)
}

func newGroupBuys(e *Engine, cfg Config) *groupBuys {
	retries := cfg.GroupRetries
	if len(retries) == 0 {
		retries = DefaultGroupRetries
	}
	return &groupBuys{e: e, providers: cfg.Payments.Providers, retries: retries}
}

func (gb *groupBuys) serves(f *lapse.Flow) bool { return f.Group.Join != "" }

// subscriptions returns the subscription that charges the members of
// closed groups, when some provider port is configured, and the one that
// refunds the members of abandoned groups (refundSubscriptions).
func (gb *groupBuys) subscriptions(flows []*lapse.Flow) []Subscription {
	refunds := gb.refundSubscriptions(flows)
	if len(gb.providers) == 0 {
		return refunds
	}
	var events []string
	for _, f := range flows {
		addNew(&events, f.Group.Charge)
	}
	return append([]Subscription{{
		Name:    SettleSubscriber,
		Events:  events,
		Flows:   flowNames(flows),
		Handler: settler{gb},
		// Seed 000's schedule, as it stands: no jitter.
		Schedule:    lapse.Schedule{Steps: slices.Clone(gb.retries)},
		Concurrency: 4,
	}}, refunds...)
}

// checkCreate refuses a group buy without a price (each member pays it),
// or with a minimum size GroupMinMembers refuses.
func (gb *groupBuys) checkCreate(req *lapse.OrderCreate) error {
	if req.Amount <= 0 {
		return lapse.FieldError("amount", "a group buy's price, which each member pays, must be positive")
	}
	_, err := GroupMinMembers(&lapse.Order{Metadata: req.Metadata})
	return err
}

// DefaultGroupMinMembers is the fewest members a group buy needs when its
// metadata names no min_members: a group that no one joined fails.
const DefaultGroupMinMembers = 1

// maxGroupMinMembers bounds a group's min_members.
const maxGroupMinMembers = 1_000_000

// GroupMinMembers returns the fewest members group o needs to be charged
// and settled: its metadata's "min_members" ({"min_members": 3}), or else
// DefaultGroupMinMembers. A group that closes with fewer fails at once,
// no one charged. An error is EINVALID and names the field.
func GroupMinMembers(o *lapse.Order) (int, error) {
	var md struct {
		MinMembers json.RawMessage `json:"min_members"`
	}
	if len(o.Metadata) > 0 {
		if err := readMetadata(o.Metadata, &md, false); err != nil {
			return 0, err
		}
	}
	if len(md.MinMembers) == 0 || string(md.MinMembers) == "null" {
		return DefaultGroupMinMembers, nil
	}
	var n int
	if err := json.Unmarshal(md.MinMembers, &n); err != nil || n < 1 || n > maxGroupMinMembers {
		return 0, lapse.FieldError("metadata.min_members", "must be a whole number of members from 1 to %d", maxGroupMinMembers)
	}
	return n, nil
}

// retryEvent is the event with which an operator settles a failed group
// again.
func (gb *groupBuys) retryEvent(f *lapse.Flow) lapse.Event { return f.Group.Retry }

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
// and returns the member with created=false. The member is returned with
// its method masked (lapse.MaskMethod), as Group returns them: the engine
// alone charges with it.
//
// Errors, with nothing written: EINVALID for a missing user or method, an
// unknown provider, or an order that is not a group buy; ECONFLICT when the
// group no longer takes members, or the user joined with another method;
// ENOTFOUND.
func (e *Engine) JoinGroup(ctx context.Context, groupID string, req JoinRequest) (m *lapse.GroupMember, created bool, err error) {
	if m, created, err = e.feat.groups.join(ctx, groupID, req); err != nil {
		return nil, false, err
	}
	return m.Masked(), created, nil
}

func (gb *groupBuys) join(ctx context.Context, groupID string, req JoinRequest) (m *lapse.GroupMember, created bool, err error) {
	e := gb.e
	switch {
	case req.UserID == "":
		return nil, false, lapse.FieldError("user_id", "is required")
	case req.Method == "":
		return nil, false, lapse.FieldError("method", "is required: the payment method the provider charges")
	}
	if err := lapse.CheckText("user_id", req.UserID, lapse.MaxUserIDLen); err != nil {
		return nil, false, err
	}
	if err := lapse.CheckText("method", req.Method, 256); err != nil {
		return nil, false, err
	}
	provider, err := gb.chargeProvider(req.Provider)
	if err != nil {
		return nil, false, err
	}
	salt, err := gb.chargeSalt(ctx)
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
		if !gb.serves(flow) {
			return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
		}
		want := &lapse.GroupMember{OrderID: o.ID, GroupID: o.OrderNo, UserID: req.UserID, Provider: provider, Method: req.Method,
			Amount: o.Amount, Currency: o.Currency, Key: chargeKey(salt, o.OrderNo, req.UserID), Status: lapse.ChargePending}
		// The one member this join may repeat, by its key: a group's
		// joins take turns on its lock, so reading every member made each
		// join cost as much as the group had members. One who joined
		// before the database had a salt holds the key made without it.
		for _, key := range []string{want.Key, legacyChargeKey(o.OrderNo, req.UserID)} {
			switch m, err := tx.GroupMemberGet(ctx, key); {
			case err == nil:
				return sameMember(m, want)
			case !errors.Is(err, lapse.ErrGroupMemberNotFound):
				return nil, err
			}
		}
		now := e.clock.Now()
		p, err = flow.Plan(o, lapse.Firing{Event: flow.Group.Join, Now: now, FiredBy: req.By.FiredBy, Actor: req.By.Name,
			Reason: "member " + req.UserID + " joined"})
		if err == nil {
			// The deadline ends the joins, whatever guard the flow put on
			// its join (a flow built in Go may leave out
			// lapse.BeforeDeadline), as it ends the payments: a member who
			// joined after it, before the claimer came by, would be charged
			// for a group that closed without them.
			err = lapse.BeforeDeadline(flow.InWindow(o), now)
		}
		if lapse.ErrorCode(err) == lapse.ECONFLICT {
			return nil, lapse.Errorf(lapse.ECONFLICT, "group %s is %s and takes no more members", o.OrderNo, o.State)
		}
		if err != nil {
			return nil, err
		}
		want.JoinedAt, want.UpdatedAt = now, now
		m, added, err := tx.GroupMemberAdd(ctx, want)
		if created = added; err != nil {
			return nil, err
		}
		if !added {
			return sameMember(m, want)
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

// sameMember returns m, a member who joined before, when it is the member
// want asks for again, and ECONFLICT when the user joined with another
// payment method (or, under want's key, another group or user).
func sameMember(m, want *lapse.GroupMember) (*lapse.GroupMember, error) {
	if m.OrderID != want.OrderID || m.UserID != want.UserID || m.Method != want.Method || m.Provider != want.Provider {
		return nil, lapse.Errorf(lapse.ECONFLICT, "user %s joined group %s with another payment method", want.UserID, want.GroupID)
	}
	return m, nil
}

// chargeKey is a member's charge idempotency key, made once, when the
// member joins, and kept on the member, whose every charge and query uses
// it: a charge sent twice is one charge. It is made of the group, the user
// and salt, the database's (chargeSalt), so that two databases that share
// a provider account (two deployments of Lapse) never make the same key
// for the same group and user: the provider would answer the second's
// charge with the first's.
func chargeKey(salt, groupID, userID string) string {
	sum := sha256.Sum256([]byte(salt + "\x00" + groupID + "\x00" + userID))
	return lapse.ChargeKeyPrefix + hex.EncodeToString(sum[:12])
}

// legacyChargeKey is the key a member was given before the database had a
// salt: of the group and user alone. Members keep the keys they were given
// (charges may have been sent under them); no new member is given one.
func legacyChargeKey(groupID, userID string) string {
	sum := sha256.Sum256([]byte(groupID + "\x00" + userID))
	return lapse.ChargeKeyPrefix + hex.EncodeToString(sum[:12])
}

// chargeSalt returns the salt of the database's charge keys: the one the
// store keeps, drawn at random by the first process that needed one.
func (gb *groupBuys) chargeSalt(ctx context.Context) (string, error) {
	gb.saltMu.Lock()
	defer gb.saltMu.Unlock()
	if gb.salt != "" {
		return gb.salt, nil
	}
	salt, err := gb.e.store.ChargeSaltKeep(ctx, rand.Text())
	if err != nil {
		return "", fmt.Errorf("the salt of the charge keys: %w", err)
	}
	gb.salt = salt
	return salt, nil
}

// chargeProvider names the provider that charges a member.
func (gb *groupBuys) chargeProvider(name string) (string, error) {
	if name == "" {
		if len(gb.providers) != 1 {
			return "", lapse.FieldError("provider", "is required: %d payment providers are configured", len(gb.providers))
		}
		for n := range gb.providers {
			name = n
		}
	}
	if gb.providers[name] == nil {
		return "", lapse.FieldError("provider", "no payment provider port %q is configured", name)
	}
	return name, nil
}

// Group is a group buy as it stands: its order and its members with their
// charges, each member's method masked (lapse.MaskMethod): whoever may read
// a group may not read what charges its members.
type Group struct {
	Order   *lapse.Order
	Members []*lapse.GroupMember
}

// Group returns the group buy groupID with its members. Errors: ENOTFOUND;
// EINVALID when the order is not a group buy.
func (e *Engine) Group(ctx context.Context, groupID string) (*Group, error) {
	g, err := e.feat.groups.group(ctx, groupID) // as settling reads it, methods whole
	if err != nil {
		return nil, err
	}
	for i, m := range g.Members {
		g.Members[i] = m.Masked()
	}
	return g, nil
}

func (gb *groupBuys) group(ctx context.Context, groupID string) (*Group, error) {
	e := gb.e
	o, err := e.store.OrderGet(ctx, groupID)
	if err != nil {
		return nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, err
	}
	if !gb.serves(flow) {
		return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
	}
	ms, err := e.store.GroupMemberList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	return &Group{Order: o, Members: ms}, nil
}
