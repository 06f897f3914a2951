package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
)

// wrongCharger is a provider port whose charges all take another amount
// than asked: a gateway bug, or a misconfigured adapter.
type wrongCharger struct{ fakeProvider }

func (w *wrongCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return &lapse.ProviderPayment{TxnID: "wc-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount / 2, Currency: r.Currency, PaidAt: t0.Add(time.Minute)}, nil
}

// settleThrough creates group id with its members (each join's By is app),
// closes it at its deadline and runs its settlement through the whole retry
// schedule.
func settleThrough(t *testing.T, e *engine.Engine, clk *lapse.ManualClock, id string, joins ...engine.JoinRequest) {
	t.Helper()
	ctx := ctxT(t)
	create(t, e, groupReq(id, time.Minute))
	for _, j := range joins {
		j.By = app
		if _, _, err := e.JoinGroup(ctx, id, j); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	d := engine.NewDeliverer(e, engine.DelivererConfig{})
	for _, wait := range append([]time.Duration{0}, engine.DefaultGroupRetries...) {
		clk.Advance(wait)
		drain(t, d)
	}
}

// TestGroupChargeAnswerContradicts: a charge the provider answers with
// another amount than asked is not taken for the member's charge: the
// member is not marked charged (the group fails after its schedule, counted
// nothing), and an operator is told on the group, once.
func TestGroupChargeAnswerContradicts(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &wrongCharger{}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-WC", engine.JoinRequest{UserID: "u1", Method: "tok"})
		g, _ := e.Group(ctx, "G-WC")
		if m := g.Members[0]; m.Status == lapse.ChargeCharged || g.Order.State != flows.GroupFailed {
			t.Errorf("G-WC is %s with u1 %+v; want FAILED, u1 not charged", g.Order.State, m)
		}
		if rs := orderReviews(t, e, "G-WC"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "4.95 CNY") {
			t.Errorf("reviews of G-WC = %+v; want one naming what the provider charged", rs)
		}
		// What the provider took is on the books, in review, as an order's
		// payment of another amount is: captured and in review in the
		// totals, though no member is charged.
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || rec.GroupCharges != 0 || rec.Payments != 0 || len(rec.Issues) != 0 ||
			tot == nil || tot.Captured != 495 || tot.Review != 495 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want 4.95 CNY captured, in review, and no group charge counted", rec, tot, err)
		}

		// A member's charge that failed with a transaction the books do
		// not hold (recorded so by an earlier Lapse, which kept no more of
		// it than its id) is money the reconciliation cannot place.
		create(t, e, groupReq("G-WL", time.Hour))
		m, _, err := e.JoinGroup(ctx, "G-WL", engine.JoinRequest{UserID: "u9", Method: "tok", By: app})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Store().GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: m.ID, From: lapse.ChargePending,
			To: lapse.ChargeFailed, TxnID: "wl-1", Error: "the provider charged 1.00 CNY, not 9.90 CNY", At: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		rec, err = e.Reconcile(ctx)
		if err != nil || !slices.ContainsFunc(rec.Issues, func(is engine.ReconcileIssue) bool {
			return is.OrderNo == "G-WL" && is.TxnID == "wl-1" && strings.Contains(is.Problem, "u9")
		}) {
			t.Errorf("Reconcile = %+v, %v; want an issue naming u9's charge wl-1", rec, err)
		}
	})
}

// TestGroupChargeMerchant: a member's charge is checked against the
// merchant account configured for its provider, as an order's payment is.
// A charge the provider answers as made to another account does not charge
// the member: it is on the books in review, with a review on the group. A
// callback that repeats a member's charge but names another account moves
// nothing and is put in review, once.
func TestGroupChargeMerchant(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		ours := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, Merchant: "shop-1"})
		theirs := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, Merchant: "shop-2"})
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk, Payments: engine.PaymentConfig{
			Providers: map[string]lapse.PaymentProvider{"sandbox": ours, "other": theirs},
			Merchants: map[string]string{"sandbox": "shop-1", "other": "shop-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-MA", engine.JoinRequest{UserID: "u1", Provider: "sandbox", Method: "tok-u1"},
			engine.JoinRequest{UserID: "u2", Provider: "other", Method: "tok-u2"})
		ms := members(t, e, "G-MA")
		if ms["u1"].Status != lapse.ChargeCharged {
			t.Errorf("u1, charged to the merchant configured: %+v", ms["u1"])
		}
		if ms["u2"].Status == lapse.ChargeCharged {
			t.Errorf("u2 is charged by a charge to another merchant account: %+v", ms["u2"])
		}
		reviews := func() []string {
			t.Helper()
			return reviewReasons(t, e, "G-MA")
		}
		if rs := reviews(); len(rs) != 1 || !strings.Contains(rs[0], "u2") || !strings.Contains(rs[0], `"shop-2"`) {
			t.Errorf("reviews of G-MA = %q; want one naming u2's charge to shop-2", rs)
		}
		if g, _ := e.Group(ctx, "G-MA"); g.Order.State != flows.GroupFailed {
			t.Errorf("G-MA is %s, want FAILED", g.Order.State)
		}

		// u1's charge reported again, to another account.
		n := chargeNotice(t, ours, clk, ms["u1"])
		n.Merchant = "shop-3"
		acked(t, e, "u1's charge to shop-3", n)
		acked(t, e, "u1's charge to shop-3 again", n)
		if rs := reviews(); len(rs) != 2 || !slices.ContainsFunc(rs, func(r string) bool { return strings.Contains(r, `"shop-3"`) }) {
			t.Errorf("reviews of G-MA = %q; want one more, naming shop-3", rs)
		}
		if u1 := members(t, e, "G-MA")["u1"]; u1.Status != lapse.ChargeCharged || u1.TxnID != ms["u1"].TxnID ||
			u1.ChargedAt == nil || !u1.ChargedAt.Equal(*ms["u1"].ChargedAt) {
			t.Errorf("u1 moved: %+v; want it as it was, charged at %v", u1, ms["u1"].ChargedAt)
		}
	})
}

// shiftyCharger is a provider port that answers a member's first charge
// with half its amount, and every later one, under the same key, with
// another transaction of the whole amount: two captures under one key.
type shiftyCharger struct {
	fakeProvider
	mu    sync.Mutex
	calls map[string]int
}

func (s *shiftyCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[r.IdempotencyKey]++
	pay := &lapse.ProviderPayment{TxnID: "sc-1-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount / 2, Currency: r.Currency, PaidAt: t0.Add(time.Minute)}
	if s.calls[r.IdempotencyKey] > 1 {
		pay.TxnID, pay.Amount = "sc-2-"+r.IdempotencyKey, r.Amount
	}
	return pay, nil
}

// TestGroupChargeSecondAnswer: a provider that answers a member's charge,
// asked again under its key, with another transaction than the one it took
// first has captured twice. Neither charges the member; the first is held
// on the member (in review), the second is a payment in review on the
// group, and both are in the reconciliation's totals, once each.
func TestGroupChargeSecondAnswer(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &shiftyCharger{}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-SA", engine.JoinRequest{UserID: "u1", Method: "tok"})
		g, _ := e.Group(ctx, "G-SA")
		m := g.Members[0]
		if m.Status == lapse.ChargeCharged || m.TxnID != "sc-1-"+m.Key || m.CapturedAmount != 495 || g.Order.State != flows.GroupFailed {
			t.Errorf("G-SA is %s with u1 %+v; want FAILED, u1 holding its first capture, not charged", g.Order.State, m)
		}
		pays, err := e.Payments(ctx, "G-SA")
		if err != nil || len(pays) != 1 || pays[0].TxnID != "sc-2-"+m.Key || pays[0].Status != lapse.PaymentReview {
			t.Errorf("payments of G-SA = %+v, %v; want the second capture in review", pays, err)
		}
		if rs := orderReviews(t, e, "G-SA"); len(rs) != 2 {
			t.Errorf("reviews of G-SA = %+v; want one of each capture", rs)
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || tot == nil || tot.Captured != 495+990 || tot.Review != 495+990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want both captures in review", rec, tot, err)
		}
	})
}

// closedCharger is a provider port that answers every charge with a
// payment that is closed: its last word, nothing taken.
type closedCharger struct{ fakeProvider }

func (c *closedCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return &lapse.ProviderPayment{TxnID: "cc-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderClosed,
		Currency: r.Currency}, nil
}

// TestGroupChargeAnsweredClosed: a charge the provider answers as closed
// took nothing, and is the provider's answer, not one that was lost: the
// member's charge fails with it, rather than stay charging (a call whose
// answer is still awaited) through the schedule and after the group failed.
func TestGroupChargeAnsweredClosed(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &closedCharger{}}}})
		if err != nil {
			t.Fatal(err)
		}
		settleThrough(t, e, clk, "G-CC", engine.JoinRequest{UserID: "u1", Method: "tok"})
		g, err := e.Group(ctxT(t), "G-CC")
		if err != nil {
			t.Fatal(err)
		}
		m := g.Members[0]
		if g.Order.State != flows.GroupFailed || m.Status != lapse.ChargeFailed || !strings.Contains(m.LastError, "closed") ||
			m.TxnID != "" || m.Attempts != 1+len(engine.DefaultGroupRetries) {
			t.Errorf("G-CC is %s with u1 %+v; want FAILED, u1's charge failed with the provider's answer, once a round", g.Order.State, m)
		}
	})
}

// crossedCharger is a provider port that, while it makes a member's first
// charge, calls back about another capture under the member's key (a
// payment the customer made at the provider under it): the callback charges
// the member, and the charge's own answer, another transaction, comes
// after. Two captures under one key, the second answered to a member that
// moved meanwhile.
type crossedCharger struct {
	fakeProvider
	mu       sync.Mutex
	calls    map[string]int
	callback func(n *lapse.PaymentNotice) // set once the engine is made
}

func (c *crossedCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[r.IdempotencyKey]++
	first := c.calls[r.IdempotencyKey] == 1
	c.mu.Unlock()
	if first {
		c.callback(&lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "cb-" + r.IdempotencyKey,
			OrderNo: r.OrderNo, Amount: r.Amount, Currency: r.Currency, PaidAt: t0.Add(time.Minute)})
	}
	return &lapse.ProviderPayment{TxnID: "ch-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount, Currency: r.Currency, PaidAt: t0.Add(time.Minute)}, nil
}

// TestGroupChargeAnsweredAfterCallback: a charge's answer that comes after
// a callback charged the member by another transaction is a second capture
// under the member's key, and is on the books as one (a payment in review
// on the group), as it is when the callback comes after the answer: the
// member is charged once (S7), and every capture is counted (S3).
func TestGroupChargeAnsweredAfterCallback(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &crossedCharger{}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		prov.callback = func(n *lapse.PaymentNotice) { acked(t, e, "the callback of a charge under way", n) }
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-CB", engine.JoinRequest{UserID: "u1", Method: "tok"})
		g, _ := e.Group(ctx, "G-CB")
		m := g.Members[0]
		if m.Status != lapse.ChargeCharged || m.TxnID != "cb-"+m.Key || g.Order.State != flows.GroupSettled {
			t.Errorf("G-CB is %s with u1 %+v; want SETTLED, u1 charged by the callback's transaction", g.Order.State, m)
		}
		pays, err := e.Payments(ctx, "G-CB")
		if err != nil || len(pays) != 1 || pays[0].TxnID != "ch-"+m.Key || pays[0].Status != lapse.PaymentReview {
			t.Errorf("payments of G-CB = %+v, %v; want the charge's own capture in review", pays, err)
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || tot == nil || tot.Captured != 2*990 ||
			tot.Applied != 990 || tot.Review != 990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want both captures counted, one applied, one in review", rec, tot, err)
		}
	})
}

// memberReadHook is a store whose first read of a member by key outside a
// transaction runs hook before it answers with the member as read: a
// change committed between another caller's read and its decision.
type memberReadHook struct {
	lapse.Store
	once sync.Once
	hook func(m *lapse.GroupMember)
}

func (s *memberReadHook) GroupMemberGet(ctx context.Context, key string) (*lapse.GroupMember, error) {
	m, err := s.Store.GroupMemberGet(ctx, key)
	if err == nil && s.hook != nil {
		s.once.Do(func() { s.hook(m) })
	}
	return m, err
}

// TestGroupChargeDecidedOnTheMemberAsItIs: a callback about a member's
// charge is decided on the member as it is, not as it was read: when
// another answer recorded a transaction on the failed member meanwhile (a
// capture of another amount, in review), this callback's transaction is a
// second capture beside it, and does not overwrite it, which would take the
// first capture off the books (S3).
func TestGroupChargeDecidedOnTheMemberAsItIs(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		st := &memberReadHook{Store: open()}
		e, err := engine.New(st, flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &closedCharger{}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-DM", engine.JoinRequest{UserID: "u1", Method: "tok"})
		m := members(t, e, "G-DM")["u1"]
		if m.Status != lapse.ChargeFailed || m.TxnID != "" {
			t.Fatalf("u1 = %+v; want its charge failed, with no transaction", m)
		}
		// Between the callback's read of u1 and its decision, another
		// answer records a capture of half the amount on u1.
		st.hook = func(m *lapse.GroupMember) {
			if _, err := st.Store.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: m.ID, From: lapse.ChargeFailed,
				To: lapse.ChargeFailed, TxnID: "half-1", CapturedAmount: 495, CapturedCurrency: "CNY",
				Error: "the provider charged 4.95 CNY, not 9.90 CNY", At: clk.Now()}); err != nil {
				t.Error(err)
			}
		}
		acked(t, e, "a callback of the whole amount", &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid,
			TxnID: "whole-1", OrderNo: m.Key, Amount: 990, Currency: "CNY", PaidAt: clk.Now()})
		if u1 := members(t, e, "G-DM")["u1"]; u1.TxnID != "half-1" || u1.CapturedAmount != 495 || u1.Status == lapse.ChargeCharged {
			t.Errorf("u1 = %+v; want it holding the first capture, half-1, not charged", u1)
		}
		pays, err := e.Payments(ctx, "G-DM")
		if err != nil || len(pays) != 1 || pays[0].TxnID != "whole-1" || pays[0].Status != lapse.PaymentReview {
			t.Errorf("payments of G-DM = %+v, %v; want the callback's capture in review", pays, err)
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || tot == nil || tot.Captured != 495+990 || tot.Review != 495+990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want both captures in review", rec, tot, err)
		}
	})
}

// lostCharger is a provider port whose charges are all made and their
// answers lost, and which cannot be asked about them either: a provider
// timing out, or answering 5xx, through a group's whole schedule.
type lostCharger struct{ fakeProvider }

func (l *lostCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return nil, fmt.Errorf("lost: charge %s: %w", r.IdempotencyKey, lapse.ErrUnknownOutcome)
}

func (l *lostCharger) Query(_ context.Context, key string) (*lapse.ProviderPayment, error) {
	return nil, fmt.Errorf("lost: query %s: 503 service unavailable", key)
}

// TestReconcileGroupMemberCharging: a member left charging by a group that
// no longer settles (its charge's answer lost through the whole schedule,
// the group FAILED) may have been captured at the provider: the
// reconciliation names it, its group, provider and key, and what to do,
// rather than keep money the books cannot see off every report. A member
// charging in a group still settling is the settlement's, not an issue.
func TestReconcileGroupMemberCharging(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &lostCharger{}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		create(t, e, groupReq("G-LS", time.Hour))
		if _, _, err := e.JoinGroup(ctx, "G-LS", engine.JoinRequest{UserID: "u2", Method: "tok", By: app}); err != nil {
			t.Fatal(err)
		}
		settleThrough(t, e, clk, "G-LC", engine.JoinRequest{UserID: "u1", Method: "tok"})
		g, _ := e.Group(ctx, "G-LC")
		m := g.Members[0]
		if m.Status != lapse.ChargeCharging || g.Order.State != flows.GroupFailed {
			t.Fatalf("G-LC is %s with u1 %+v; want FAILED, u1 charging", g.Order.State, m)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []engine.ReconcileIssue
		for _, is := range rec.Issues {
			if is.OrderNo == "G-LC" || is.OrderNo == "G-LS" {
				got = append(got, is)
			}
		}
		if len(got) != 1 || got[0].OrderNo != "G-LC" || got[0].Provider != "sandbox" ||
			!strings.Contains(got[0].Problem, "u1") || !strings.Contains(got[0].Problem, m.Key) ||
			!strings.Contains(got[0].Problem, "sandbox") || !strings.Contains(got[0].Problem, "retry") {
			t.Errorf("Reconcile issues = %+v; want one on G-LC naming u1, its key %s, the provider and the retry", got, m.Key)
		}
		if tot := rec.Totals["CNY"]; rec.GroupCharges != 0 || (tot != nil && tot.Captured != 0) {
			t.Errorf("Reconcile = %+v (CNY %+v); want nothing counted captured that the provider did not report", rec, tot)
		}

		// Retried, the group is settling again: the member's charge is
		// still not settled, named as under way (a settlement whose
		// delivery died would otherwise keep it out of sight).
		if _, err := e.RetryGroup(ctx, "G-LC", "the provider is back", operator); err != nil {
			t.Fatal(err)
		}
		rec, err = e.Reconcile(ctx)
		if err != nil || !slices.ContainsFunc(rec.Issues, func(is engine.ReconcileIssue) bool {
			return is.OrderNo == "G-LC" && strings.Contains(is.Problem, "u1") && strings.Contains(is.Problem, m.Key) &&
				strings.Contains(is.Problem, "settling")
		}) {
			t.Errorf("Reconcile of the retried group = %+v, %v; want an issue naming u1's charge under way", rec, err)
		}
	})
}
