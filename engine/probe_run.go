package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// probeStock is how much of the probe's SKU the probe keeps available: it
// tops the stock up when probe orders that never closed hold it all.
const probeStock = 1000

// probeFailure is the failure of a step.
type probeFailure struct {
	step string
	err  error
}

func (f *probeFailure) Error() string { return f.step + ": " + f.err.Error() }

// run runs the probe of the interval now is in, every iv.
func (p *Prober) run(ctx context.Context, iv time.Duration) (*ProbeRun, error) {
	e := p.e
	ttl, bound := ProbeBounds(iv)
	start := e.clock.Now()
	run := &ProbeRun{OrderNo: lapse.ProbeOrderPrefix + strconv.FormatInt(start.Truncate(iv).UnixMilli(), 10), StartedAt: start}
	err := p.walk(ctx, run, start, ttl, bound)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if errors.Is(err, ErrProbeTaken) {
		return nil, err
	}
	run.FinishedAt, run.Result = e.clock.Now(), ProbeOK
	if f, ok := errors.AsType[*probeFailure](err); ok {
		run.Result, run.FailedStep, run.Error = ProbeFailed, f.step, f.err.Error()
	} else if err != nil {
		return nil, err
	}
	return run, nil
}

// walk takes run through the steps, appending each that succeeds; it
// returns the *probeFailure of the step that fails.
func (p *Prober) walk(ctx context.Context, run *ProbeRun, start time.Time, ttl, bound time.Duration) error {
	e := p.e
	step := func(name string, d time.Duration) {
		run.Steps = append(run.Steps, ProbeStep{Name: name, Seconds: max(0, d).Seconds()})
	}

	cctx, cancel := context.WithTimeout(ctx, bound)
	o, err := p.create(cctx, run.OrderNo, ttl)
	cancel()
	if err != nil {
		return err
	}
	if took := e.clock.Now().Sub(start); took > bound {
		return &probeFailure{ProbeStepCreate, fmt.Errorf("took %s, more than its bound of %s", took, bound)}
	}
	step(ProbeStepCreate, e.clock.Now().Sub(start))

	deadline := *o.DeadlineAt
	o, err = p.await(ctx, ProbeStepClose, deadline.Add(bound), func(ctx context.Context) (*lapse.Order, string, error) {
		got, err := e.store.OrderGet(ctx, o.OrderNo)
		if err != nil || got.State == p.flow.Initial {
			return nil, fmt.Sprintf("still %s %s after its deadline", p.flow.Initial, bound), err
		}
		return got, "", nil
	})
	if err != nil {
		return err
	}
	timeout := p.flow.State(p.flow.Initial).Deadline.Event
	if o.CloseReason != string(timeout) || !slices.Contains([]lapse.FiredBy{lapse.FiredByTimer, lapse.FiredBySweep, lapse.FiredByRedis}, o.FiredBy) {
		return &probeFailure{ProbeStepClose, fmt.Errorf("moved to %s by %s (%s), not by its deadline", o.State, o.FiredBy, o.CloseReason)}
	}
	closedAt := o.UpdatedAt
	step(ProbeStepClose, closedAt.Sub(deadline))

	released := e.clock.Now()
	if p.holds(o) {
		var at time.Time
		_, err = p.await(ctx, ProbeStepRelease, released.Add(bound), func(ctx context.Context) (*lapse.Order, string, error) {
			moves, err := e.store.StockMoveList(ctx, o.ID)
			if err != nil {
				return nil, "", err
			}
			for _, m := range moves {
				if m.Kind == lapse.StockRelease {
					at = m.CreatedAt
					return o, "", nil
				}
			}
			return nil, "its stock is still reserved " + bound.String() + " after the close" + p.pending(ctx, o, StockSubscriber), nil
		})
		if err != nil {
			return err
		}
		step(ProbeStepRelease, at.Sub(closedAt))
		released = e.clock.Now()
	}

	var last time.Time
	_, err = p.await(ctx, ProbeStepDeliver, released.Add(bound), func(ctx context.Context) (*lapse.Order, string, error) {
		ds, err := e.store.DeliveryList(ctx, o.ID)
		if err != nil {
			return nil, "", err
		}
		var waiting []string
		for _, d := range ds {
			switch {
			case d.Status == lapse.DeliveryDead:
				return nil, "", &probeFailure{ProbeStepDeliver, fmt.Errorf("its %s delivery to %s is dead: %s", d.EventType, d.Subscriber, d.LastError)}
			case d.Status != lapse.DeliveryDone || d.DoneAt == nil:
				waiting = append(waiting, describeDelivery(d))
			case d.DoneAt.After(last):
				last = *d.DoneAt
			}
		}
		// Events relayed without a delivery row (Subscription.Relay) are
		// delivered once their relay handed them over, which it does not
		// time: when the run sees that stands for it.
		relayed, err := e.relayedDeliveries(ctx, o.ID, nil)
		if err != nil {
			return nil, "", err
		}
		for _, h := range relayed {
			if h.Status != lapse.DeliveryDone {
				waiting = append(waiting, h.EventType+" to "+h.Subscriber+" not yet handed over by its relay")
			} else if now := e.clock.Now(); now.After(last) {
				last = now
			}
		}
		if len(waiting) > 0 {
			return nil, "not delivered " + bound.String() + " after the release: " + strings.Join(waiting, "; "), nil
		}
		return o, "", nil
	})
	if err != nil {
		return err
	}
	step(ProbeStepDeliver, last.Sub(closedAt))
	return nil
}

// create creates the probe's order, with the stock it reserves.
func (p *Prober) create(ctx context.Context, orderNo string, ttl time.Duration) (*lapse.Order, error) {
	e := p.e
	fail := func(err error) (*lapse.Order, error) { return nil, &probeFailure{ProbeStepCreate, err} }
	if e.feat.stock.serves(p.flow) {
		st, err := e.Stock(ctx, p.cfg.SKU)
		if err != nil && !errors.Is(err, lapse.ErrStockNotFound) {
			return fail(err)
		}
		if st == nil || st.Available() < 1 {
			var reserved int64
			if st != nil {
				reserved = st.Reserved
			}
			if _, err := e.SetStock(ctx, p.cfg.SKU, reserved+probeStock); err != nil {
				return fail(fmt.Errorf("setting up the stock of %s: %w", p.cfg.SKU, err))
			}
		}
	}
	req := &lapse.OrderCreate{OrderNo: orderNo, Flow: p.flow.Name, UserID: "lapse-probe", Currency: "XXX", TTL: ttl,
		Metadata: json.RawMessage(`{"lapse_probe":true}`)}
	if p.flow.Holds {
		req.Items = []lapse.Item{{SKU: p.cfg.SKU, Qty: 1}}
	}
	o, created, err := e.createOrder(ctx, req, Actor{FiredBy: lapse.FiredByApp, Name: "probe"})
	switch {
	case errors.Is(err, lapse.ErrOrderExists), err == nil && !created:
		return nil, ErrProbeTaken
	case err != nil:
		return fail(err)
	case o.DeadlineAt == nil:
		return fail(errors.New("created without a deadline"))
	}
	return o, nil
}

// holds reports whether o holds stock of the built-in ledger.
func (p *Prober) holds(o *lapse.Order) bool {
	return p.e.feat.stock.serves(p.flow) && p.e.feat.stock.holds(o)
}

// await calls check every Poll until it returns an order, and fails step
// with check's reason once the engine's clock is past by. An error of check
// ends the wait: a *probeFailure as it is, another one as step's failure
// once by has passed (the database may come back meanwhile).
func (p *Prober) await(ctx context.Context, step string, by time.Time, check func(ctx context.Context) (*lapse.Order, string, error)) (*lapse.Order, error) {
	poll := p.cfg.Poll
	if poll <= 0 {
		poll = min(max(p.Interval()/50, 10*time.Millisecond), 250*time.Millisecond)
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(poll, time.Second))
		o, reason, err := check(cctx)
		cancel()
		if f, ok := errors.AsType[*probeFailure](err); ok {
			return nil, f
		}
		if o != nil {
			return o, nil
		}
		if p.e.clock.Now().After(by) {
			if err != nil {
				return nil, &probeFailure{step, err}
			}
			return nil, &probeFailure{step, errors.New(reason)}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// pending says how o's delivery to subscriber stands, for a failure.
func (p *Prober) pending(ctx context.Context, o *lapse.Order, subscriber string) string {
	ds, err := p.e.store.DeliveryList(ctx, o.ID)
	if err != nil {
		return ""
	}
	var out []string
	for _, d := range ds {
		if d.Subscriber == subscriber && d.Status != lapse.DeliveryDone {
			out = append(out, describeDelivery(d))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, "; ")
}

func describeDelivery(d *lapse.Delivery) string {
	s := fmt.Sprintf("%s to %s %s after %d attempts", d.EventType, d.Subscriber, d.Status, d.Attempts)
	if d.LastError != "" {
		s += " (" + d.LastError + ")"
	}
	return s
}
