package burndown

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// workload lays out the orders of a run: due orders interleaved with those
// not due (one due, then ratio not due, …), as a live table mixes them.
type workload struct {
	due, ratio int
	// at is the instant the run starts, by the engine's clock: the due
	// deadlines end just before it, and the orders were created a payment
	// window before it.
	at time.Time
}

// Order numbers of the due orders and of the others.
const (
	duePrefix   = "bd-due-"
	laterPrefix = "bd-later-"
)

func (w *workload) total() int { return w.due * (w.ratio + 1) }

// dueDeadline is the deadline of due order i: 1 µs apart, the last 1 µs
// before the run starts.
func (w *workload) dueDeadline(i int) time.Time {
	return w.at.Add(-time.Duration(w.due-i) * time.Microsecond)
}

// laterDeadline is the deadline of not-due order j: a day after the run
// starts, 1 ms apart.
func (w *workload) laterDeadline(j int) time.Time {
	return w.at.Add(24*time.Hour + time.Duration(j)*time.Millisecond)
}

// dueIndex returns i of due order orderNo, and false for any other order.
func (w *workload) dueIndex(orderNo string) (int, bool) {
	rest, ok := strings.CutPrefix(orderNo, duePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0 && i < w.due
}

// params returns order k of the load, in order, as the engine's create
// writes it: the UNPAID order, its creation log row and its order.created
// event (which no benchmark subscriber receives).
func (w *workload) params(k int) *lapse.OrderCreateParams {
	var no string
	var deadline time.Time
	if k%(w.ratio+1) == 0 {
		i := k / (w.ratio + 1)
		no, deadline = fmt.Sprintf("%s%09d", duePrefix, i), w.dueDeadline(i)
	} else {
		j := k - k/(w.ratio+1) - 1
		no, deadline = fmt.Sprintf("%s%09d", laterPrefix, j), w.laterDeadline(j)
	}
	created := w.at.Add(-flows.CheckoutPaymentWindow)
	req := &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: "u" + strconv.Itoa(k%1000),
		Amount: 1999, Currency: "CNY", Items: []lapse.Item{{SKU: "sku-1", Qty: 1}}}
	o := &lapse.Order{OrderNo: no, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &deadline, Amount: req.Amount,
		Currency: req.Currency, UserID: req.UserID, Items: req.Items, Version: 1, CreatedAt: created, UpdatedAt: created,
		FiredBy: lapse.FiredByAPI, RequestHash: req.Fingerprint()}
	return &lapse.OrderCreateParams{
		Order: o,
		Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByAPI,
			Actor: "bench", Reason: "created", CreatedAt: created},
		Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)},
	}
}

// load writes the workload in chunks of chunk orders, loaders chunks at
// a time, telling progress (under a lock) after each chunk.
func (w *workload) load(ctx context.Context, s lapse.Store, chunk, loaders int, progress func(Progress)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	total := w.total()
	var (
		next  atomic.Int64 // the first order of the next chunk
		mu    sync.Mutex
		done  int
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for range loaders {
		wg.Go(func() {
			ps := make([]*lapse.OrderCreateParams, 0, chunk)
			for ctx.Err() == nil {
				start := int(next.Add(int64(chunk))) - chunk
				if start >= total {
					return
				}
				ps = ps[:0]
				for k := start; k < min(start+chunk, total); k++ {
					ps = append(ps, w.params(k))
				}
				if err := s.OrderCreateMany(ctx, ps); err != nil {
					fail(fmt.Errorf("burndown: load orders %d to %d: %w", start, start+len(ps)-1, err))
					return
				}
				mu.Lock()
				done += len(ps)
				if progress != nil {
					progress(Progress{Phase: PhaseLoad, Done: done, Total: total})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}
