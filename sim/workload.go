package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// action is one kind of step, with its weight in the draw.
type action struct {
	name   string
	weight int
	do     func(w *world)
}

var actions = []action{
	{"create checkout", 14, (*world).createCheckout},
	{"create membership", 4, (*world).createMembership},
	{"create group", 3, (*world).createGroup},
	{"submit membership", 3, (*world).submit},
	{"join group", 6, (*world).join},
	{"start payment", 6, (*world).startPayment},
	{"customer pays", 12, (*world).customerPays},
	{"cancel", 4, (*world).cancel},
	{"extend deadline", 5, (*world).extend},
	{"shorten deadline", 3, (*world).shorten},
	{"refund", 4, (*world).refund},
	{"advance clock", 14, (*world).advance},
	{"run claimer", 8, (*world).claim},
	{"run shared trigger", 8, (*world).runTrigger},
	{"redis fault", 2, (*world).redisFault},
	{"run deliverer", 10, (*world).deliver},
	{"send callbacks", 10, (*world).sendCallbacks},
	{"crash mid-pass", 2, (*world).crashMidPass},
	{"operator acts", 8, (*world).operate},
	{"run audit sealer", 2, (*world).sealAudit},
}

var totalWeight = func() int {
	n := 0
	for _, a := range actions {
		n += a.weight
	}
	return n
}()

// act draws one action and does it.
func (w *world) act() {
	r := w.rng.IntN(totalWeight)
	for _, a := range actions {
		if r < a.weight {
			w.logf("step %d (%s, process %d): %s", w.step, w.clock.Now().Format("15:04:05.000"), w.proc.n, a.name)
			a.do(w)
			return
		}
		r -= a.weight
	}
}

// outcome logs what an engine call answered.
func (w *world) outcome(what string, err error) {
	if err != nil {
		w.logf("  %s: %v", what, err)
	} else {
		w.logf("  %s: ok", what)
	}
}

// pick returns one of the last few orders of the flows named (any flow
// when none), or nil.
func (w *world) pick(flowNames ...string) *simOrder {
	var cands []*simOrder
	for i := len(w.orders) - 1; i >= 0 && len(cands) < 12; i-- {
		o := w.orders[i]
		if len(flowNames) == 0 || contains(flowNames, o.flow) {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.rng.IntN(len(cands))]
}

// pickIn is pick that, four times in five, picks among the orders that are
// in one of states (as the last audit found them), so that customers mostly
// act on orders that can take the action, and sometimes on any.
func (w *world) pickIn(states []lapse.State, flowNames ...string) *simOrder {
	if w.rng.IntN(5) == 0 {
		return w.pick(flowNames...)
	}
	var cands []*simOrder
	for i := len(w.orders) - 1; i >= 0 && len(cands) < 12; i-- {
		o := w.orders[i]
		if len(flowNames) > 0 && !contains(flowNames, o.flow) {
			continue
		}
		if st, ok := w.states[o.no]; ok && slices.Contains(states, st) {
			cands = append(cands, o)
		}
	}
	if len(cands) == 0 {
		return w.pick(flowNames...)
	}
	return cands[w.rng.IntN(len(cands))]
}

// States in which customers act.
var (
	payable    = []lapse.State{flows.Unpaid, flows.WaitPay}
	refundable = []lapse.State{flows.Paid, flows.Issued, flows.Compensating, flows.ManualReview}
	open       = []lapse.State{flows.Unpaid, flows.WaitPay, flows.PreOrder, flows.GroupOpen}
)

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (w *world) user() string { return fmt.Sprintf("u%d", w.rng.IntN(users)) }

// create creates an order and, when the answer was an error that may hide
// a commit, retries it once as a client would (the same request: creation
// is idempotent on order_no).
func (w *world) create(so *simOrder, req *lapse.OrderCreate) {
	w.orders = append(w.orders, so)
	w.byNo[so.no] = so
	retry := w.rng.IntN(2) == 0 // drawn whatever the answer, so that the draws that follow do not depend on it
	_, _, err := w.eng.CreateOrder(w.ctx, req, by)
	w.outcome("create "+so.no, err)
	if errors.Is(err, errInjected) && retry && !w.proc.crashed.Load() {
		_, created, err := w.eng.CreateOrder(w.ctx, req, by)
		w.outcome(fmt.Sprintf("create %s again (created %v)", so.no, created), err)
	}
}

func (w *world) createCheckout() {
	so := &simOrder{no: fmt.Sprintf("co-%03d", len(w.orders)), flow: "checkout", amount: int64(100 * (1 + w.rng.IntN(50)))}
	for _, sku := range w.skus {
		if w.rng.IntN(2) == 0 {
			so.items = append(so.items, lapse.Item{SKU: sku, Qty: int64(1 + w.rng.IntN(3))})
		}
	}
	if w.rng.IntN(3) == 0 {
		so.coupon = w.coupons[w.rng.IntN(len(w.coupons))]
	}
	w.create(so, &lapse.OrderCreate{OrderNo: so.no, Flow: so.flow, UserID: w.user(), Amount: so.amount, Currency: currency,
		Items: so.items, Coupon: so.coupon, TTL: time.Duration(1+w.rng.IntN(20)) * time.Minute})
}

func (w *world) createMembership() {
	so := &simOrder{no: fmt.Sprintf("mb-%03d", len(w.orders)), flow: "membership", amount: 9900}
	w.create(so, &lapse.OrderCreate{OrderNo: so.no, Flow: so.flow, UserID: w.user(), Amount: so.amount, Currency: currency,
		TTL:      time.Duration(5+w.rng.IntN(60)) * time.Minute,
		Metadata: []byte(`{"cards":[{"product":"gym","visits":10},{"product":"pool"}]}`)})
}

func (w *world) createGroup() {
	so := &simOrder{no: fmt.Sprintf("gb-%03d", len(w.orders)), flow: "groupbuy", amount: 5000}
	w.create(so, &lapse.OrderCreate{OrderNo: so.no, Flow: so.flow, UserID: w.user(), Amount: so.amount, Currency: currency,
		TTL:      time.Duration(2+w.rng.IntN(30)) * time.Minute,
		Metadata: fmt.Appendf(nil, `{"min_members":%d}`, 1+w.rng.IntN(3))})
}

func (w *world) submit() {
	if o := w.pickIn([]lapse.State{flows.PreOrder}, "membership"); o != nil {
		_, err := w.eng.Fire(w.ctx, o.no, engine.Fire{Event: flows.Submit, By: by})
		w.outcome("submit "+o.no, err)
	}
}

func (w *world) join() {
	o := w.pickIn([]lapse.State{flows.GroupOpen}, "groupbuy")
	if o == nil {
		return
	}
	u := w.user()
	_, created, err := w.eng.JoinGroup(w.ctx, o.no, engine.JoinRequest{UserID: u, Provider: providerName, Method: "card-" + o.no + "-" + u, By: by})
	if err == nil && created {
		o.members++
	}
	w.outcome(fmt.Sprintf("%s joins %s", u, o.no), err)
}

func (w *world) startPayment() {
	if o := w.pickIn(payable, "checkout", "membership"); o != nil {
		_, err := w.eng.StartPayment(w.ctx, o.no, providerName, by)
		w.outcome("start paying "+o.no, err)
	}
}

// customerPays: the customer pays at the provider, now, whatever Lapse
// thinks of the order; the provider's callback goes into the queue.
func (w *world) customerPays() {
	o := w.pickIn(payable, "checkout", "membership")
	if o == nil {
		return
	}
	if _, err := w.cfg.Store.OrderGet(w.ctx, o.no); err != nil {
		return // never created: no customer was sent to pay it
	}
	amount := o.amount
	if w.rng.IntN(30) == 0 {
		amount++ // a payment that does not match its order: review
	}
	n := w.prov.pay(o.no, amount, currency)
	if n == nil {
		w.logf("  the provider refuses to take a payment for %s (closed or paid already)", o.no)
		return
	}
	w.logf("  %s paid %s at the provider (%s)", o.no, lapse.Money(amount, currency), n.TxnID)
	w.enqueue(n)
}

// enqueue queues a callback: sent at once, or late, and sometimes twice.
func (w *world) enqueue(n *lapse.PaymentNotice) {
	at := w.clock.Now()
	if w.rng.IntN(3) == 0 {
		w.f.count(FaultLate)
		at = at.Add(time.Duration(1+w.rng.IntN(600)) * time.Second)
	}
	w.callbacks = append(w.callbacks, &callback{at: at, n: n})
	if w.rng.IntN(8) == 0 {
		w.f.count(FaultDup)
		w.callbacks = append(w.callbacks, &callback{at: at.Add(time.Duration(w.rng.IntN(900)) * time.Second), n: n})
	}
}

// sendCallbacks sends the callbacks that are due, in a shuffled order; one
// that fails is sent again later, as providers do. Refunds that were
// processing may complete, and their callbacks join the queue.
func (w *world) sendCallbacks() {
	if w.rng.IntN(2) == 0 {
		for _, n := range w.prov.refundsDone() {
			w.enqueue(n)
		}
	}
	now := w.clock.Now()
	var due, later []*callback
	for _, c := range w.callbacks {
		if c.at.After(now) {
			later = append(later, c)
		} else {
			due = append(due, c)
		}
	}
	w.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	w.callbacks = later
	for _, c := range due {
		again := now.Add(time.Duration(30+w.rng.IntN(90)) * time.Second)
		if w.proc.crashed.Load() {
			w.callbacks = append(w.callbacks, c)
			continue
		}
		_, err := w.eng.ApplyPayment(w.ctx, c.n)
		w.outcome(fmt.Sprintf("callback %s %s of %s (paid %s)", c.n.Kind, c.n.TxnID, c.n.OrderNo, c.n.PaidAt.Format("15:04:05")), err)
		if err != nil && lapse.ErrorCode(err) != lapse.ENOTFOUND && lapse.ErrorCode(err) != lapse.EINVALID {
			c.at = again
			w.callbacks = append(w.callbacks, c)
		}
	}
}

func (w *world) cancel() {
	if o := w.pickIn(open); o != nil {
		_, err := w.eng.Fire(w.ctx, o.no, engine.Fire{Event: flows.Cancel, By: by})
		w.outcome("cancel "+o.no, err)
	}
}

func (w *world) extend() {
	if o := w.pickIn(open); o != nil {
		d := time.Duration(1+w.rng.IntN(600)) * time.Second
		_, _, err := w.eng.SetDeadline(w.ctx, o.no, engine.DeadlineChange{ExtendBy: d, By: by, Reason: "sim extends"})
		w.outcome(fmt.Sprintf("extend %s by %v", o.no, d), err)
	}
}

func (w *world) shorten() {
	if o := w.pickIn(open); o != nil {
		at := w.clock.Now().Add(time.Duration(5+w.rng.IntN(300)) * time.Second)
		_, _, err := w.eng.SetDeadline(w.ctx, o.no, engine.DeadlineChange{At: &at, By: by, Reason: "sim shortens"})
		w.outcome(fmt.Sprintf("move %s's deadline to %s", o.no, at.Format("15:04:05")), err)
	}
}

func (w *world) refund() {
	o := w.pickIn(refundable, "checkout", "membership")
	if o == nil {
		return
	}
	if _, err := w.cfg.Store.OrderGet(w.ctx, o.no); err != nil {
		return // never created: no customer was sent to pay it
	}
	amount := o.amount
	if o.flow == "checkout" && w.rng.IntN(2) == 0 {
		amount = o.amount / int64(2+w.rng.IntN(3))
	}
	req := engine.RefundRequest{Amount: amount, Reason: "sim refund", By: by}
	if w.rng.IntN(2) == 0 {
		req.Key = fmt.Sprintf("rf-%s-%d", o.no, w.rng.IntN(2))
	}
	_, _, err := w.eng.RefundOrder(w.ctx, o.no, req)
	w.outcome(fmt.Sprintf("refund %s of %s", lapse.Money(amount, currency), o.no), err)
}

func (w *world) advance() {
	var d time.Duration
	switch r := w.rng.IntN(10); {
	case r < 5:
		d = time.Duration(1+w.rng.IntN(90)) * time.Second
	case r < 9:
		d = time.Duration(60+w.rng.IntN(240)) * time.Second
	default:
		d = time.Duration(5+w.rng.IntN(25)) * time.Minute
	}
	w.clock.Advance(d)
	w.logf("  +%v", d)
}

func (w *world) claim() {
	var err error
	if w.rng.IntN(4) == 0 {
		var n int
		n, err = w.cl.Sweep(w.ctx)
		w.outcome(fmt.Sprintf("sweep fired %d", n), err)
	}
	// The sweep does not wait for the questions to providers it starts (the
	// running claimer's sweep need not); the precise pass does, so that
	// nothing runs behind the next step.
	n, perr := w.cl.RunOnce(w.ctx)
	w.outcome(fmt.Sprintf("claimer fired %d", n), perr)
	if err == nil && perr == nil && !w.proc.crashed.Load() && w.failed == nil {
		w.failed = w.checkFired()
	}
}

func (w *world) deliver() {
	for range 1 + w.rng.IntN(3) {
		n, err := w.dl.RunOnce(w.ctx)
		w.outcome(fmt.Sprintf("deliverer claimed %d", n), err)
		if n == 0 || w.proc.crashed.Load() {
			return
		}
	}
}

// runTrigger runs the shared trigger's path, as the running claimer's loop
// does between two sleeps; after a pass that reported no error, with the
// trigger in charge, S8 is checked on what the trigger was told.
func (w *world) runTrigger() {
	n, err := w.cl.RunTriggerOnce(w.ctx)
	w.outcome(fmt.Sprintf("shared trigger fired %d (using %s)", n, w.eng.TriggerStatus().Using), err)
	if err == nil && !w.proc.crashed.Load() && w.failed == nil && w.eng.TriggerStatus().Using == string(engine.TriggerShared) {
		w.failed = w.checkTriggered()
	}
}

// redisFault makes the shared trigger lose its data, or go down for 10 s to
// 10 minutes of simulated time.
func (w *world) redisFault() {
	if w.rng.IntN(2) == 0 {
		w.f.count(FaultRedisLost)
		w.trig.lost()
		w.logf("  redis lost its data")
		return
	}
	d := time.Duration(10+w.rng.IntN(590)) * time.Second
	w.f.count(FaultRedisDown)
	w.trig.downFor(d)
	w.logf("  redis is down for %v", d)
}

// crashMidPass runs the claimer, the shared trigger or the deliverer with the process set to
// die at one of its next store calls.
func (w *world) crashMidPass() {
	w.proc.crashAt.Store(int64(1 + w.rng.IntN(8)))
	switch w.rng.IntN(3) {
	case 0:
		n, err := w.cl.RunOnce(w.ctx)
		w.outcome(fmt.Sprintf("claimer fired %d", n), err)
	case 1:
		n, err := w.cl.RunTriggerOnce(w.ctx)
		w.outcome(fmt.Sprintf("shared trigger fired %d", n), err)
	default:
		n, err := w.dl.RunOnce(w.ctx)
		w.outcome(fmt.Sprintf("deliverer claimed %d", n), err)
	}
	if !w.proc.crashed.Load() {
		w.proc.crashAt.Store(0)
	}
}
