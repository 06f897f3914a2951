package engine_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// TestModel runs random sequences of commands (create, pay with a provider
// time before or after the deadline, start paying, cancel, submit, set,
// extend or shorten a deadline, join a group, refund, close by hand, move
// the clock, run the claimer, run the deliveries) against the engine on a real SQLite
// store with a manual clock, and against the model of the same flows
// (model_flows_test.go, written from SPEC §3). After every command the two
// must agree on the command's outcome (refused or not, and by which error
// code) and on every order's state, version, deadline, pay-by, outbox
// events and payments, on the stock and coupon ledgers, the group members' charges,
// and what the provider was asked to charge and refund. rapid shrinks a
// failing sequence to a short one.
//
// Under the race detector it runs 20 sequences a flow instead of rapid's
// 100, unless -rapid.checks says otherwise: the race detector makes each
// about ten times slower, and the full run is the plain `go test`'s.
func TestModel(t *testing.T) {
	if raceEnabled && !flagSet("rapid.checks") {
		if err := flag.Set("rapid.checks", "20"); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []*modelFlow{modelCheckout, modelGroupbuy, modelMembership} {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(rt *rapid.T) { runModel(rt, f) })
		})
	}
}

const (
	modelSKU      = "tea"
	modelOnHand   = 4
	modelAmount   = 1000
	modelCurrency = "CNY"
	modelProvider = "sandbox"
)

var modelCoupons = []string{"C1", "C2"}

// modelEventTypes are the events the engine says it writes.
var modelEventTypes = engine.EventTypes(flows.Builtin())

// modelOrder is an order as the model sees it.
type modelOrder struct {
	No       string
	Req      lapse.OrderCreate
	State    string
	Version  int64
	Deadline *time.Time
	PayBy    *time.Time
	Intent   bool
	Events   []string
	Created  time.Time

	Qty              int64  // checkout: reserved at creation
	Coupon           string // checkout: locked at creation
	Held             bool   // the reservation stands
	Release, Consume bool   // an order.closed or order.paid waits for the stock subscriber

	MinMembers int
	Members    map[string]string // user → method
	Charged    bool              // the group settled: every member charged

	Payments []*modelPayment
	Captured int64   // applied
	Refunds  []int64 // merchant refunds asked for; each succeeds at the provider
	Refunded int64   // of those, done
}

type modelPayment struct {
	TxnID  string
	Status lapse.PaymentStatus
	Amount int64
}

// model is the in-memory implementation: one flow's orders, the stock of
// one SKU and the coupons.
type model struct {
	flow     *modelFlow
	now      time.Time
	orders   []*modelOrder
	onHand   int64
	reserved int64
	coupons  map[string]*modelCoupon
	seq      int
}

// modelCoupon is a coupon of the ledger: available, locked by OrderNo, or
// used by it.
type modelCoupon struct {
	Status  lapse.CouponStatus
	OrderNo string
}

func (m *model) cutoff(o *modelOrder) *time.Time {
	if o.PayBy != nil {
		return o.PayBy
	}
	return o.Deadline
}

// apply makes move mv of order o at the model's now.
func (m *model) apply(o *modelOrder, mv modelMove) {
	if mv.To != o.State {
		if tm, ok := m.flow.Timers[mv.To]; ok {
			d := m.now.Add(tm.After)
			o.Deadline = &d
		} else {
			o.Deadline = nil
		}
	}
	o.State = mv.To
	o.Version++
	o.Events = append(o.Events, mv.Emits)
	if m.flow.Holds && o.Held {
		switch mv.Emits {
		case "order.closed":
			o.Release = true
		case "order.paid":
			o.Consume = true
		}
	}
	if m.flow.Group && mv.Emits == "group.settled" {
		o.Charged = true
	}
}

// fireExternal is an event sent through the events API (CANCEL, SUBMIT),
// of an order or, when group, of a group buy: only a group's may end it
// while it is open, and only a group buy takes a group's; past the
// deadline, none may take the order elsewhere than its deadline would.
func (m *model) fireExternal(o *modelOrder, ev string, group bool) string {
	internal, known := m.flow.Events[ev]
	if !known || internal || group && !m.flow.Group {
		return lapse.EINVALID
	}
	mv, ok := m.flow.move(o.State, ev)
	if !ok {
		return lapse.ECONFLICT
	}
	if m.flow.Group && !group && m.flow.open(o.State) && !m.flow.open(mv.To) {
		return lapse.EINVALID
	}
	// Once the deadline passed, it decides where the order goes (S2): an
	// event may leave it in its state or take it there, nowhere else.
	if tm, ok := m.flow.Timers[o.State]; ok && mv.To != o.State && ev != tm.Event {
		if cut := m.cutoff(o); cut != nil && !m.now.Before(*cut) && m.flow.Moves[o.State][tm.Event].To != mv.To {
			return lapse.ECONFLICT
		}
	}
	m.apply(o, mv)
	return ""
}

func (m *model) create(req lapse.OrderCreate) string {
	if m.flow.Holds {
		if req.Items[0].Qty > m.onHand-m.reserved {
			return lapse.ECONFLICT
		}
		if c := m.coupons[req.Coupon]; req.Coupon != "" && c.Status != lapse.CouponAvailable {
			return lapse.ECONFLICT // held by another live order, or used
		}
		m.reserved += req.Items[0].Qty
		if req.Coupon != "" {
			*m.coupons[req.Coupon] = modelCoupon{lapse.CouponLocked, req.OrderNo}
		}
	}
	o := &modelOrder{No: req.OrderNo, Req: req, State: m.flow.Initial, Version: 1, Events: []string{"order.created"},
		Members: map[string]string{}, Created: m.now}
	after := m.flow.Timers[m.flow.Initial].After
	if req.TTL > 0 {
		after = req.TTL
	}
	d := m.now.Add(after)
	o.Deadline = &d
	if m.flow.Holds {
		o.Qty, o.Coupon, o.Held = req.Items[0].Qty, req.Coupon, true
	}
	if m.flow.Group {
		o.MinMembers = 1
		if len(req.Metadata) > 0 {
			fmt.Sscanf(string(req.Metadata), `{"min_members":%d}`, &o.MinMembers)
		}
	}
	m.orders = append(m.orders, o)
	return ""
}

func (m *model) pay(o *modelOrder, txn string, paidAt time.Time) string {
	if slices.ContainsFunc(o.Payments, func(p *modelPayment) bool { return p.TxnID == txn }) {
		return "" // the same provider transaction again changes nothing
	}
	p := &modelPayment{TxnID: txn, Amount: modelAmount}
	o.Payments = append(o.Payments, p)
	if !m.flow.Pays || paidAt.Before(o.Created.Truncate(time.Second)) {
		// Captured all the same (for an order that takes no payments, or
		// at a time before the order existed): on the books, for an
		// operator.
		p.Status = lapse.PaymentReview
		o.Events = append(o.Events, "payment.review")
		return ""
	}
	mv, ok := m.flow.move(o.State, "PAY")
	if cut := m.cutoff(o); ok && (cut == nil || paidAt.Before(*cut)) {
		p.Status = lapse.PaymentApplied
		o.Captured += p.Amount
		m.apply(o, mv)
		return ""
	}
	p.Status = lapse.PaymentLate
	o.Events = append(o.Events, "payment.late")
	return ""
}

func (m *model) startPayment(o *modelOrder) string {
	if !m.flow.Pays {
		return lapse.EINVALID
	}
	if _, ok := m.flow.move(o.State, "PAY"); !ok {
		return lapse.ECONFLICT
	}
	if o.Intent {
		return ""
	}
	if o.Deadline == nil || !m.now.Before(*o.Deadline) {
		return lapse.ECONFLICT
	}
	next := o.Deadline.Add(m.flow.Grace)
	o.Deadline, o.PayBy, o.Intent = &next, &next, true
	o.Version++
	o.Events = append(o.Events, "order.deadline_changed")
	return ""
}

// setDeadline moves the deadline to at (extend=0) or by extend.
func (m *model) setDeadline(o *modelOrder, at time.Time, extend time.Duration) string {
	if _, ok := m.flow.Timers[o.State]; !ok || o.Deadline == nil {
		return lapse.ECONFLICT
	}
	if (o.PayBy != nil && !m.now.Before(*o.PayBy)) || !m.now.Before(*o.Deadline) {
		return lapse.ECONFLICT // a deadline that has passed cannot be moved (S2)
	}
	if extend > 0 {
		at = m.cutoff(o).Add(extend)
	} else if o.PayBy != nil {
		if !at.After(m.now) {
			return lapse.EINVALID // the time asked for is not ahead, whatever the grace added to it
		}
		at = at.Add(m.flow.Grace)
	}
	if !at.After(m.now) || at.Sub(m.now) > 366*24*time.Hour {
		return lapse.EINVALID
	}
	if at.Equal(*m.cutoff(o)) {
		return "" // the deadline as it stands: nothing changes
	}
	o.Deadline = &at
	if o.PayBy != nil {
		o.PayBy = &at
	}
	o.Version++
	o.Events = append(o.Events, "order.deadline_changed")
	return ""
}

func (m *model) join(o *modelOrder, user, method string) string {
	if !m.flow.Group {
		return lapse.EINVALID
	}
	if had, ok := o.Members[user]; ok {
		if had != method {
			return lapse.ECONFLICT
		}
		return ""
	}
	mv, ok := m.flow.move(o.State, "JOIN")
	if !ok || (o.Deadline != nil && !m.now.Before(*o.Deadline)) {
		return lapse.ECONFLICT
	}
	o.Members[user] = method
	m.apply(o, mv)
	return ""
}

func (m *model) refund(o *modelOrder, amount int64) string {
	if !m.flow.Refunds {
		return lapse.EINVALID
	}
	mv, ok := m.flow.move(o.State, "REFUND")
	if !ok {
		return lapse.ECONFLICT
	}
	left := o.Captured
	for _, r := range o.Refunds {
		left -= r
	}
	if amount > left {
		return lapse.ECONFLICT // never more than was captured
	}
	o.Refunds = append(o.Refunds, amount)
	m.apply(o, mv)
	return ""
}

// closeByHand is an operator's close: the deadline event of the order's
// state fires now, whether or not the deadline has passed.
func (m *model) closeByHand(o *modelOrder) string {
	tm, ok := m.flow.Timers[o.State]
	if !ok {
		return lapse.ECONFLICT
	}
	mv, _ := m.flow.move(o.State, tm.Event)
	m.apply(o, mv)
	return ""
}

// claim fires every due deadline, as one run of the claimer does. An order
// whose customer started paying is leased first (a version) while the
// provider is asked; the provider says it was not paid.
func (m *model) claim() {
	for _, o := range m.orders {
		tm, ok := m.flow.Timers[o.State]
		if !ok || o.Deadline == nil || o.Deadline.After(m.now) {
			continue
		}
		if _, pays := m.flow.move(o.State, "PAY"); o.Intent && pays {
			o.Version++
		}
		mv, _ := m.flow.move(o.State, tm.Event)
		m.apply(o, mv)
	}
}

// deliver runs every effect that waits: the stock ledger gives back or uses
// up what orders hold, late payments are refunded, merchant refunds finish,
// closed groups settle (or fail with too few members) and paid memberships
// issue their cards.
func (m *model) deliver() {
	for _, o := range m.orders {
		if o.Release {
			m.reserved -= o.Qty
			if o.Coupon != "" {
				*m.coupons[o.Coupon] = modelCoupon{lapse.CouponAvailable, ""}
			}
			o.Release, o.Held = false, false
		}
		if o.Consume {
			m.reserved -= o.Qty
			m.onHand -= o.Qty
			if o.Coupon != "" {
				m.coupons[o.Coupon].Status = lapse.CouponUsed
			}
			o.Consume, o.Held = false, false
		}
		for _, p := range o.Payments {
			if p.Status == lapse.PaymentLate {
				p.Status = lapse.PaymentRefunded
				o.Events = append(o.Events, "payment.refunded")
			}
		}
		for {
			switch {
			case m.flow.Refunds && o.State == "REFUNDING":
				var asked int64
				for _, r := range o.Refunds {
					asked += r
				}
				o.Refunded = asked
				ev := "REFUND_PARTIAL"
				if asked >= o.Captured {
					ev = "REFUND_DONE"
				}
				mv, _ := m.flow.move(o.State, ev)
				m.apply(o, mv)
				continue
			case m.flow.Group && o.State == "CLOSED":
				ev := "SETTLE"
				if len(o.Members) < o.MinMembers {
					ev = "FAIL"
				}
				mv, _ := m.flow.move(o.State, ev)
				m.apply(o, mv)
				continue
			case m.flow.Issues && o.State == "PAID":
				mv, _ := m.flow.move(o.State, "ISSUE")
				m.apply(o, mv)
				continue
			}
			break
		}
	}
}

// modelGateway is the payment provider of the model test: it charges and
// refunds what it is asked, once per idempotency key, and counts every
// request so that the test sees a member charged twice or more refunded
// than a payment captured. Nobody pays at the provider by itself, so the
// closer's question finds every started payment unpaid.
type modelGateway struct {
	mu       sync.Mutex
	charges  map[string]int // requests per key
	refunds  map[string]*lapse.RefundRequest
	refunded map[string]int64 // by txn id, over distinct keys
}

func newModelGateway() *modelGateway {
	return &modelGateway{charges: map[string]int{}, refunds: map[string]*lapse.RefundRequest{}, refunded: map[string]int64{}}
}

func (g *modelGateway) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.charges[r.IdempotencyKey]++
	return &lapse.ProviderPayment{TxnID: "ch-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount, Currency: r.Currency, PaidAt: t0}, nil
}

func (g *modelGateway) Refund(_ context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.refunds[r.IdempotencyKey]; !ok {
		g.refunds[r.IdempotencyKey] = r
		g.refunded[r.TxnID] += r.Amount
	}
	got := g.refunds[r.IdempotencyKey]
	return &lapse.ProviderRefund{RefundID: "re-" + r.IdempotencyKey, TxnID: got.TxnID, Amount: got.Amount, Status: lapse.RefundSucceeded}, nil
}

func (g *modelGateway) RefundQuery(_ context.Context, key string) (*lapse.ProviderRefund, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.refunds[key]
	if r == nil {
		return nil, lapse.ErrProviderNotFound
	}
	return &lapse.ProviderRefund{RefundID: "re-" + key, TxnID: r.TxnID, Amount: r.Amount, Status: lapse.RefundSucceeded}, nil
}

func (g *modelGateway) Query(_ context.Context, key string) (*lapse.ProviderPayment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.charges[key] == 0 {
		return nil, lapse.ErrProviderNotFound
	}
	return &lapse.ProviderPayment{TxnID: "ch-" + key, Status: lapse.ProviderPaid, Amount: modelAmount, Currency: modelCurrency}, nil
}

func (g *modelGateway) Close(_ context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	return &lapse.ProviderPayment{OrderNo: orderNo, Status: lapse.ProviderClosed}, nil
}

// modelRun is one test case: the engine, its store and clock, and the model.
type modelRun struct {
	ctx context.Context
	e   *engine.Engine
	clk *lapse.ManualClock
	cl  *engine.Claimer
	dl  *engine.Deliverer
	gw  *modelGateway
	m   *model
}

func runModel(t *rapid.T, f *modelFlow) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lapse-model-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := sqlite.Open(ctx, filepath.Join(dir, "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r := &modelRun{ctx: ctx, clk: lapse.NewManualClock(t0), gw: newModelGateway(),
		m: &model{flow: f, now: t0, onHand: modelOnHand, coupons: map[string]*modelCoupon{}}}
	r.e, err = engine.New(s, flows.Builtin(), engine.Config{Clock: r.clk, Node: "model", StockLedger: true, CouponLedger: true,
		Logger:   slog.New(slog.DiscardHandler),
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{modelProvider: r.gw}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.SetStock(ctx, modelSKU, modelOnHand); err != nil {
		t.Fatal(err)
	}
	for _, c := range modelCoupons {
		if _, err := r.e.CreateCoupon(ctx, c); err != nil {
			t.Fatal(err)
		}
		r.m.coupons[c] = &modelCoupon{Status: lapse.CouponAvailable}
	}
	r.cl = engine.NewClaimer(r.e, engine.ClaimerConfig{})
	r.dl = engine.NewDeliverer(r.e, engine.DelivererConfig{})
	t.Repeat(map[string]func(*rapid.T){
		"":            r.check,
		"create":      r.create,
		"recreate":    r.recreate,
		"pay":         r.pay,
		"startPay":    r.startPayment,
		"cancel":      func(t *rapid.T) { r.fireExternal(t, "CANCEL", false) },
		"cancelGroup": func(t *rapid.T) { r.fireExternal(t, "CANCEL", true) },
		"submit":      func(t *rapid.T) { r.fireExternal(t, "SUBMIT", false) },
		"setDeadline": r.setDeadline,
		"extend":      r.extend,
		"join":        r.join,
		"refund":      r.refund,
		"advance":     func(t *rapid.T) { r.advance(t, rapid.IntRange(1, 1200).Draw(t, "seconds")) },
		"advanceFar":  func(t *rapid.T) { r.advance(t, 3600*rapid.IntRange(1, 30).Draw(t, "hours")) },
		"closeByHand": r.closeByHand,
		"claim":       r.claim,
		"deliver":     r.deliver,
	})
}

// pick draws one of the model's orders; with none the action is skipped.
func (r *modelRun) pick(t *rapid.T) *modelOrder {
	if len(r.m.orders) == 0 {
		t.Skip("no orders yet")
	}
	return r.m.orders[rapid.IntRange(0, len(r.m.orders)-1).Draw(t, "order")]
}

// same fails unless the engine's error has the code the model expects.
func same(t *rapid.T, what string, want string, err error) {
	t.Helper()
	if got := lapse.ErrorCode(err); got != want {
		t.Fatalf("%s: engine answered %q (%v), the model %q", what, got, err, want)
	}
}

func (r *modelRun) create(t *rapid.T) {
	f := r.m.flow
	r.m.seq++
	req := lapse.OrderCreate{OrderNo: fmt.Sprintf("M-%d", r.m.seq), Flow: f.Name, UserID: "u1", Amount: modelAmount, Currency: modelCurrency}
	if mins := rapid.IntRange(0, 40).Draw(t, "ttl_minutes"); mins > 0 { // 0: the flow's default
		req.TTL = time.Duration(mins) * time.Minute
	}
	if f.Holds {
		req.Items = []lapse.Item{{SKU: modelSKU, Qty: int64(rapid.IntRange(1, 3).Draw(t, "qty"))}}
		req.Coupon = rapid.SampledFrom(append([]string{""}, modelCoupons...)).Draw(t, "coupon")
	}
	if f.Group {
		req.Metadata = fmt.Appendf(nil, `{"min_members":%d}`, rapid.IntRange(1, 2).Draw(t, "min_members"))
	}
	_, _, err := r.e.CreateOrder(r.ctx, &req, app)
	same(t, "create "+req.OrderNo, r.m.create(req), err)
}

// recreate sends an order's create request again, the same (the same
// order back) or with another amount (refused).
func (r *modelRun) recreate(t *rapid.T) {
	o := r.pick(t)
	req := o.Req
	want := ""
	if rapid.Bool().Draw(t, "changed") {
		req.Amount++
		want = lapse.ECONFLICT
	}
	got, created, err := r.e.CreateOrder(r.ctx, &req, app)
	same(t, "create again "+o.No, want, err)
	if err == nil && (created || got.Version != o.Version) {
		t.Fatalf("create again %s: created %v, version %d; want the order as it is (version %d)", o.No, created, got.Version, o.Version)
	}
}

func (r *modelRun) pay(t *rapid.T) {
	o := r.pick(t)
	txn := fmt.Sprintf("T-%s-%d", o.No, len(o.Payments))
	if len(o.Payments) > 0 && rapid.Bool().Draw(t, "same_txn") {
		txn = o.Payments[rapid.IntRange(0, len(o.Payments)-1).Draw(t, "txn")].TxnID
	}
	// The provider's success time: up to five minutes before the callback.
	paidAt := r.m.now.Add(-time.Duration(rapid.IntRange(0, 300).Draw(t, "seconds_before_callback")) * time.Second)
	n := &lapse.PaymentNotice{Provider: modelProvider, Kind: lapse.NoticePaid, TxnID: txn, OrderNo: o.No, Amount: modelAmount,
		Currency: modelCurrency, Merchant: "m-1", PaidAt: paidAt, Raw: []byte(`{}`)}
	_, err := r.e.ApplyPayment(r.ctx, n)
	same(t, "pay "+o.No+" "+txn, r.m.pay(o, txn, paidAt), err)
}

func (r *modelRun) startPayment(t *rapid.T) {
	o := r.pick(t)
	_, err := r.e.StartPayment(r.ctx, o.No, modelProvider, app)
	same(t, "start paying "+o.No, r.m.startPayment(o), err)
}

func (r *modelRun) fireExternal(t *rapid.T, ev string, group bool) {
	o := r.pick(t)
	_, err := r.e.Fire(r.ctx, o.No, engine.Fire{Event: lapse.Event(ev), By: app, External: true, Group: group})
	same(t, ev+" "+o.No, r.m.fireExternal(o, ev, group), err)
}

func (r *modelRun) setDeadline(t *rapid.T) {
	o := r.pick(t)
	at := r.m.now.Add(time.Duration(rapid.IntRange(-60, 120).Draw(t, "minutes_from_now")) * time.Minute)
	_, _, err := r.e.SetDeadline(r.ctx, o.No, engine.DeadlineChange{At: &at, By: app})
	same(t, "set the deadline of "+o.No, r.m.setDeadline(o, at, 0), err)
}

func (r *modelRun) extend(t *rapid.T) {
	o := r.pick(t)
	by := time.Duration(rapid.IntRange(1, 60).Draw(t, "minutes")) * time.Minute
	_, _, err := r.e.SetDeadline(r.ctx, o.No, engine.DeadlineChange{ExtendBy: by, By: app})
	same(t, "extend the deadline of "+o.No, r.m.setDeadline(o, time.Time{}, by), err)
}

func (r *modelRun) join(t *rapid.T) {
	o := r.pick(t)
	user := rapid.SampledFrom([]string{"u1", "u2", "u3"}).Draw(t, "user")
	method := "card-" + user
	if rapid.IntRange(0, 4).Draw(t, "other_method") == 0 {
		method = "wallet-" + user
	}
	_, _, err := r.e.JoinGroup(r.ctx, o.No, engine.JoinRequest{UserID: user, Method: method, By: app})
	same(t, "join "+o.No+" as "+user, r.m.join(o, user, method), err)
}

func (r *modelRun) refund(t *rapid.T) {
	o := r.pick(t)
	amount := int64(rapid.IntRange(1, modelAmount+100).Draw(t, "amount"))
	_, _, err := r.e.RefundOrder(r.ctx, o.No, engine.RefundRequest{Amount: amount, Reason: "model", By: app})
	same(t, fmt.Sprintf("refund %d of %s", amount, o.No), r.m.refund(o, amount), err)
}

func (r *modelRun) closeByHand(t *rapid.T) {
	o := r.pick(t)
	_, err := r.e.CloseOrder(r.ctx, o.No, "model", engine.Actor{FiredBy: lapse.FiredByOperator, Name: "operator"})
	same(t, "close "+o.No+" by hand", r.m.closeByHand(o), err)
}

func (r *modelRun) advance(_ *rapid.T, seconds int) {
	r.m.now = r.clk.Advance(time.Duration(seconds) * time.Second)
}

func (r *modelRun) claim(t *rapid.T) {
	if _, err := r.cl.RunOnce(r.ctx); err != nil {
		t.Fatalf("claimer: %v", err)
	}
	r.m.claim()
}

func (r *modelRun) deliver(t *rapid.T) {
	for range 20 {
		n, err := r.dl.RunOnce(r.ctx)
		if err != nil {
			t.Fatalf("deliverer: %v", err)
		}
		if n == 0 {
			break
		}
	}
	r.m.deliver()
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

func showTime(p *time.Time) string {
	if p == nil {
		return "none"
	}
	return p.Format(time.RFC3339)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// check compares every order of the model with the engine's, then the
// stock, the group members and what the provider was asked.
func (r *modelRun) check(t *rapid.T) {
	for _, mo := range r.m.orders {
		o, err := r.e.Order(r.ctx, mo.No)
		if err != nil {
			t.Fatalf("order %s: %v", mo.No, err)
		}
		if string(o.State) != mo.State || o.Version != mo.Version {
			t.Fatalf("order %s: engine %s v%d, model %s v%d", mo.No, o.State, o.Version, mo.State, mo.Version)
		}
		if !sameTime(o.DeadlineAt, mo.Deadline) || !sameTime(o.PayBy, mo.PayBy) {
			t.Fatalf("order %s (%s): engine deadline %s pay-by %s, model deadline %s pay-by %s", mo.No, o.State,
				showTime(o.DeadlineAt), showTime(o.PayBy), showTime(mo.Deadline), showTime(mo.PayBy))
		}
		evs, err := r.e.Events(r.ctx, mo.No)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, ev := range evs {
			types = append(types, ev.Type)
			if !slices.Contains(modelEventTypes, ev.Type) {
				// A subscriber's pattern for it would be refused (lapse serve's
				// --webhook-events): engine.EventTypes must list it.
				t.Fatalf("order %s: event %s is not among engine.EventTypes %v", mo.No, ev.Type, modelEventTypes)
			}
		}
		if got, want := sorted(types), sorted(mo.Events); !slices.Equal(got, want) {
			t.Fatalf("order %s: engine events %v, model %v", mo.No, got, want)
		}
		r.checkPayments(t, mo)
		if r.m.flow.Group {
			r.checkMembers(t, mo)
		}
	}
	if r.m.flow.Holds {
		st, err := r.e.Stock(r.ctx, modelSKU)
		if err != nil {
			t.Fatal(err)
		}
		if st.OnHand != r.m.onHand || st.Reserved != r.m.reserved {
			t.Fatalf("stock %s: engine %d on hand, %d reserved; model %d, %d", modelSKU, st.OnHand, st.Reserved, r.m.onHand, r.m.reserved)
		}
		for _, code := range modelCoupons {
			c, _, err := r.e.Coupon(r.ctx, code)
			if err != nil {
				t.Fatal(err)
			}
			if want := r.m.coupons[code]; c.Status != want.Status || c.OrderNo != want.OrderNo {
				t.Fatalf("coupon %s: engine %s by %q, model %s by %q", code, c.Status, c.OrderNo, want.Status, want.OrderNo)
			}
		}
	}
	r.gw.mu.Lock()
	defer r.gw.mu.Unlock()
	for key, n := range r.gw.charges {
		if n > 1 {
			t.Fatalf("charge %s was asked of the provider %d times (S7)", key, n)
		}
	}
}

func (r *modelRun) checkPayments(t *rapid.T, mo *modelOrder) {
	pays, err := r.e.Payments(r.ctx, mo.No)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, p := range pays {
		got = append(got, p.TxnID+":"+string(p.Status))
	}
	for _, p := range mo.Payments {
		want = append(want, p.TxnID+":"+string(p.Status))
	}
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("order %s: engine payments %v, model %v", mo.No, got, want)
	}
	r.gw.mu.Lock()
	defer r.gw.mu.Unlock()
	for _, p := range mo.Payments {
		want := int64(0)
		switch p.Status {
		case lapse.PaymentRefunded:
			want = p.Amount
		case lapse.PaymentApplied:
			want = mo.Refunded
		}
		if got := r.gw.refunded[p.TxnID]; got != want {
			t.Fatalf("payment %s of %s (%s, %d captured): the provider refunded %d, the model %d (S3)", p.TxnID, mo.No,
				p.Status, p.Amount, got, want)
		}
	}
}

func (r *modelRun) checkMembers(t *rapid.T, mo *modelOrder) {
	g, err := r.e.Group(r.ctx, mo.No)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Members) != len(mo.Members) {
		t.Fatalf("group %s: engine %d members, model %d", mo.No, len(g.Members), len(mo.Members))
	}
	want, wantN := lapse.ChargePending, 0
	if mo.Charged {
		want, wantN = lapse.ChargeCharged, 1
	}
	r.gw.mu.Lock()
	defer r.gw.mu.Unlock()
	for _, m := range g.Members {
		if lapse.MaskMethod(mo.Members[m.UserID]) != m.Method || m.Status != want {
			t.Fatalf("group %s member %s: engine %s %s, model %q %s", mo.No, m.UserID, m.Method, m.Status, mo.Members[m.UserID], want)
		}
		if n := r.gw.charges[m.Key]; n != wantN {
			t.Fatalf("group %s member %s: charged %d times at the provider, the model %d (S7)", mo.No, m.UserID, n, wantN)
		}
	}
}

// flagSet reports whether the flag name was set on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
