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

// DefaultAuditSealInterval is AuditSealerConfig.Interval's default.
const DefaultAuditSealInterval = 250 * time.Millisecond

// AuditSealerConfig configures an AuditSealer. Zero values take the
// defaults noted.
type AuditSealerConfig struct {
	// Interval is the pause between passes. A row waits up to about this
	// long (more under a backlog) for its seal, and until then the chain
	// does not cover it: an edit of it is not found. Default 250ms.
	Interval time.Duration
	// Batch is how many rows one transaction seals. Default
	// lapse.DefaultAuditSealBatch.
	Batch int
	// StopTimeout is how long Stop lets a pass under way finish before it
	// cancels it. Default 5s.
	StopTimeout time.Duration
	// Logger receives the sealer's errors. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the sealer's metrics. Default: none.
	Registerer prometheus.Registerer
}

// AuditSealer seals the audit log behind the writes (lapse.AuditSeal): an
// audited write appends its row unsealed, with its effect, and the sealer
// numbers and chains the rows that have committed, every Interval. Any
// number of sealers, in any number of processes, may run on one database:
// they take turns at the log's head, and one that finds it taken skips its
// pass. A row is sealed once, in the order rows were sealed, which is the
// chain's order.
type AuditSealer struct {
	store lapse.Store
	cfg   AuditSealerConfig
	log   *slog.Logger

	sealed prometheus.Counter
	errors prometheus.Counter

	mu         sync.Mutex
	running    bool
	loopCancel context.CancelFunc
	workCancel context.CancelFunc
	done       chan struct{}
}

// NewAuditSealer returns a sealer of store's audit log; store must also be
// a lapse.AccessStore (all built-in stores are).
func NewAuditSealer(store lapse.Store, cfg AuditSealerConfig) (*AuditSealer, error) {
	if _, ok := store.(lapse.AccessStore); !ok {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: the store %T keeps no audit log", store)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultAuditSealInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = lapse.DefaultAuditSealBatch
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	s := &AuditSealer{store: store, cfg: cfg, log: cfg.Logger,
		sealed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_audit_sealed_rows_total",
			Help: "Audit log rows this process sealed (numbered and chained by hash).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lapse_audit_seal_errors_total",
			Help: "Failed passes of the audit log's sealer.",
		}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if reg := cfg.Registerer; reg != nil {
		as := store.(lapse.AccessStore)
		unsealed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lapse_audit_unsealed_rows",
			Help: "Audit log rows committed but not sealed yet, which the chain does not cover (-1 when the database did not answer).",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, _, err := as.AuditUnsealedCount(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		})
		for _, c := range []prometheus.Collector{s.sealed, s.errors, unsealed} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Config returns the sealer's settings, with their defaults.
func (s *AuditSealer) Config() AuditSealerConfig { return s.cfg }

// Start runs a pass every Interval until Stop or until ctx ends. Start on
// a running sealer does nothing.
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
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	failing := false // logged once per run of failures, not every pass
	for loopCtx.Err() == nil {
		_, err := s.RunOnce(workCtx)
		switch {
		case errors.Is(err, lapse.ErrAuditBusy), workCtx.Err() != nil:
		case err != nil && !failing:
			failing = true
			s.log.Error("audit: sealing failed; the rows stay unsealed, and the sealer tries again every interval", "err", err)
		case err == nil && failing:
			failing = false
			s.log.Info("audit: sealing works again")
		}
		select {
		case <-loopCtx.Done():
		case <-t.C:
		}
	}
}
