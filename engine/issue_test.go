package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// flakyCards is a card issuer over the built-in ledger that fails the next
// fails issues, loses the answer of the next lose issues after they took
// effect, and can hold an issue after it took effect until released.
type flakyCards struct {
	mu     sync.Mutex
	ledger lapse.CardIssuer
	fails  int
	lose   int
	issues int
	bare   bool          // answer with no cards, as a merchant's card service does (package port)
	hold   chan struct{} // when set, Issue waits for it after issuing
	held   chan struct{} // closed when an issue is being held
	// early holds an issue before it takes effect instead: the request is
	// on its way to the service.
	early bool
	// keyed makes Revoke act once per idempotency key, as a merchant's
	// card service does (package port): a key sent again changes nothing.
	keyed   bool
	revokes map[string]bool
}

func (f *flakyCards) Issue(ctx context.Context, r *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	f.mu.Lock()
	f.issues++
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return nil, errors.New("card service: 503 Service Unavailable")
	}
	hold, held, early := f.hold, f.held, f.early
	f.mu.Unlock()
	if hold != nil && early {
		close(held)
		<-hold
	}
	cards, err := f.ledger.Issue(ctx, r)
	if hold != nil && !early {
		close(held)
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.lose > 0 {
		f.lose--
		return nil, fmt.Errorf("card service: no answer: %w", lapse.ErrUnknownOutcome)
	}
	if f.bare {
		cards = nil
	}
	return cards, err
}

func (f *flakyCards) Revoke(ctx context.Context, r *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	f.mu.Lock()
	if f.keyed {
		if f.revokes[r.IdempotencyKey] {
			f.mu.Unlock()
			return nil, nil
		}
		if f.revokes == nil {
			f.revokes = map[string]bool{}
		}
		f.revokes[r.IdempotencyKey] = true
	}
	f.mu.Unlock()
	return f.ledger.Revoke(ctx, r)
}

func memberEngine(t *testing.T, s lapse.Store, clk lapse.Clock, prov lapse.PaymentProvider, cards *flakyCards) *engine.Engine {
	t.Helper()
	var e *engine.Engine
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, Cards: cards,
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}, Merchants: map[string]string{"sandbox": "m-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	cards.ledger = engine.NewCardLedger(e)
	return e
}

// paidMembership creates a membership order with a bundle of a 10-visit
// count card and a gym card, submits it and pays it.
func paidMembership(t *testing.T, e *engine.Engine, clk lapse.Clock, no string) *lapse.Order {
	t.Helper()
	ctx := ctxT(t)
	md, _ := json.Marshal(map[string]any{"cards": []map[string]any{{"product": "swim-10", "visits": 10}, {"product": "gym"}}})
	o := create(t, e, &lapse.OrderCreate{OrderNo: no, Flow: "membership", UserID: "u1", Amount: 1000, Currency: "CNY", Metadata: md})
	if _, err := e.Fire(ctx, no, engine.Fire{Event: flows.Submit, By: app}); err != nil {
		t.Fatal(err)
	}
	if p, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil || p.Status != lapse.PaymentApplied {
		t.Fatalf("paying %s = %+v, %v", no, p, err)
	}
	return o
}

func orderState(t *testing.T, e *engine.Engine, no string) lapse.State {
	t.Helper()
	o, err := e.Order(ctxT(t), no)
	if err != nil {
		t.Fatal(err)
	}
	return o.State
}

// TestMembershipCompensation: issuing fails six times (the first attempt and
// five retries after 1, 5, 15, 30 and 60 min): the order compensates, then
// lands in manual review with every attempt on record; an operator's retry
// issues the cards.
func TestMembershipCompensation(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		cards := &flakyCards{fails: 6}
		e := memberEngine(t, open(), clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})

		bad := &lapse.OrderCreate{OrderNo: "M-bad", Flow: "membership", UserID: "u1", Amount: 1000, Currency: "CNY",
			Metadata: json.RawMessage(`{"cards": [{"product": "swim", "visits": -1}]}`)}
		if _, _, err := e.CreateOrder(ctx, bad, app); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("a membership with a bad card = %v, want invalid", err)
		}

		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Compensating {
			t.Fatalf("after the first failure: %s", st)
		}
		for i, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5) // past the jitter
			drain(t, d)
			want := flows.Compensating
			if i == len(engine.DefaultIssueRetries)-1 {
				want = flows.ManualReview
			}
			if st := orderState(t, e, "M-1"); st != want {
				t.Fatalf("after retry %d: %s, want %s", i+1, st, want)
			}
		}
		hs, err := e.Deliveries(ctx, "M-1")
		if err != nil {
			t.Fatal(err)
		}
		var issue *engine.DeliveryHistory
		for i := range hs {
			if hs[i].Subscriber == engine.IssueSubscriber {
				issue = &hs[i]
			}
		}
		if issue == nil || issue.Status != lapse.DeliveryDead || len(issue.History) != 6 {
			t.Fatalf("issue delivery: %+v", issue)
		}
		reviews, err := e.Reviews(ctx, &lapse.ReviewListParams{})
		if err != nil || len(reviews) != 1 || reviews[0].OrderNo != "M-1" {
			t.Errorf("reviews = %+v, %v", reviews, err)
		}
		if cs, _ := e.Cards(ctx, "M-1"); len(cs) != 0 {
			t.Errorf("cards issued by failing attempts: %+v", cs)
		}

		// A group's retry, which charges members, is not this order's.
		if _, err := e.RetryGroup(ctx, "M-1", "wrong kind", app); !errors.Is(err, engine.ErrRetryNotGroup) {
			t.Errorf("RetryGroup of a membership = %v, want ErrRetryNotGroup", err)
		}
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("after a refused retry: %s", st)
		}
		// The operator retries once the card service is back.
		if _, err := e.Retry(ctx, "M-1", "card service fixed", app); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Issued {
			t.Fatalf("after the operator's retry: %s", st)
		}
		cs, err := e.Cards(ctx, "M-1")
		if err != nil || len(cs) != 2 || cs[0].Product != "swim-10" || cs[0].Visits != 10 || cs[1].Status != lapse.CardActive {
			t.Fatalf("cards = %+v, %v", cs, err)
		}
		into, _, _ := history(t, e, "M-1")
		if into[flows.Compensating] != 2 || into[flows.ManualReview] != 1 || into[flows.Issued] != 1 {
			t.Errorf("transitions into: %v", into)
		}
	})
}

// deathFails is a store whose next recording of a delivery's death fails,
// in a transaction or not, as when the database goes away at that moment.
type deathFails struct {
	lapse.Store
	next *atomic.Bool
}

func (f deathFails) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	if p.Status == lapse.DeliveryDead && f.next.CompareAndSwap(true, false) {
		return nil, errors.New("connection reset by peer")
	}
	return f.Store.DeliveryFinish(ctx, p)
}

func (f deathFails) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return f.Store.Tx(ctx, func(tx lapse.Store) error { return fn(deathFails{tx, f.next}) })
}

// TestMembershipEscalationCommitsWithItsDeath: the last failed attempt to
// issue hands the order to an operator in the commit that records its
// delivery dead with a review. When recording the death fails, the order
// stays compensating; the attempt after the lease hands it over with its
// review, so no order waits in manual review without one.
func TestMembershipEscalationCommitsWithItsDeath(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		fails := &atomic.Bool{}
		e := memberEngine(t, deathFails{open(), fails}, clk, &fakeProvider{}, &flakyCards{fails: 100})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		for _, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5)
			fails.Store(true) // only the last attempt records a death
			drain(t, d)
		}
		if fails.Load() {
			t.Fatal("no attempt recorded a death")
		}
		if st := orderState(t, e, "M-1"); st != flows.Compensating {
			t.Errorf("after the death failed to be recorded the order is %s, want COMPENSATING", st)
		}
		if rs, err := e.Reviews(ctx, &lapse.ReviewListParams{}); err != nil || len(rs) != 0 {
			t.Errorf("reviews = %+v, %v; want none", rs, err)
		}

		clk.Advance(time.Minute) // the lease ends: the delivery is taken up again
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("after the next attempt the order is %s, want MANUAL_REVIEW", st)
		}
		rs, err := e.Reviews(ctx, &lapse.ReviewListParams{Open: true})
		if err != nil || len(rs) != 1 || rs[0].OrderNo != "M-1" {
			t.Errorf("open reviews = %+v, %v; want one of M-1", rs, err)
		}
		hs, err := e.Deliveries(ctx, "M-1")
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Subscriber == engine.IssueSubscriber && h.Status != lapse.DeliveryDead {
				t.Errorf("issue delivery is %s after %d attempts, want dead", h.Status, h.Attempts)
			}
		}
		if into, events, _ := history(t, e, "M-1"); into[flows.ManualReview] != 1 || events[lapse.EventDeliveryDead] != 1 {
			t.Errorf("transitions into MANUAL_REVIEW: %d, delivery.dead events: %d; want 1 and 1", into[flows.ManualReview], events[lapse.EventDeliveryDead])
		}
	})
}

// TestMembershipRefundRevokes: a refund revokes the benefits: the count
// card loses the visits it has left, every card of the bundle is voided.
func TestMembershipRefundRevokes(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := memberEngine(t, open(), clk, prov, &flakyCards{})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-2")
		drain(t, d)
		cs, _ := e.Cards(ctx, "M-2")
		if orderState(t, e, "M-2") != flows.Issued || len(cs) != 2 {
			t.Fatalf("issued: %s, %+v", orderState(t, e, "M-2"), cs)
		}
		for range 3 {
			if _, _, err := e.UseCard(ctx, cs[0].ID, ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := e.RefundOrder(ctx, "M-2", engine.RefundRequest{Amount: 1000, Reason: "moved away", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-2"); st != flows.MembershipRefunded {
			t.Fatalf("after the refund: %s", st)
		}
		cs, _ = e.Cards(ctx, "M-2")
		if cs[0].Status != lapse.CardVoided || cs[0].Deducted != 7 || cs[0].Used != 3 || cs[1].Status != lapse.CardVoided {
			t.Errorf("cards after the refund: %+v, %+v", cs[0], cs[1])
		}
		if _, _, err := e.UseCard(ctx, cs[0].ID, ""); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("using a voided card = %v, want conflict", err)
		}
		if _, _, err := e.UseCard(ctx, 999999, ""); lapse.ErrorCode(err) != lapse.ENOTFOUND {
			t.Errorf("using an unknown card = %v", err)
		}
	})
}

// TestMembershipRefundRacesCompensation: a compensation issues the cards
// while a refund of the order starts and revokes what there is; the
// compensation then finds the order refunding and takes its cards back. No
// card is left active on a refunded order, whichever way the race goes.
func TestMembershipRefundRacesCompensation(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		cards := &flakyCards{fails: 1}
		e := memberEngine(t, open(), clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		paidMembership(t, e, clk, "M-3")
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		if st := orderState(t, e, "M-3"); st != flows.Compensating {
			t.Fatalf("after the first failure: %s", st)
		}
		// The compensation runs, issues, and is held before it records it.
		release := make(chan struct{})
		cards.mu.Lock()
		cards.hold, cards.held = release, make(chan struct{})
		cards.mu.Unlock()
		clk.Advance(2 * time.Minute)
		compensating := make(chan error, 1)
		go func() {
			_, err := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "w-compensation"}).RunOnce(ctx)
			compensating <- err
		}()
		<-cards.held
		if cs, _ := e.Cards(ctx, "M-3"); len(cs) != 2 || cs[0].Status != lapse.CardActive {
			t.Fatalf("held compensation issued %+v", cs)
		}
		// Meanwhile the customer is refunded; the revocation runs at once.
		if _, _, err := e.RefundOrder(ctx, "M-3", engine.RefundRequest{Amount: 1000, By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{Owner: "w-refund"}))
		if st := orderState(t, e, "M-3"); st != flows.MembershipRefunded {
			t.Fatalf("after the refund: %s", st)
		}
		cards.mu.Lock()
		cards.hold = nil
		cards.mu.Unlock()
		close(release)
		if err := <-compensating; err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		cs, _ := e.Cards(ctx, "M-3")
		for _, c := range cs {
			if c.Status != lapse.CardActive {
				continue
			}
			t.Errorf("card %+v is active on a refunded order", c)
		}
		if st := orderState(t, e, "M-3"); st != flows.MembershipRefunded {
			t.Errorf("the late compensation moved the order to %s", st)
		}
		into, _, _ := history(t, e, "M-3")
		if into[flows.Issued] != 0 {
			t.Errorf("a refunded order was issued: %v", into)
		}
	})
}

// TestMembershipRefundOvertakesIssue: an attempt to issue is on its way to a
// card service that revokes once per key, and the refund's revoke gets there
// first, finding no cards. The cards the attempt then issues are revoked
// under a key of their own: the refund's key again would be a replay, which
// the service answers without revoking anything.
func TestMembershipRefundOvertakesIssue(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		release := make(chan struct{})
		cards := &flakyCards{keyed: true, early: true, hold: release, held: make(chan struct{})}
		e := memberEngine(t, open(), clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		paidMembership(t, e, clk, "M-8")
		issuing := make(chan error, 1)
		go func() {
			_, err := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "w-issue"}).RunOnce(ctx)
			issuing <- err
		}()
		<-cards.held
		if _, _, err := e.RefundOrder(ctx, "M-8", engine.RefundRequest{Amount: 1000, By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{Owner: "w-refund"}))
		if st := orderState(t, e, "M-8"); st != flows.MembershipRefunded {
			t.Fatalf("after the refund: %s", st)
		}
		cards.mu.Lock()
		cards.hold = nil
		cards.mu.Unlock()
		close(release)
		if err := <-issuing; err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		cs, _ := e.Cards(ctx, "M-8")
		if len(cs) != 2 {
			t.Fatalf("cards: %+v", cs)
		}
		for _, c := range cs {
			if c.Status == lapse.CardActive {
				t.Errorf("card %d (%s) is active on a refunded order", c.ID, c.Product)
			}
		}
		if st := orderState(t, e, "M-8"); st != flows.MembershipRefunded {
			t.Errorf("the late issue moved the order to %s", st)
		}
	})
}
