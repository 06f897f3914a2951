package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// Defaults of AuditSealerConfig.
const (
	DefaultAuditSealInterval     = 250 * time.Millisecond
	DefaultAuditSealIdleInterval = 5 * time.Second
)

// AuditSealerConfig configures an AuditSealer. Zero values take the
// defaults noted.
type AuditSealerConfig struct {
	// Interval is how soon a row the engine commits is sealed: the pause
	// between passes while rows keep coming, and the least time between
	// two passes (rows that come meanwhile are sealed together). Until its
	// seal the chain does not cover a row: an edit of it is not found.
	// Default 250ms.
	Interval time.Duration
	// IdleInterval is the pause after a pass that found nothing to seal,
	// which costs one query. Rows the engine commits wake the sealer
	// meanwhile, and are sealed within Interval; others (those package
	// access appends, or another process without a sealer, as the command
	// line) wait up to this long while nothing else comes. Default 5s.
	IdleInterval time.Duration
	// Batch is how many rows one transaction seals. Default
	// lapse.DefaultAuditSealBatch.
	Batch int
	// StopTimeout is how long Stop lets a pass under way finish before it
	// cancels it. Default 5s.
	StopTimeout time.Duration
	// Logger receives the sealer's errors. Default: the engine's.
	Logger *slog.Logger
	// Registerer receives the sealer's metrics. Default: none.
	Registerer prometheus.Registerer
}

// AuditSealer seals the audit log behind the writes (lapse.AuditSeal): an
// audited write appends its row unsealed, with its effect, and the sealer
// numbers and chains the rows that have committed, within Interval of the
// engine's commit of one. Any number of sealers, in any number of
// processes, may run on one database: they take turns at the log's head,
// and one that finds it taken skips its pass. A row is sealed once, in the
// order rows were sealed, which is the chain's order.
type AuditSealer struct {
	store lapse.Store
	cfg   AuditSealerConfig
	log   *slog.Logger
	wake  *broadcast // the engine's: a row committed

	sealed prometheus.Counter
	errors prometheus.Counter

	mu         sync.Mutex
	running    bool
	loopCancel context.CancelFunc
	workCancel context.CancelFunc
	done       chan struct{}
}

// NewAuditSealer returns a sealer of the audit log of the engine's store,
// which it seals through the engine's WorkStore; that store must be a
// lapse.AccessStore (all built-in stores are), or it is an EINVALID error.
// The Logger of cfg defaults to the engine's.
func NewAuditSealer(e *Engine, cfg AuditSealerConfig) (*AuditSealer, error) {
	store := e.work
	if c, ok := store.(checked); ok {
		store = c.Store // AuditSeal's transactions must be AccessStores
	}
	if _, ok := store.(lapse.AccessStore); !ok {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: the store %T keeps no audit log", store)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultAuditSealInterval
	}
	if cfg.IdleInterval <= 0 {
		cfg.IdleInterval = DefaultAuditSealIdleInterval
	}
	cfg.IdleInterval = max(cfg.IdleInterval, cfg.Interval)
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	if cfg.Batch <= 0 {
		cfg.Batch = lapse.DefaultAuditSealBatch
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	s := &AuditSealer{store: store, cfg: cfg, log: cfg.Logger, wake: &e.sealed,
		sealed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_audit_sealed_rows_total",
			Help: "Audit log rows this process sealed (numbered and chained by hash).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_audit_seal_errors_total",
			Help: "Failed passes of the audit log's sealer.",
		}),
	}
	if reg := cfg.Registerer; reg != nil {
		as, clock := store.(lapse.AccessStore), e.clock
		count := func() (int64, time.Time, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return as.AuditUnsealedCount(ctx)
		}
		unsealed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lapse_audit_unsealed_rows",
			Help: "Audit log rows committed but not sealed yet, which the chain does not cover (-1 when the database did not answer).",
		}, func() float64 {
			n, _, err := count()
			if err != nil {
				return -1
			}
			return float64(n)
		})
		oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lapse_audit_unsealed_oldest_seconds",
			Help: "How long the oldest audit log row not sealed yet has waited for its seal; 0 when none waits (-1 when the database did not answer). A sealer that stopped shows here.",
		}, func() float64 {
			n, at, err := count()
			if err != nil {
				return -1
			}
			return lapse.AuditCheck{Unsealed: n, OldestUnsealed: at}.UnsealedAge(clock.Now()).Seconds()
		})
		for _, c := range []prometheus.Collector{s.sealed, s.errors, unsealed, oldest} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Config returns the sealer's settings, with their defaults.
func (s *AuditSealer) Config() AuditSealerConfig { return s.cfg }

// Start runs passes, within Interval of the engine's commit of a row and
// at least every IdleInterval, until Stop or until ctx ends. Start on a
// running sealer does nothing.
func (s *AuditSealer) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	loopCtx, loopCancel := context.WithCancel(ctx)
	// Passes run on their own context, so that Stop lets one commit: a
	// pass cut short on PostgreSQL or MySQL may hold the head until the
	// server notices its connection closed.
	workCtx, workCancel := context.WithCancel(context.WithoutCancel(ctx))
	s.running, s.loopCancel, s.workCancel, s.done = true, loopCancel, workCancel, make(chan struct{})
	go func() {
		s.loop(loopCtx, workCtx, s.done)
		workCancel()
	}()
}

// Stop stops the loop and waits for it. A pass under way finishes, for up
// to StopTimeout; after that it is cancelled and rolls back, and its rows
// stay unsealed for the next sealer, which loses nothing.
func (s *AuditSealer) Stop() {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	s.running = false
	loopCancel, workCancel, done := s.loopCancel, s.workCancel, s.done
	s.mu.Unlock()
	loopCancel()
	select {
	case <-done:
	case <-time.After(s.cfg.StopTimeout):
		workCancel()
		<-done
	}
}

// RunOnce seals every row that has committed unsealed, batch after batch,
// and returns how many it sealed. When another sealer holds the log's head
// it returns at once, with lapse.ErrAuditBusy.
func (s *AuditSealer) RunOnce(ctx context.Context) (int, error) {
	n, err := lapse.AuditSeal(ctx, s.store, s.cfg.Batch)
	s.sealed.Add(float64(n))
	if err != nil && !errors.Is(err, lapse.ErrAuditBusy) {
		s.errors.Inc()
	}
	return n, err
}

func (s *AuditSealer) loop(loopCtx, workCtx context.Context, done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(s.cfg.Interval)
	defer timer.Stop()
	failing := false // logged once per run of failures, not every pass
	for loopCtx.Err() == nil {
		woken := s.wake.wait() // before the pass: a row committed during it wakes the next
		last := time.Now()
		n, err := s.RunOnce(workCtx)
		switch {
		case errors.Is(err, lapse.ErrAuditBusy), workCtx.Err() != nil:
		case err != nil && !failing:
			failing = true
			s.log.Error("audit: sealing failed; the rows stay unsealed, and the sealer tries again every interval", "err", err)
		case err == nil && failing:
			failing = false
			s.log.Info("audit: sealing works again")
		}
		pause := s.cfg.IdleInterval
		if n > 0 || err != nil {
			pause = s.cfg.Interval
		}
		timer.Reset(pause)
		select {
		case <-loopCtx.Done():
			return
		case <-timer.C:
			continue
		case <-woken:
		}
		// A row committed: seal it, and those that come with it, once
		// Interval has passed since the last pass.
		timer.Stop()
		timer.Reset(max(0, s.cfg.Interval-time.Since(last)))
		select {
		case <-loopCtx.Done():
			return
		case <-timer.C:
		}
	}
}
