package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/nats"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/rabbitmq"
	"github.com/lapsehq/lapse/webhook"
)

// lifeEvents are the events that the webhook and the brokers receive by
// default, and the notify port always: the whole life of orders, group buys
// and memberships, and dead deliveries. Payment events (payment.late, …) are
// the engine's refund subscriber's.
var lifeEvents = []string{"order.*", "group.*", "membership.*", lapse.EventDeliveryDead}

// holdEvents are what the merchant stock and coupon ports receive, which
// are what the built-in ledgers act on: an order holds from its creation
// until it closes (given back) or is paid (used up).
var holdEvents = []string{lapse.EventOrderCreated, flows.EventOrderClosed, flows.EventOrderPaid}

// A subscriber is one that lapse serve builds from its settings, beside the
// engine's own (engine.StockSubscriber, CouponSubscriber, SettleSubscriber,
// IssueSubscriber, RevokeSubscriber and RefundSubscriber, whose events the
// flows name).
type subscriber struct {
	// Name names its deliveries and dedup rows in the database, so it never
	// changes. It is also the setting of its URL.
	Name string
	// Events are the event types it receives: for the webhook and the
	// brokers, the default of their events setting.
	Events []string
}

// The subscribers of lapse serve.
var (
	webhookSub     = subscriber{"webhook", lifeEvents}
	natsSub        = subscriber{"nats", lifeEvents}
	rabbitmqSub    = subscriber{"rabbitmq", lifeEvents}
	stockPortSub   = subscriber{"stock-port", holdEvents}
	couponPortSub  = subscriber{"coupon-port", holdEvents}
	notifyPortSub  = subscriber{"notify-port", lifeEvents}
	groupNotifySub = subscriber{"group-notify", []string{flows.EventGroupFailed, flows.EventGroupAbandoned}}
	adminNotifySub = subscriber{"admin-notify", []string{flows.EventGroupFailed, flows.EventGroupAbandoned, flows.EventMembershipReview,
		flows.EventMembershipRefundReview, lapse.EventDeliveryDead}}
)

var (
	// signedWebhooks share the webhook's secret and retry schedule.
	signedWebhooks = []subscriber{webhookSub, groupNotifySub, adminNotifySub}
	// retriedPorts share the ports' retry schedule.
	retriedPorts = []subscriber{stockPortSub, couponPortSub, notifyPortSub}
)

// cardPort names the port of a merchant card service (not a subscriber:
// the engine's issue subscriber calls it), and the setting of its URL.
const cardPort = "card-port"

// receives returns the words of a flag's help that say what s receives:
// "receives order.created, order.closed and order.paid".
func (s subscriber) receives() string { return "receives " + andList(s.Events) }

// names returns the names of subs.
func names(subs []subscriber) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = s.Name
	}
	return out
}

// flagNames returns the flags of the URLs of subs: --webhook, ….
func flagNames(subs []subscriber) []string {
	out := names(subs)
	for i := range out {
		out[i] = "--" + out[i]
	}
	return out
}

// eventList returns events as a list setting takes them.
func eventList(events []string) string { return strings.Join(events, ",") }

// andList joins words as prose does: "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// subscriberFlags configure where events go besides the built-in ledgers.
type subscriberFlags struct {
	stockLedger, couponLedger bool

	webhookURL, webhookSecret, webhookEvents, webhookRetry string

	natsURL, natsStream, natsSubject, natsEvents, natsRetry string
	natsRelay                                               bool

	rabbitURL, rabbitExchange, rabbitQueue, rabbitEvents, rabbitRetry string

	stockPort, couponPort, notifyPort, portRetry string

	groupNotify, adminNotify, cardPort string
	groupRetries, issueRetries         string
	portConnect, portRead              time.Duration
	portConcurrency                    int

	// timed are the ports and webhooks built from the flags, whose
	// timeouts a configuration reload changes.
	timed []timeouter
	// natsWindow is the duplicate window of the NATS stream built from the
	// flags, which a reloaded --nats-retry must fit in; 0 without one.
	natsWindow time.Duration
	// admins is the admins' channel built from --admin-notify, which the
	// probe also posts to; nil without one.
	admins lapse.Handler
}

// timeouter is a port or webhook whose timeouts a reload changes; zero
// leaves a timeout as it is.
type timeouter interface {
	SetTimeouts(connect, read time.Duration)
}

// closer releases what subscriptions hold (broker connections).
type closer func()

// subscriptions builds the subscriptions the flags ask for.
func (f *subscriberFlags) subscriptions(ctx context.Context, log *slog.Logger) ([]engine.Subscription, closer, error) {
	return f.build(ctx, log, true)
}

// fanOut builds the subscriptions as subscriptions does, for a process that
// writes events but delivers none (lapse close): each event fans out, in
// the transaction that writes it, to the deliveries lapse serve delivers.
// It dials no broker, so that a broker that is down does not stop it; its
// broker subscriptions refuse every delivery, which it never makes.
func (f *subscriberFlags) fanOut(ctx context.Context) ([]engine.Subscription, error) {
	subs, done, err := f.build(ctx, nil, false)
	if err != nil {
		return nil, err
	}
	done()
	return subs, nil
}

// notDelivered is the handler of a broker subscription in a process that
// delivers nothing.
type notDelivered struct{ name string }

func (n notDelivered) Deliver(context.Context, *lapse.Delivery) error {
	return fmt.Errorf("%s: this process delivers no events; lapse serve does", n.name)
}

// natsInFlight is the NATS subscription's Concurrency: the events
// published and waiting for their PubAcks. A publish is asynchronous and
// costs the broker little, and each batch claimed, published and finished
// costs a few round trips whatever its size, so a wide window is what keeps
// up with a flash sale (engine BenchmarkFlashSale). The JetStream client's
// own bound on pending publishes (4,000) is above it.
const natsInFlight = 1024

// checkEvents returns what is wrong with the event patterns of the
// webhook and the brokers: each must match one of types, the events that
// Lapse writes (engine.EventTypes), or it would receive nothing. A pattern
// that engine.Subscription refuses is left to it; an empty list, which it
// would take as order.*, is refused.
func (f *subscriberFlags) checkEvents(types []string) error {
	for _, s := range []struct{ flag, list string }{
		{webhookSub.Name + "-events", f.webhookEvents},
		{natsSub.Name + "-events", f.natsEvents},
		{rabbitmqSub.Name + "-events", f.rabbitEvents},
	} {
		patterns := splitList(s.list)
		if len(patterns) == 0 {
			return fmt.Errorf("--%s: give the event types it receives, such as order.closed, or prefixes, such as order.*", s.flag)
		}
		for _, p := range patterns {
			if !slices.ContainsFunc(types, func(typ string) bool { return engine.EventMatches(p, typ) }) {
				return fmt.Errorf("--%s: %q matches none of the events Lapse writes with these flows (%s)", s.flag, p,
					strings.Join(types, ", "))
			}
		}
	}
	return nil
}

// checkPorts returns what is wrong with the merchant stock and coupon
// ports for flows: the port protocol gives holdings back on order.closed
// and uses them up on order.paid, and a port receives those and
// order.created only. A flow that holds and gives back or uses up on
// another event (a YAML flow's release_on: [order.expired]) would leave
// its orders' stock or coupon held at the merchant's for ever (S4).
func (f *subscriberFlags) checkPorts(fs []*lapse.Flow) error {
	for _, p := range []struct {
		sub subscriber
		url string
	}{{stockPortSub, f.stockPort}, {couponPortSub, f.couponPort}} {
		if p.url == "" {
			continue
		}
		for _, fl := range fs {
			if !fl.Holds {
				continue
			}
			for _, c := range []struct {
				key, want string
				types     []string
			}{{"release_on", flows.EventOrderClosed, fl.ReleaseOn}, {"consume_on", flows.EventOrderPaid, fl.ConsumeOn}} {
				for _, typ := range c.types {
					if typ != c.want {
						return fmt.Errorf("--%s: flow %s holds, and its %s names %s: the merchant's service %s, and takes %s for what %s means, so the orders of %s would stay held there for ever; use %s",
							p.sub.Name, fl.Name, c.key, typ, p.sub.receives(), c.want, c.key, fl.Name, c.want)
					}
				}
			}
		}
	}
	return nil
}

// attemptTimeout is the Timeout of the subscriptions built from the flags.
func (f *subscriberFlags) attemptTimeout() time.Duration {
	return f.portConnect + f.portRead + time.Second
}

// build builds the subscriptions; without dial, the brokers' subscriptions
// are notDelivered.
func (f *subscriberFlags) build(ctx context.Context, log *slog.Logger, dial bool) ([]engine.Subscription, closer, error) {
	var subs []engine.Subscription
	var closers []func()
	done := func() {
		for _, c := range closers {
			c()
		}
	}
	add := func(name string, h lapse.Handler, events []string, retry string, concurrency int) error {
		sch, err := lapse.ParseSchedule(retry)
		if err != nil {
			return fmt.Errorf("--%s: retry schedule: %w", name, err)
		}
		subs = append(subs, engine.Subscription{Name: name, Handler: h, Events: events, Schedule: sch,
			Timeout: f.attemptTimeout(), Concurrency: concurrency})
		return nil
	}
	// stream adds an event stream: its deliveries yield to closes
	// (--delivery-close-hold), which an effect's do not.
	stream := func(name string, h lapse.Handler, events []string, retry string, concurrency int) error {
		if err := add(name, h, events, retry, concurrency); err != nil {
			return err
		}
		subs[len(subs)-1].YieldsToCloses = true
		return nil
	}
	fail := func(err error) ([]engine.Subscription, closer, error) {
		done()
		return nil, nil, err
	}

	if f.webhookURL != "" {
		sink, err := webhook.New(webhook.Config{URL: f.webhookURL, Secret: f.webhookSecret, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead})
		if err != nil {
			return fail(fmt.Errorf("--%s: %w", webhookSub.Name, err))
		}
		f.timed = append(f.timed, sink)
		if err := stream(webhookSub.Name, sink, splitList(f.webhookEvents), f.webhookRetry, f.portConcurrency); err != nil {
			return fail(err)
		}
	}
	if f.natsURL != "" && !dial {
		if err := stream(natsSub.Name, notDelivered{natsSub.Name}, splitList(f.natsEvents), f.natsRetry, natsInFlight); err != nil {
			return fail(err)
		}
	} else if f.natsURL != "" {
		sch, err := lapse.ParseSchedule(f.natsRetry)
		if err != nil {
			return fail(fmt.Errorf("--%s: retry schedule: %w", natsSub.Name, err))
		}
		// The stream drops a retry's copy only within its window, so the
		// window covers the schedule's longest wait.
		f.natsWindow = nats.WindowFor(sch.Longest(), f.attemptTimeout())
		sink, err := nats.New(ctx, nats.Config{URL: f.natsURL, Stream: f.natsStream, Subject: f.natsSubject,
			DuplicateWindow: f.natsWindow, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("--%s: %w", natsSub.Name, err))
		}
		closers = append(closers, func() { sink.Close() })
		if err := stream(natsSub.Name, sink, splitList(f.natsEvents), f.natsRetry, natsInFlight); err != nil {
			return fail(err)
		}
		// Relayed where the store can (engine.Subscription.Relay). A
		// process that delivers nothing (lapse close) writes delivery rows
		// for it instead, which lapse serve delivers as any.
		subs[len(subs)-1].Relay = f.natsRelay
	}
	if f.rabbitURL != "" && !dial {
		if err := stream(rabbitmqSub.Name, notDelivered{rabbitmqSub.Name}, splitList(f.rabbitEvents), f.rabbitRetry, 32); err != nil {
			return fail(err)
		}
	} else if f.rabbitURL != "" {
		sink, err := rabbitmq.New(ctx, rabbitmq.Config{URL: f.rabbitURL, Exchange: f.rabbitExchange, Queue: f.rabbitQueue, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("--%s: %w", rabbitmqSub.Name, err))
		}
		closers = append(closers, func() { sink.Close() })
		if err := stream(rabbitmqSub.Name, sink, splitList(f.rabbitEvents), f.rabbitRetry, 32); err != nil {
			return fail(err)
		}
	}
	for _, p := range []struct {
		sub subscriber
		url string
	}{{stockPortSub, f.stockPort}, {couponPortSub, f.couponPort}, {notifyPortSub, f.notifyPort}} {
		if p.url == "" {
			continue
		}
		h, err := port.New(p.sub.Name, port.Config{URL: p.url, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead, MaxConcurrent: f.portConcurrency})
		if err != nil {
			return fail(fmt.Errorf("--%s: %w", p.sub.Name, err))
		}
		f.timed = append(f.timed, h)
		if err := add(p.sub.Name, h, p.sub.Events, f.portRetry, f.portConcurrency); err != nil {
			return fail(err)
		}
	}
	for _, n := range []struct {
		sub subscriber
		url string
	}{{groupNotifySub, f.groupNotify}, {adminNotifySub, f.adminNotify}} {
		if n.url == "" {
			continue
		}
		sink, err := webhook.New(webhook.Config{URL: n.url, Secret: f.webhookSecret, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead})
		if err != nil {
			return fail(fmt.Errorf("--%s (signed with --webhook-secret): %w", n.sub.Name, err))
		}
		f.timed = append(f.timed, sink)
		if n.sub.Name == adminNotifySub.Name {
			f.admins = sink
		}
		if err := add(n.sub.Name, sink, n.sub.Events, f.webhookRetry, f.portConcurrency); err != nil {
			return fail(err)
		}
	}
	return subs, done, nil
}

// lifecycle returns what the group buy and membership flows run with: the
// retry schedules, and the card issuer (nil: the built-in ledger).
func (f *subscriberFlags) lifecycle() (groups, issues []time.Duration, cards lapse.CardIssuer, err error) {
	if groups, err = parseWaits(f.groupRetries); err != nil {
		return nil, nil, nil, fmt.Errorf("--group-retries: %w", err)
	}
	if issues, err = parseWaits(f.issueRetries); err != nil {
		return nil, nil, nil, fmt.Errorf("--issue-retries: %w", err)
	}
	if f.cardPort != "" {
		p, err := port.New(cardPort, port.Config{URL: f.cardPort, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead, MaxConcurrent: f.portConcurrency})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--%s: %w", cardPort, err)
		}
		f.timed = append(f.timed, p)
		cards = p
	}
	return groups, issues, cards, nil
}
