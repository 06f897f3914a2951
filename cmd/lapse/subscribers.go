package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/nats"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/rabbitmq"
	"github.com/lapsehq/lapse/webhook"
)

// subscriberFlags configure where events go besides the built-in ledgers.
type subscriberFlags struct {
	stockLedger, couponLedger bool

	webhookURL, webhookSecret, webhookEvents, webhookRetry string

	natsURL, natsStream, natsSubject, natsEvents, natsRetry string

	rabbitURL, rabbitExchange, rabbitQueue, rabbitEvents, rabbitRetry string

	stockPort, couponPort, notifyPort, portRetry string

	groupNotify, adminNotify, cardPort string
	groupRetries, issueRetries         string
	portConnect, portRead              time.Duration
	portConcurrency                    int

	// timed are the ports and webhooks built from the flags, whose
	// timeouts a configuration reload changes.
	timed []interface {
		SetTimeouts(connect, read time.Duration)
	}
}

func (f *subscriberFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.stockLedger, "stock-ledger", true, "built-in stock ledger: checkout orders reserve their items at creation, closing releases them, paying consumes them")
	fs.BoolVar(&f.couponLedger, "coupon-ledger", true, "built-in coupon ledger: checkout orders lock their coupon at creation, closing unlocks it, paying uses it")

	fs.StringVar(&f.webhookURL, "webhook", "", "URL that receives every event as a signed webhook (see package webhook for the Lapse-Signature header)")
	fs.StringVar(&f.webhookSecret, "webhook-secret", "", "HMAC secret of the webhook signatures, at least 16 bytes")
	fs.StringVar(&f.webhookEvents, "webhook-events", "order.*,group.*,membership.*,delivery.dead", "event types the webhook receives (comma separated; order.* is a prefix)")
	fs.StringVar(&f.webhookRetry, "webhook-retry", "1m,5m,15m,30m,1h", "retry schedule: waits (1m,5m,…) or exp:BASE,CAP,ATTEMPTS")

	fs.StringVar(&f.natsURL, "nats", "", "NATS URL (JetStream): publish every event, message id = event id")
	fs.StringVar(&f.natsStream, "nats-stream", "LAPSE", "JetStream stream, created or updated at start")
	fs.StringVar(&f.natsSubject, "nats-subject", "lapse", "subject prefix: events go to <prefix>.<event type>")
	fs.StringVar(&f.natsEvents, "nats-events", "order.*,group.*,membership.*,delivery.dead", "event types published to NATS")
	fs.StringVar(&f.natsRetry, "nats-retry", "exp:1s,1m,30", "retry schedule of NATS publishes")

	fs.StringVar(&f.rabbitURL, "rabbitmq", "", "RabbitMQ URL: publish every event with confirms to a quorum queue, message id = event id")
	fs.StringVar(&f.rabbitExchange, "rabbitmq-exchange", "lapse", "topic exchange, routing key = event type")
	fs.StringVar(&f.rabbitQueue, "rabbitmq-queue", "lapse.events", "quorum queue bound to the exchange with #")
	fs.StringVar(&f.rabbitEvents, "rabbitmq-events", "order.*,group.*,membership.*,delivery.dead", "event types published to RabbitMQ")
	fs.StringVar(&f.rabbitRetry, "rabbitmq-retry", "exp:1s,1m,30", "retry schedule of RabbitMQ publishes")

	fs.StringVar(&f.stockPort, "stock-port", "", "URL of a merchant stock service (port protocol, see package port): receives order.created, order.closed and order.paid")
	fs.StringVar(&f.couponPort, "coupon-port", "", "URL of a merchant coupon service: receives order.created, order.closed and order.paid")
	fs.StringVar(&f.notifyPort, "notify-port", "", "URL of a merchant notification service: receives order.* and delivery.dead")
	fs.StringVar(&f.groupNotify, "group-notify", "", "URL told (signed webhook, --webhook-secret) of every group buy that failed, with its organiser, so that the organiser hears of it; retried on --webhook-retry")
	fs.StringVar(&f.adminNotify, "admin-notify", "", "URL of the admins' channel (signed webhook): failed group buys, memberships in manual review and dead deliveries")
	fs.StringVar(&f.cardPort, "card-port", "", "URL of a merchant card service that issues and revokes membership cards (POST <URL>/issue, <URL>/revoke; see package port); default: the built-in card ledger")
	fs.StringVar(&f.groupRetries, "group-retries", "1s,2s,4s,8s,16s", "waits between rounds of charges of a closed group buy; after the last the group fails")
	fs.StringVar(&f.issueRetries, "issue-retries", "1m,5m,15m,30m,1h", "waits between attempts to issue a membership's cards; after the last the order goes to manual review")
	fs.StringVar(&f.portRetry, "port-retry", "1m,5m,15m,30m,1h", "retry schedule of the ports")
	fs.DurationVar(&f.portConnect, "port-connect-timeout", 2*time.Second, "connect timeout of the ports and the webhook")
	fs.DurationVar(&f.portRead, "port-read-timeout", 10*time.Second, "read timeout of the ports and the webhook (from sending to the whole answer)")
	fs.IntVar(&f.portConcurrency, "port-concurrency", 16, "calls in flight per port (bulkhead)")
}

// closer releases what subscriptions hold (broker connections).
type closer func()

// subscriptions builds the subscriptions the flags ask for.
func (f *subscriberFlags) subscriptions(ctx context.Context, log *slog.Logger) ([]engine.Subscription, closer, error) {
	var subs []engine.Subscription
	var closers []func()
	done := func() {
		for _, c := range closers {
			c()
		}
	}
	add := func(name string, h lapse.Handler, events, retryFlag, retry string, concurrency int) error {
		sch, err := lapse.ParseSchedule(retry)
		if err != nil {
			return fmt.Errorf("--%s: %w", retryFlag, err)
		}
		subs = append(subs, engine.Subscription{Name: name, Handler: h, Events: splitList(events), Schedule: sch,
			Timeout: f.portConnect + f.portRead + time.Second, Concurrency: concurrency})
		return nil
	}
	fail := func(err error) ([]engine.Subscription, closer, error) {
		done()
		return nil, nil, err
	}

	if f.webhookURL != "" {
		sink, err := webhook.New(webhook.Config{URL: f.webhookURL, Secret: f.webhookSecret, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead})
		if err != nil {
			return fail(fmt.Errorf("--webhook: %w", err))
		}
		f.timed = append(f.timed, sink)
		if err := add("webhook", sink, f.webhookEvents, "webhook-retry", f.webhookRetry, f.portConcurrency); err != nil {
			return fail(err)
		}
	}
	if f.natsURL != "" {
		sink, err := nats.New(ctx, nats.Config{URL: f.natsURL, Stream: f.natsStream, Subject: f.natsSubject, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("--nats: %w", err))
		}
		closers = append(closers, func() { sink.Close() })
		if err := add("nats", sink, f.natsEvents, "nats-retry", f.natsRetry, 32); err != nil {
			return fail(err)
		}
	}
	if f.rabbitURL != "" {
		sink, err := rabbitmq.New(ctx, rabbitmq.Config{URL: f.rabbitURL, Exchange: f.rabbitExchange, Queue: f.rabbitQueue, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("--rabbitmq: %w", err))
		}
		closers = append(closers, func() { sink.Close() })
		if err := add("rabbitmq", sink, f.rabbitEvents, "rabbitmq-retry", f.rabbitRetry, 32); err != nil {
			return fail(err)
		}
	}
	for _, p := range []struct{ name, url, events string }{
		{"stock-port", f.stockPort, "order.created,order.closed,order.paid"},
		{"coupon-port", f.couponPort, "order.created,order.closed,order.paid"},
		{"notify-port", f.notifyPort, "order.*,group.*,membership.*,delivery.dead"},
	} {
		if p.url == "" {
			continue
		}
		h, err := port.New(p.name, port.Config{URL: p.url, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead, MaxConcurrent: f.portConcurrency})
		if err != nil {
			return fail(fmt.Errorf("--%s: %w", p.name, err))
		}
		f.timed = append(f.timed, h)
		if err := add(p.name, h, p.events, "port-retry", f.portRetry, f.portConcurrency); err != nil {
			return fail(err)
		}
	}
	for _, n := range []struct{ name, url, events string }{
		{"group-notify", f.groupNotify, "group.failed"},
		{"admin-notify", f.adminNotify, "group.failed,membership.manual_review,membership.refund_review,delivery.dead"},
	} {
		if n.url == "" {
			continue
		}
		sink, err := webhook.New(webhook.Config{URL: n.url, Secret: f.webhookSecret, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead})
		if err != nil {
			return fail(fmt.Errorf("--%s (signed with --webhook-secret): %w", n.name, err))
		}
		f.timed = append(f.timed, sink)
		if err := add(n.name, sink, n.events, "webhook-retry", f.webhookRetry, f.portConcurrency); err != nil {
			return fail(err)
		}
	}
	return subs, done, nil
}

// lifecycle returns what the group buy and membership flows run with: the
// retry schedules, and the card issuer (nil: the built-in ledger).
func (f *subscriberFlags) lifecycle() (groups, issues []time.Duration, cards lapse.CardIssuer, err error) {
	steps := func(flag, v string) ([]time.Duration, error) {
		sch, err := lapse.ParseSchedule(v)
		if err == nil && len(sch.Steps) == 0 {
			err = fmt.Errorf("give the waits, such as 1s,2s,4s")
		}
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		return sch.Steps, nil
	}
	if groups, err = steps("group-retries", f.groupRetries); err != nil {
		return nil, nil, nil, err
	}
	if issues, err = steps("issue-retries", f.issueRetries); err != nil {
		return nil, nil, nil, err
	}
	if f.cardPort != "" {
		p, err := port.New("card-port", port.Config{URL: f.cardPort, ConnectTimeout: f.portConnect, ReadTimeout: f.portRead, MaxConcurrent: f.portConcurrency})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--card-port: %w", err)
		}
		f.timed = append(f.timed, p)
		cards = p
	}
	return groups, issues, cards, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
