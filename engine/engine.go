package engine

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// Config configures an Engine. The zero value is usable.
type Config struct {
	// Clock tells the time. Default: lapse.SystemClock.
	Clock lapse.Clock
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the engine's metrics. Default: none are registered
	// (they are still kept, for tests).
	Registerer prometheus.Registerer
	// Node names this process in the transition log rows of the deadlines it
	// fires. Default: hostname/pid.
	Node string
	// Subscriptions route outbox events to subscribers; see Subscription.
	Subscriptions []Subscription
	// MaxDeadline bounds how far ahead a deadline may be set, and so a
	// flow's deadlines. Default: lapse.DefaultMaxDeadline, 366 days.
	MaxDeadline time.Duration
	// Trigger is a precise trigger shared by every process (Redis); nil: the
	// in-process timer and the database. TriggerMode is its starting mode
	// (default TriggerAuto). The deadlines this engine sets reach the
	// trigger through its Claimer's loop (or its RunTriggerOnce), so a
	// process with a Trigger must run a Claimer (lapse serve always does).
	Trigger     SharedTrigger
	TriggerMode TriggerMode
	// WorkStore is the store the Claimer and the Deliverer claim and finish
	// their work through: the same database as the engine's store, through
	// connections of its own, so that a flood of API requests cannot starve
	// the closing of due orders. Default: the engine's store.
	WorkStore lapse.Store

	// The features' settings (see feature.go). Each feature reads its own.

	// StockLedger turns on the built-in stock ledger (stock.go): orders of
	// flows that hold reserve their items at creation (or are refused), and
	// a local subscription named "stock" gives them back or uses them up.
	// Off, new orders reserve nothing; but while orders still hold stock
	// reserved when it was on (New asks the store), the subscription stays
	// and gives that back or uses it up as they end, with a warning in the
	// log.
	StockLedger bool
	// CouponLedger does the same for coupons (coupon.go), with a
	// subscription "coupon"; off, coupons locked when it was on are still
	// unlocked or used as their orders end.
	CouponLedger bool
	// Payments configures the payment path (payment.go); see PaymentConfig.
	// Group buys charge their members through its Providers too.
	Payments PaymentConfig
	// GroupRetries is the retry schedule of group settlements (group.go):
	// the waits after each failed round of charges; after the last the group
	// fails. Default: DefaultGroupRetries.
	GroupRetries []time.Duration
	// Cards issues and revokes the benefits of flows that issue them
	// (membership; issue.go). Default: the built-in card ledger.
	Cards lapse.CardIssuer
	// IssueRetries is the retry schedule of issuing: the waits after each
	// failed attempt; after the last the order goes to manual review.
	// Default: DefaultIssueRetries.
	IssueRetries []time.Duration
}

// Engine creates orders and moves them through their flows. It is safe for
// concurrent use, and several engines (processes) may share one database: the
// store's guarded updates make every transition happen once.
type Engine struct {
	store   lapse.Store
	work    lapse.Store // the Claimer's and the Deliverer's
	flows   flowSet
	clock   lapse.Clock
	log     *slog.Logger
	maxAt   time.Duration
	node    string
	subs    []*Subscription
	byName  map[string]*Subscription // subs by name
	metrics *metrics

	wake   *waker
	trig   *trigger  // nil without a shared trigger
	burns  burns     // the Claimer's, which hold some deliveries back (close_hold.go)
	sealed broadcast // wakes the audit log's sealers: a row committed

	feat features
}

// features are the engine's features (feature.go): all of them, in the
// order in which they take part in creating orders and their subscriptions
// are listed, and each by name for its part of the API.
type features struct {
	all      []feature
	stock    *stockLedger
	coupons  *couponLedger
	payments *payments
	groups   *groupBuys
	cards    *cardIssuing
}

// New returns an Engine over store running flows. Every flow must be valid
// and names must be unique. With a built-in ledger off and flows whose
// orders hold, New asks the store (for at most heldCheckTimeout) whether
// orders still hold what the ledger gave them, to keep giving it back
// (ledger.go).
func New(store lapse.Store, flows []*lapse.Flow, cfg Config) (*Engine, error) {
	if store == nil {
		return nil, fmt.Errorf("engine: nil store")
	}
	e := &Engine{
		work:  checked{cmp.Or[lapse.Store](cfg.WorkStore, store)},
		clock: cfg.Clock,
		log:   cfg.Logger,
		maxAt: cfg.MaxDeadline,
		node:  cfg.Node,
		wake:  newWaker(),
	}
	if e.clock == nil {
		e.clock = lapse.SystemClock{}
	}
	e.store = auditing{Store: checked{store}, clock: e.clock, appended: &e.sealed}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.node == "" {
		host, _ := os.Hostname()
		e.node = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if e.maxAt <= 0 {
		e.maxAt = lapse.DefaultMaxDeadline
	}
	var err error
	if e.flows, err = newFlowSet(flows, e.maxAt); err != nil {
		return nil, err
	}
	e.feat.stock = newStockLedger(e, cfg, flows)
	e.feat.coupons = newCouponLedger(e, cfg, flows)
	e.feat.payments = newPayments(e, cfg.Payments)
	e.feat.groups = newGroupBuys(e, cfg)
	e.feat.cards = newCardIssuing(e, cfg)
	e.feat.all = []feature{e.feat.stock, e.feat.coupons, e.feat.payments, e.feat.groups, e.feat.cards}
	subs := slices.Clone(cfg.Subscriptions)
	for _, ft := range e.feat.all {
		if mine := subscribed(ft, flows); len(mine) > 0 {
			subs = append(subs, ft.subscriptions(mine)...)
		}
	}
	for i := range subs {
		s := &subs[i]
		if err := s.validate(); err != nil {
			return nil, err
		}
		if slices.ContainsFunc(e.subs, func(o *Subscription) bool { return o.Name == s.Name }) {
			return nil, fmt.Errorf("engine: subscription %q is defined twice", s.Name)
		}
		e.subs = append(e.subs, s)
	}
	e.byName = make(map[string]*Subscription, len(e.subs))
	for _, s := range e.subs {
		e.byName[s.Name] = s
	}
	// Events are written through both stores (a death's delivery.dead
	// event through the work store): a subscription is relayed only when
	// both can relay.
	canRelay := relayerOf(store) != nil && relayerOf(e.work) != nil
	for _, s := range e.subs {
		s.relayed = s.Relay && canRelay
		if s.Relay && !canRelay {
			e.log.Info("engine: the store cannot relay; the subscription's events get a delivery row each", "subscription", s.Name)
		}
	}
	known := knownLabels{providers: slices.Sorted(maps.Keys(cfg.Payments.Providers)), trigger: cfg.Trigger != nil, timed: e.flows.timed}
	for _, s := range e.subs {
		known.subscribers = append(known.subscribers, s.Name)
	}
	if e.metrics, err = newMetrics(cfg.Registerer, store, cfg.WorkStore, e.clock, known); err != nil {
		return nil, err
	}
	if cfg.Trigger != nil {
		mode, err := ParseTriggerMode(string(cfg.TriggerMode))
		if err != nil {
			return nil, err
		}
		e.trig = newTrigger(cfg.Trigger, mode, e.metrics)
		e.trig.update()
	}
	return e, nil
}

// Flow returns the flow called name, or nil.
func (e *Engine) Flow(name string) *lapse.Flow { return e.flows.get(name) }

// Flows returns the engine's flows sorted by name.
func (e *Engine) Flows() []*lapse.Flow { return e.flows.all() }

// Store returns the engine's store: the one New was given, with every call
// validated by the root package's rules (the Validate methods of the params)
// before it reaches it.
func (e *Engine) Store() lapse.Store { return e.store }

// Clock returns the engine's clock.
func (e *Engine) Clock() lapse.Clock { return e.clock }

// delivered wakes the delivery loops of the subscribers evs fan out to,
// and the relays of those they are relayed to.
func (e *Engine) delivered(evs []lapse.OutboxEvent) {
	for _, ev := range evs {
		for _, name := range ev.Subscribers {
			if s := e.byName[name]; s != nil {
				s.kick.signal()
			}
		}
		for _, name := range ev.Relays {
			if s := e.byName[name]; s != nil {
				s.relayKick.signal()
			}
		}
	}
}

// wakeSubscriber wakes the delivery loop of the subscriber called name.
func (e *Engine) wakeSubscriber(name string) {
	if s := e.byName[name]; s != nil {
		s.kick.signal()
	}
}
