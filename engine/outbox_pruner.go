package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// Defaults of OutboxPrunerConfig.
const (
	DefaultOutboxRetention     = 7 * 24 * time.Hour
	DefaultOutboxPruneInterval = time.Hour
	DefaultOutboxPruneBatch    = 500
)

// pruneStep is about how long a step of the pruner should take: Batch is
// doubled and halved towards it (OutboxPrunerConfig.Batch).
const pruneStep = 20 * time.Millisecond

// OutboxPrunerConfig configures an OutboxPruner. Zero values take the
// defaults noted.
type OutboxPrunerConfig struct {
	// Retention is how long an event stays in the outbox after it was
	// written, with its deliveries and their attempts, once every delivery
	// is done. Default 7 days.
	Retention time.Duration
	// Interval is the pause between the end of a pass over the outbox and
	// the start of the next. Default 1h.
	Interval time.Duration
	// Batch is about how many events the first step of a pass (one
	// transaction) reads; each later step reads twice as many as the one
	// before while they take under 10 ms, and half as many while they take
	// over 40 ms, from an eighth of Batch to 8 times it. Default 500: on
	// SQLite, whose writes wait for one another, a step of 500 events that
	// all go holds the writer about 30 ms (5,000: 190 ms); on PostgreSQL a
	// step of 500 events that stay takes about 1.5 ms, most of it the
	// statement's own cost, and one of 4,000 about 5 ms.
	Batch int
	// Logger receives the pruner's errors. Default: the engine's.
	Logger *slog.Logger
	// Registerer receives the pruner's metrics. Default: none.
	Registerer prometheus.Registerer
}

// OutboxPruner keeps the outbox from growing without end: every Interval
// it reads the whole outbox, a step at a time, and deletes each event older
// than Retention that nothing needs any more (lapse.Store.OutboxPrune): its
// deliveries are all done, and its order never went to review, whose
// operators see its whole history. An event with a delivery pending or
// dead stays, however old. The transition log is never pruned.
//
// A step runs for as long as it takes and the pruner then rests as long
// again, so that it takes at most half of one connection, and of the
// database's time, from the work. Pruners in several processes on one
// database skip each other's events.
type OutboxPruner struct {
	store lapse.Store
	clock lapse.Clock
	cfg   OutboxPrunerConfig
	log   *slog.Logger

	pruned prometheus.Counter
	errors prometheus.Counter
	passes prometheus.Counter

	bg background
}

// NewOutboxPruner returns a pruner of the outbox of the engine's store,
// which it prunes through the engine's WorkStore.
func NewOutboxPruner(e *Engine, cfg OutboxPrunerConfig) (*OutboxPruner, error) {
	if cfg.Retention < 0 || cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: outbox pruner: retention %s, interval %s and batch %d must not be negative",
			cfg.Retention, cfg.Interval, cfg.Batch)
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultOutboxRetention
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultOutboxPruneInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultOutboxPruneBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	p := &OutboxPruner{store: e.work, clock: e.clock, cfg: cfg, log: cfg.Logger,
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_outbox_pruned_events_total",
			Help: "Outbox events this process deleted past their retention, each with its deliveries and their attempts.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_outbox_prune_errors_total",
			Help: "Steps of the outbox's pruner that failed; the pass goes on at the next interval.",
		}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_outbox_prune_passes_total",
			Help: "Passes of the outbox's pruner that read the whole outbox.",
		}),
	}
	if reg := cfg.Registerer; reg != nil {
		for _, c := range []prometheus.Collector{p.pruned, p.errors, p.passes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// Config returns the pruner's settings, with their defaults.
func (p *OutboxPruner) Config() OutboxPrunerConfig { return p.cfg }

// RunOnce makes one pass over the whole outbox and returns how many events
// it deleted. It stops at the first error, and when ctx ends.
func (p *OutboxPruner) RunOnce(ctx context.Context) (int, error) {
	now := p.clock.Now()
	before := now.Add(-p.cfg.Retention)
	deleted, from, limit := 0, int64(0), p.cfg.Batch
	for {
		start := time.Now()
		got, err := p.store.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: before, Now: now, From: from, Limit: limit})
		if err != nil {
			p.errors.Inc()
			return deleted, err
		}
		deleted += got.Deleted
		p.pruned.Add(float64(got.Deleted))
		if from = got.Next; from == 0 {
			p.passes.Inc()
			return deleted, nil
		}
		took := time.Since(start)
		switch {
		case took < pruneStep/2 && limit < 8*p.cfg.Batch:
			limit *= 2
		case took > 2*pruneStep && limit > max(1, p.cfg.Batch/8):
			limit /= 2
		}
		rest := time.NewTimer(took)
		select {
		case <-ctx.Done():
			rest.Stop()
			return deleted, ctx.Err()
		case <-rest.C:
		}
	}
}

// Start runs a pass at once and then one every Interval after the last
// ended, until Stop or until ctx ends. Start on a running pruner does
// nothing.
func (p *OutboxPruner) Start(ctx context.Context) {
	p.bg.start(ctx, func(ctx context.Context) {
		every(ctx, p.cfg.Interval, func(ctx context.Context) {
			n, err := p.RunOnce(ctx)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				p.log.Error("outbox: pruning failed; the events stay, and the pruner tries again at the next interval", "err", err, "deleted", n,
					"interval", p.cfg.Interval.String())
			case n > 0:
				p.log.Info("outbox: pruned events past their retention", "deleted", n, "retention", p.cfg.Retention.String())
			}
		})
	})
}

// Stop stops the loop and waits for it. A step under way is cancelled and
// rolls back; its events stay for the next pass.
func (p *OutboxPruner) Stop() { p.bg.stop() }
