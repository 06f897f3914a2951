package burndown

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// Run loads the workload of cfg into s, which must be migrated and hold no
// orders, and burns it down with the deadline engine (see the package
// doc). It returns an error when loading or closing fails, or when what it
// reads back is not every due order closed and none of the others; a
// cancelled ctx stops it as soon as the step under way lets go.
func Run(ctx context.Context, s lapse.Store, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := &workload{due: cfg.Orders, ratio: cfg.NotDue, at: lapse.SystemClock{}.Now()}
	res := &Result{Orders: cfg.Orders, NotDue: cfg.NotDue, Subscribers: cfg.Subscribers, Batch: cfg.Batch,
		Workers: cfg.Workers, WALBytes: -1, CPU: CPU{Server: -1}}

	var pg *pgServer
	if cfg.Postgres != "" {
		var err error
		if pg, err = openPostgres(ctx, cfg.Postgres); err != nil {
			return nil, err
		}
		defer pg.close()
		if res.Settings, err = pg.settings(ctx); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	if err := w.load(ctx, s, cfg.Chunk, cfg.Loaders, cfg.Progress); err != nil {
		return nil, err
	}
	if pg != nil {
		if err := pg.vacuum(ctx); err != nil {
			return nil, err
		}
	}
	res.Loaded, res.Load = w.total(), time.Since(start)

	clock := &runClock{}
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clock, Logger: cfg.Logger, Subscriptions: subscriptions(cfg.Subscribers)})
	if err != nil {
		return nil, err
	}
	claimer := engine.NewClaimer(e, engine.ClaimerConfig{Batch: cfg.Batch, Workers: cfg.Workers})
	var lsn string
	if pg != nil {
		if lsn, err = pg.walLSN(ctx); err != nil {
			return nil, err
		}
	}
	var meterConn *pgx.Conn
	if pg != nil {
		meterConn = pg.conn
	}
	meter := NewCPUMeter(meterConn)
	if err := meter.Start(ctx); err != nil {
		return nil, err
	}
	stop := watch(e, cfg.Orders, cfg.Progress)
	clock.startAt(w.at)
	start = time.Now()
	fired, err := claimer.RunOnce(ctx)
	res.Elapsed = time.Since(start)
	stop()
	if cpu, merr := meter.Stop(ctx); merr == nil {
		res.CPU = cpu
	} else if err == nil {
		return nil, merr
	}
	if err != nil {
		return nil, fmt.Errorf("burndown: closed %d of %d orders, then: %w", fired, cfg.Orders, err)
	}
	res.Closed = fired
	if cfg.Progress != nil {
		cfg.Progress(Progress{Phase: PhaseClose, Done: fired, Total: cfg.Orders})
	}
	if pg != nil {
		if res.WALBytes, err = pg.walSince(ctx, lsn); err != nil {
			return nil, err
		}
	}

	lags, err := w.readBack(ctx, s)
	if err != nil {
		return nil, err
	}
	if fired != cfg.Orders || len(lags) != cfg.Orders {
		return nil, fmt.Errorf("burndown: the engine fired %d and %d are closed, of %d due", fired, len(lags), cfg.Orders)
	}
	res.Lag = lagOf(lags)
	return res, nil
}

// watch tells progress how many orders e has closed, every 200 ms, until
// the function it returns is called.
func watch(e *engine.Engine, total int, progress func(Progress)) (stop func()) {
	if progress == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				progress(Progress{Phase: PhaseClose, Done: int(e.CloseLag(engine.LagWindow).Count), Total: total})
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// readBack returns the close lag (closed_at − deadline_at) of every closed
// checkout order, and an error if one of them was not due.
func (w *workload) readBack(ctx context.Context, s lapse.Store) ([]time.Duration, error) {
	const page = 5000
	lags := make([]time.Duration, 0, w.due)
	p := &lapse.OrderListParams{State: flows.Closed, Flow: "checkout", Limit: page}
	for {
		got, err := s.OrderList(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("burndown: read the closed orders back: %w", err)
		}
		for _, o := range got {
			i, due := w.dueIndex(o.OrderNo)
			if !due || o.ClosedAt == nil {
				return nil, fmt.Errorf("burndown: order %s is %s (closed at %v) but was not due", o.OrderNo, o.State, o.ClosedAt)
			}
			lags = append(lags, o.ClosedAt.Sub(w.dueDeadline(i)))
		}
		if len(got) < page {
			return lags, nil
		}
		last := got[len(got)-1]
		p.Before = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// subscriptions returns n subscribers of order.closed that take every
// delivery and do nothing; no deliverer runs in a burn-down, so they only
// make each close write n pending deliveries.
func subscriptions(n int) []engine.Subscription {
	var out []engine.Subscription
	for i := range n {
		out = append(out, engine.Subscription{Name: "bench-" + strconv.Itoa(i+1), Events: []string{flows.EventOrderClosed}, Handler: discard{}})
	}
	return out
}

// discard is a lapse.Handler that takes every delivery.
type discard struct{}

func (discard) Deliver(context.Context, *lapse.Delivery) error { return nil }
