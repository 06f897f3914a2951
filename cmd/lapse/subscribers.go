package main

import (
	"context"
	"fmt"
	"log/slog"
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
	timed []timeouter
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
