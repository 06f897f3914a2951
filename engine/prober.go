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

// Defaults and limits of ProberConfig.
const (
	DefaultProbeInterval = time.Minute
	// MinProbeInterval is the shortest interval between probe runs: the
	// probe's deadline and the bounds of its steps are parts of it.
	MinProbeInterval = time.Second
	DefaultProbeFlow = "checkout"
	DefaultProbeSKU  = "lapse-probe"
	// probeHistory is how many runs Runs keeps.
	probeHistory = 20
)

// Results of a probe run.
const (
	ProbeOK     = "ok"
	ProbeFailed = "failed"
)

// The steps of a probe run, in the order it takes them: the probe's order
// is created (its stock reserved), closed by the deadline engine at its
// deadline, its stock released by the stock ledger, and its events
// delivered to every subscriber.
const (
	ProbeStepCreate  = "create"
	ProbeStepClose   = "close"
	ProbeStepRelease = "release"
	ProbeStepDeliver = "deliver"
)

// probeSteps are the steps of a run, in order.
var probeSteps = []string{ProbeStepCreate, ProbeStepClose, ProbeStepRelease, ProbeStepDeliver}

// ErrProbeTaken is returned by Prober.RunOnce when another process (or an
// earlier run of this one) has this interval's probe order: each interval
// has one probe, whichever process creates its order first.
var ErrProbeTaken = errors.New("engine: this interval's probe is another run's")

// ProberConfig configures a Prober. Zero values take the defaults noted.
type ProberConfig struct {
	// Interval is the time between runs, each at a multiple of it: 0 runs
	// none until SetInterval, otherwise at least MinProbeInterval. A run
	// finishes or fails within Interval (see ProbeRun).
	Interval time.Duration
	// Flow is the flow of the probe's orders; its initial state must have a
	// deadline. Default "checkout".
	Flow string
	// SKU is what the probe's order reserves, whose stock the probe sets
	// up itself. Default DefaultProbeSKU.
	SKU string
	// Poll is how often a run looks at its order while it waits for a
	// step. Default: a fiftieth of the interval, within 10ms and 250ms.
	Poll time.Duration
	// Notify, when set, is told of every failed run (the admins' channel).
	// It is called outside the database, so that it works when the
	// delivery path is what failed; its error is logged.
	Notify func(ctx context.Context, run ProbeRun) error
	// Logger receives the failures. Default: the engine's.
	Logger *slog.Logger
	// Registerer receives the probe's metrics. Default: none.
	Registerer prometheus.Registerer
}

// ProbeRun is one run of the probe. Each step has a bound derived from the
// interval (ProbeBounds): creating takes at most Bound; the order closes by
// its deadline plus Bound; its stock is released, and then every delivery of
// its events done, each within Bound of the step before. A run is thus over
// by Bound before the next one starts.
type ProbeRun struct {
	OrderNo    string      `json:"order_no"`
	StartedAt  time.Time   `json:"started_at"`
	FinishedAt time.Time   `json:"finished_at"`
	Result     string      `json:"result"` // ProbeOK or ProbeFailed
	FailedStep string      `json:"failed_step,omitempty"`
	Error      string      `json:"error,omitempty"`
	Steps      []ProbeStep `json:"steps"` // the steps that succeeded, in order
}

// ProbeStep is a step a run got through, and how long it took, by the times
// the database recorded where it has them: creating, from the start of the
// run; closing, from the order's deadline (its close lag); releasing and
// delivering, from the close.
type ProbeStep struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// ProbeBounds returns the timing of runs every interval: the TTL of the
// probe's order (a quarter of the interval, at most 5s) and the bound of
// each step (a fifth of what the TTL leaves).
func ProbeBounds(interval time.Duration) (ttl, bound time.Duration) {
	ttl = min(5*time.Second, interval/4)
	return ttl, (interval - ttl) / 5
}

// Prober runs the synthetic probe: every interval, an order that walks the
// whole chain of its flow's deadline (created through the engine with stock
// reserved, closed by the deadline engine, stock released, events
// delivered), timed step by step. Probe orders have order numbers with
// lapse.ProbeOrderPrefix and the slot of their interval; the database's
// unique order number makes one process the probe's in each interval,
// however many run a Prober on one database.
type Prober struct {
	e    *Engine
	cfg  ProberConfig
	flow *lapse.Flow
	log  *slog.Logger

	lastSuccess prometheus.Gauge
	stepSeconds *prometheus.HistogramVec
	failures    *prometheus.CounterVec
	runsTotal   *prometheus.CounterVec

	mu       sync.Mutex
	interval time.Duration
	runs     []ProbeRun // newest last
	reset    chan struct{}
	running  bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewProber returns a Prober of e. Errors: EINVALID for an interval below
// MinProbeInterval, or a flow that e does not run or whose initial state
// has no deadline.
func NewProber(e *Engine, cfg ProberConfig) (*Prober, error) {
	if err := checkProbeInterval(cfg.Interval); err != nil {
		return nil, err
	}
	if cfg.Flow == "" {
		cfg.Flow = DefaultProbeFlow
	}
	flow := e.flows.get(cfg.Flow)
	if flow == nil {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: probe: no flow %q", cfg.Flow)
	}
	if flow.State(flow.Initial).Deadline == nil {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: probe: flow %s starts in %s, which has no deadline", flow.Name, flow.Initial)
	}
	if cfg.SKU == "" {
		cfg.SKU = DefaultProbeSKU
	}
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	p := &Prober{e: e, cfg: cfg, flow: flow, log: cfg.Logger, interval: cfg.Interval, reset: make(chan struct{}, 1),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lapse_probe_last_success_timestamp_seconds",
			Help: "When the last probe run of this process succeeded (Unix seconds; 0: none has yet).",
		}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lapse_probe_step_seconds",
			Help:    "Time each step of successful probe runs took: create from the run's start, close from the deadline, release and deliver from the close.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"step"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_probe_failures_total",
			Help: "Probe runs that failed, by the step that failed.",
		}, []string{"step"}),
		runsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_probe_runs_total",
			Help: "Probe runs of this process, by result (ok, failed).",
		}, []string{"result"}),
	}
	// Every series exists from the start, at zero, so that alerts on
	// their increase see the first failure.
	for _, s := range probeSteps {
		p.failures.WithLabelValues(s)
		p.stepSeconds.WithLabelValues(s)
	}
	p.runsTotal.WithLabelValues(ProbeOK)
	p.runsTotal.WithLabelValues(ProbeFailed)
	// The interval as it is now (0: off), so that an alert on a stale
	// probe scales with it and stays silent while it is off.
	interval := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lapse_probe_interval_seconds",
		Help: "Time between probe runs, as configured now (0: the probe is off).",
	}, func() float64 { return p.Interval().Seconds() })
	if reg := cfg.Registerer; reg != nil {
		for _, c := range []prometheus.Collector{p.lastSuccess, p.stepSeconds, p.failures, p.runsTotal, interval} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func checkProbeInterval(d time.Duration) error {
	if d != 0 && d < MinProbeInterval {
		return lapse.Errorf(lapse.EINVALID, "engine: probe interval %s: 0 (off) or at least %s", d, MinProbeInterval)
	}
	return nil
}

// Interval returns the time between runs; 0 when the probe is off.
func (p *Prober) Interval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.interval
}

// SetInterval changes the time between runs (a configuration reload), from
// the next run on; 0 stops the runs. It returns EINVALID, changing nothing,
// for an interval below MinProbeInterval.
func (p *Prober) SetInterval(d time.Duration) error {
	if err := checkProbeInterval(d); err != nil {
		return err
	}
	p.mu.Lock()
	p.interval = d
	p.mu.Unlock()
	select {
	case p.reset <- struct{}{}:
	default:
	}
	return nil
}

// Runs returns the last runs of this process, newest first.
func (p *Prober) Runs() []ProbeRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ProbeRun, 0, len(p.runs))
	for i := len(p.runs) - 1; i >= 0; i-- {
		out = append(out, p.runs[i])
	}
	return out
}

// Start runs the probe at every multiple of the interval until Stop or
// until ctx ends. Start on a running Prober does nothing.
func (p *Prober) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	p.running, p.cancel, p.done = true, cancel, make(chan struct{})
	go p.loop(ctx, p.done)
}

// Stop stops the runs and waits for the one under way, which ends failed
// at once unless it has finished: it is not the system's failure, and is
// neither recorded nor told.
func (p *Prober) Stop() {
	p.mu.Lock()
	if !p.running {
		p.mu.Unlock()
		return
	}
	p.running = false
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	cancel()
	<-done
}

func (p *Prober) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Stop()
		var due <-chan time.Time // none while the probe is off
		if iv := p.Interval(); iv > 0 {
			now := p.e.clock.Now()
			timer.Reset(now.Truncate(iv).Add(iv).Sub(now))
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-p.reset:
			continue
		case <-due:
		}
		if _, err := p.RunOnce(ctx); err != nil && !errors.Is(err, ErrProbeTaken) && ctx.Err() == nil {
			p.log.Error("probe: cannot run", "err", err)
		}
	}
}

// RunOnce runs the probe of the current interval and returns the run, as
// it is recorded (Runs), counted in the metrics, and, when failed, logged
// and told to Notify. It returns ErrProbeTaken, recording nothing, when the
// interval's probe order exists already; an EINVALID error when the probe
// is off; and ctx's error, recording nothing, when ctx ends first.
func (p *Prober) RunOnce(ctx context.Context) (*ProbeRun, error) {
	iv := p.Interval()
	if iv == 0 {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: probe: off (interval 0)")
	}
	run, err := p.run(ctx, iv)
	if err != nil {
		return nil, err
	}
	p.record(ctx, run, iv)
	return run, nil
}

// record keeps run in the history and the metrics, and tells of a failure.
// The run shows in Runs last, once it is counted and logged: whoever sees
// it there finds it in the metrics and the log as well.
func (p *Prober) record(ctx context.Context, run *ProbeRun, iv time.Duration) {
	p.runsTotal.WithLabelValues(run.Result).Inc()
	if run.Result == ProbeOK {
		for _, s := range run.Steps {
			p.stepSeconds.WithLabelValues(s.Name).Observe(s.Seconds)
		}
		p.lastSuccess.Set(float64(run.FinishedAt.UnixMicro()) / 1e6)
	} else {
		p.failures.WithLabelValues(run.FailedStep).Inc()
		p.log.Error("probe failed", "step", run.FailedStep, "reason", run.Error, "order", run.OrderNo)
	}
	p.mu.Lock()
	p.runs = append(p.runs, *run)
	if len(p.runs) > probeHistory {
		p.runs = p.runs[len(p.runs)-probeHistory:]
	}
	p.mu.Unlock()
	if run.Result == ProbeOK || p.cfg.Notify == nil {
		return
	}
	_, bound := ProbeBounds(iv)
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(bound, 5*time.Second))
	defer cancel()
	if err := p.cfg.Notify(nctx, *run); err != nil {
		p.log.Warn("probe: the admins could not be told of the failure", "step", run.FailedStep, "err", err)
	}
}
