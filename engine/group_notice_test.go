package engine_test

import (
	"net/http"
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

// members returns the members of group id by user.
func members(t *testing.T, e *engine.Engine, id string) map[string]*lapse.GroupMember {
	t.Helper()
	g, err := e.Group(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	ms := map[string]*lapse.GroupMember{}
	for _, m := range g.Members {
		ms[m.UserID] = m
	}
	return ms
}

// chargeNotice returns the paid notice of member m's charge as the
// sandbox's callback reports it, verified: the provider knows the charge
// by the member's charge key, its order_no.
func chargeNotice(t *testing.T, sb *payment.Sandbox, clk lapse.Clock, m *lapse.GroupMember) *lapse.PaymentNotice {
	t.Helper()
	i := slices.IndexFunc(sb.Payments(), func(p lapse.ProviderPayment) bool { return p.OrderNo == m.Key })
	if i < 0 {
		t.Fatalf("the sandbox holds no charge of member %s (key %s)", m.UserID, m.Key)
	}
	body, sig := sb.Callback(sb.Payments()[i].TxnID)
	h := http.Header{}
	h.Set(payment.SignatureHeader, sig)
	n, err := sb.Verifier().Verify(h, body, clk.Now())
	if err != nil || n.OrderNo != m.Key || n.Amount != m.Amount {
		t.Fatalf("the callback of %s's charge = %+v, %v", m.UserID, n, err)
	}
	return n
}

// reviewReasons returns the reasons of the open reviews of order no.
func reviewReasons(t *testing.T, e *engine.Engine, no string) []string {
	t.Helper()
	var out []string
	for _, r := range orderReviews(t, e, no) {
		out = append(out, r.Reason)
	}
	return out
}

// acked applies n, which must be acknowledged; what names it.
func acked(t *testing.T, e *engine.Engine, what string, n *lapse.PaymentNotice) {
	t.Helper()
	if _, err := e.ApplyPayment(ctxT(t), n); err != nil {
		t.Fatalf("%s: ApplyPayment = %v; want it acknowledged", what, err)
	}
}

// TestGroupChargeNotices: a provider's callback about a group member's
// charge (known to the provider by the member's charge key) is not refused
// as about an unknown order. One that confirms a charge whose answer was
// lost settles it as the provider's answer would; one that confirms a
// charge recorded is a replay and changes nothing; one that contradicts
// the charge (another amount or currency, a second transaction, a time
// before the group) is in review on the group, charges and marks nothing,
// and is acknowledged. Every member is charged once (S7).
func TestGroupChargeNotices(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, UnknownRate: 1})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-CN", time.Minute))
		for _, u := range []string{"u1", "u2", "u3"} {
			if _, _, err := e.JoinGroup(ctx, "G-CN", engine.JoinRequest{UserID: u, Method: "tok-" + u, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		// Every charge is made and its answer lost: all three charging.
		drain(t, d)
		ms := members(t, e, "G-CN")
		for _, m := range ms {
			if m.Status != lapse.ChargeCharging || m.Attempts != 1 {
				t.Fatalf("after lost answers: %+v", m)
			}
		}
		apply := func(what string, n *lapse.PaymentNotice) {
			t.Helper()
			acked(t, e, what, n)
		}
		reviews := func() []string {
			t.Helper()
			return reviewReasons(t, e, "G-CN")
		}

		// u1's callback is the answer its charge lost: u1 is charged, by
		// that transaction; the same callback again changes nothing.
		n1 := chargeNotice(t, sb, clk, ms["u1"])
		apply("u1's callback", n1)
		u1 := members(t, e, "G-CN")["u1"]
		if u1.Status != lapse.ChargeCharged || u1.TxnID != n1.TxnID || u1.Attempts != 1 || u1.ChargedAt == nil {
			t.Fatalf("u1 after its callback: %+v", u1)
		}
		clk.Advance(time.Millisecond)
		apply("u1's callback again", n1)
		if again := members(t, e, "G-CN")["u1"]; again.Status != u1.Status || again.TxnID != u1.TxnID ||
			again.Attempts != u1.Attempts || !again.UpdatedAt.Equal(u1.UpdatedAt) {
			t.Errorf("a replay changed u1: %+v, was %+v", again, u1)
		}
		if rs := reviews(); len(rs) != 0 {
			t.Errorf("reviews after a true callback and its replay: %q", rs)
		}

		// u2's callback says another amount than the member's: as the
		// provider's answer to the charge saying so would, it does not
		// charge u2, and an operator is told, once however often it comes.
		n2 := chargeNotice(t, sb, clk, ms["u2"])
		n2.Amount = 500
		apply("u2's contradicting callback", n2)
		apply("u2's contradicting callback again", n2)
		if u2 := members(t, e, "G-CN")["u2"]; u2.Status == lapse.ChargeCharged {
			t.Errorf("u2 is charged by a callback of another amount: %+v", u2)
		}
		if rs := reviews(); len(rs) != 1 || !strings.Contains(rs[0], "u2") || !strings.Contains(rs[0], "5.00 CNY") {
			t.Errorf("reviews after u2's contradicting callback: %q", rs)
		}

		// The gateway recovers; the next round settles the group: u2's
		// charge, asked for again under its key, is the one made, and u3's
		// is found by asking. Nothing is charged twice.
		if err := sb.SetRates(0, 0); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		drain(t, d)
		g, _ := e.Group(ctx, "G-CN")
		if g.Order.State != flows.GroupSettled {
			t.Fatalf("the group is %s, want SETTLED", g.Order.State)
		}
		ms = members(t, e, "G-CN")
		for _, m := range ms {
			if m.Status != lapse.ChargeCharged || m.TxnID == "" {
				t.Errorf("member %s: %+v", m.UserID, m)
			}
		}

		// Callbacks about charges recorded: a replay changes nothing; one
		// with another amount or currency, a second transaction for a
		// member charged, or a time before the group was created, is in
		// review on the group, once each, and charges nothing.
		n1 = chargeNotice(t, sb, clk, ms["u1"])
		apply("u1's callback after settling", n1)
		other := *n1
		other.Amount = 1990
		apply("another amount", &other)
		apply("another amount again", &other)
		other = *n1
		other.Currency = "USD"
		apply("another currency", &other)
		second := *n1
		second.TxnID = "sbx_second"
		apply("a second transaction", &second)
		apply("a second transaction again", &second)
		early := chargeNotice(t, sb, clk, ms["u3"])
		early.PaidAt = t0.Add(-time.Hour)
		apply("a time before the group", early)
		rs := reviews()
		if len(rs) != 5 {
			t.Errorf("reviews of G-CN = %d: %q; want 5", len(rs), rs)
		}
		for _, want := range []string{"19.90 CNY", "9.90 USD", "sbx_second", "before"} {
			if !slices.ContainsFunc(rs, func(r string) bool { return strings.Contains(r, want) }) {
				t.Errorf("no review of G-CN names %s: %q", want, rs)
			}
		}
		after := members(t, e, "G-CN")
		for u, m := range ms {
			if a := after[u]; a.Status != m.Status || a.TxnID != m.TxnID || a.Attempts != m.Attempts || a.Amount != m.Amount {
				t.Errorf("member %s moved: %+v, was %+v", u, a, m)
			}
		}
		// The second transaction was captured: it is on the books, in review.
		pays, err := e.Payments(ctx, "G-CN")
		if err != nil || len(pays) != 1 || pays[0].TxnID != "sbx_second" || pays[0].Status != lapse.PaymentReview {
			t.Errorf("payments of G-CN = %+v, %v; want sbx_second in review", pays, err)
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || rec.GroupCharges != 3 || tot.Applied != 3*990 || tot.Review != 990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v", rec, tot, err)
		}
		paid := map[string]int{}
		for _, p := range sb.Payments() {
			paid[p.OrderNo]++
		}
		for _, m := range ms {
			if paid[m.Key] != 1 {
				t.Errorf("member %s was charged %d times at the provider", m.UserID, paid[m.Key])
			}
		}
		if into, _, _ := history(t, e, "G-CN"); into[flows.GroupSettled] != 1 {
			t.Errorf("G-CN's history: %v", into)
		}

		// A refund of a member's charge, which Lapse never asks for: on
		// the desk, the member as charged; sent again, the same review.
		refund := *n1
		refund.Kind, refund.RefundID = lapse.NoticeRefunded, "rf-u1"
		apply("a refund of u1's charge", &refund)
		apply("a refund of u1's charge again", &refund)
		if rs := reviews(); len(rs) != 6 || !slices.ContainsFunc(rs, func(r string) bool { return strings.Contains(r, "rf-u1") }) {
			t.Errorf("reviews after a refund of u1's charge: %q", rs)
		}
		if m := members(t, e, "G-CN")["u1"]; m.Status != lapse.ChargeCharged || m.TxnID != ms["u1"].TxnID {
			t.Errorf("u1 after a refund notice: %+v", m)
		}

		// A callback for a member Lapse never charged (the group is open):
		// in review, the member still pending.
		create(t, e, groupReq("G-CP", time.Hour))
		p1, _, err := e.JoinGroup(ctx, "G-CP", engine.JoinRequest{UserID: "p1", Method: "tok-p1", By: app})
		if err != nil {
			t.Fatal(err)
		}
		apply("a charge never asked for", &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "sbx_p1",
			OrderNo: p1.Key, Amount: p1.Amount, Currency: p1.Currency, PaidAt: clk.Now(), Raw: []byte(`{}`)})
		if m := members(t, e, "G-CP")["p1"]; m.Status != lapse.ChargePending || m.Attempts != 0 || m.TxnID != "" {
			t.Errorf("p1 after a callback for a charge never asked for: %+v", m)
		}
		if rs := orderReviews(t, e, "G-CP"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "sbx_p1") {
			t.Errorf("reviews of G-CP = %+v", rs)
		}
		if g, _ := e.Group(ctx, "G-CP"); g.Order.State != flows.GroupOpen {
			t.Errorf("G-CP is %s", g.Order.State)
		}

		// A key that names no member and no order is an unknown order: the
		// payment is held without it.
		n := *n1
		n.OrderNo, n.TxnID = "lapse-charge-000000000000000000000000", "sbx_nope"
		if got, err := e.ApplyPayment(ctx, &n); err != nil || got.Status != lapse.PaymentHeld {
			t.Errorf("a callback for no member and no order = %+v, %v, want held", got, err)
		}
	})
}

// TestGroupChargeNoticesRace: callbacks that confirm charges whose answers
// were lost, while a settlement round asks the provider about the same
// charges: whichever records a charge first, each member is charged once,
// by its one transaction, and the group settles.
func TestGroupChargeNoticesRace(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, UnknownRate: 1})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-RC", time.Minute))
		const n = 12
		for i := range n {
			if _, _, err := e.JoinGroup(ctx, "G-RC", engine.JoinRequest{UserID: orderNo("u", i), Method: "tok", By: app}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		drain(t, d) // every answer lost
		var notices []*lapse.PaymentNotice
		for _, m := range members(t, e, "G-RC") {
			notices = append(notices, chargeNotice(t, sb, clk, m))
		}
		if err := sb.SetRates(0, 0); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		var wg sync.WaitGroup
		wg.Go(func() { drain(t, d) })
		for _, nt := range notices {
			wg.Go(func() {
				if _, err := e.ApplyPayment(ctx, nt); err != nil {
					t.Errorf("callback %s: %v", nt.TxnID, err)
				}
			})
		}
		wg.Wait()
		clk.Advance(time.Minute)
		drain(t, d) // a round that lost to the callbacks comes again
		g, _ := e.Group(ctx, "G-RC")
		if g.Order.State != flows.GroupSettled {
			t.Errorf("G-RC is %s, want SETTLED", g.Order.State)
		}
		txn := map[string]string{}
		for _, p := range sb.Payments() {
			if _, dup := txn[p.OrderNo]; dup {
				t.Errorf("charge %s made twice", p.OrderNo)
			}
			txn[p.OrderNo] = p.TxnID
		}
		for _, m := range g.Members {
			if m.Status != lapse.ChargeCharged || m.TxnID != txn[m.Key] || m.Attempts != 1 {
				t.Errorf("member %s: %+v", m.UserID, m)
			}
		}
		if rs := orderReviews(t, e, "G-RC"); len(rs) != 0 {
			t.Errorf("reviews of G-RC: %+v", rs)
		}
	})
}

// TestChargeKeyReserved: no order may take a number of the form of a
// member's charge key, which the provider knows the charge by, so that a
// callback naming one is about the charge, never about an order.
func TestChargeKeyReserved(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		e := newEngine(t, open(), lapse.NewManualClock(t0))
		for _, req := range []*lapse.OrderCreate{checkout(lapse.ChargeKeyPrefix+"2f7337d34af80e1efd3044a1", time.Hour),
			groupReq(lapse.ChargeKeyPrefix+"x", time.Hour)} {
			if _, _, err := e.CreateOrder(ctxT(t), req, app); lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "order_no") {
				t.Errorf("CreateOrder(%s) = %v; want invalid, naming order_no", req.OrderNo, err)
			}
		}
	})
}

// TestGroupChargeTxnCountedOnce: a provider's transaction is counted once
// when its callback names the group's own number. Such a callback records
// no payment: it is put in review (once) on the group; a refund callback of
// it is put in review on the group, not refused as of an unknown payment.
// (Under a payable order's number a member's transaction is not looked for:
// apply, payment.go, says why.) And a
// transaction recorded as a payment (a callback under the group's number
// came first) does not charge the member too when the provider then
// answers the charge with it.
func TestGroupChargeTxnCountedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-TX", time.Minute))
		for _, u := range []string{"u1", "u2"} {
			if _, _, err := e.JoinGroup(ctx, "G-TX", engine.JoinRequest{UserID: u, Method: "tok-" + u, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		drain(t, d)
		if g, _ := e.Group(ctx, "G-TX"); g.Order.State != flows.GroupSettled {
			t.Fatalf("G-TX is %s, want SETTLED", g.Order.State)
		}
		ms := members(t, e, "G-TX")

		// u1's charge under the group's number, twice.
		asGroup := chargeNotice(t, sb, clk, ms["u1"])
		asGroup.OrderNo = "G-TX"
		acked(t, e, "u1's charge under the group's number", asGroup)
		acked(t, e, "u1's charge under the group's number again", asGroup)
		refund := *asGroup
		refund.Kind, refund.RefundID = lapse.NoticeRefunded, "rf-tx"
		acked(t, e, "a refund of u1's charge under the group's number", &refund)

		if pays, err := e.Payments(ctx, "G-TX"); err != nil || len(pays) != 0 {
			t.Errorf("payments of G-TX = %+v, %v; want none: the transactions are members' charges", pays, err)
		}
		for no, want := range map[string][]string{"G-TX": {asGroup.TxnID + " of", "rf-tx"}} {
			rs := orderReviews(t, e, no)
			for _, w := range want {
				if !slices.ContainsFunc(rs, func(r *lapse.Review) bool { return strings.Contains(r.Reason, w) }) {
					t.Errorf("reviews of %s = %+v; want one naming %s", no, rs, w)
				}
			}
			if len(rs) != len(want) {
				t.Errorf("reviews of %s = %d: %+v; want %d", no, len(rs), rs, len(want))
			}
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || rec.Payments != 0 || rec.GroupCharges != 2 ||
			tot.Captured != 2*990 || tot.Applied != 2*990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want the two charges, each counted once", rec, tot, err)
		}

		// The other way round: the provider's callback under the group's
		// number comes while the member's charge is under way (its answer
		// lost), and is recorded as a payment in review on the group; the
		// provider's answer to the charge is then that transaction.
		if err := sb.SetRates(0, 1); err != nil {
			t.Fatal(err)
		}
		create(t, e, groupReq("G-TY", time.Minute))
		if _, _, err := e.JoinGroup(ctx, "G-TY", engine.JoinRequest{UserID: "v1", Method: "tok-v1", By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		v1 := members(t, e, "G-TY")["v1"]
		if v1.Status != lapse.ChargeCharging {
			t.Fatalf("v1 after a lost answer: %+v", v1)
		}
		early := chargeNotice(t, sb, clk, v1)
		early.OrderNo = "G-TY"
		acked(t, e, "v1's charge under the group's number", early)
		if err := sb.SetRates(0, 0); err != nil {
			t.Fatal(err)
		}
		for _, wait := range engine.DefaultGroupRetries {
			clk.Advance(wait)
			drain(t, d)
		}
		if v1 = members(t, e, "G-TY")["v1"]; v1.Status == lapse.ChargeCharged {
			t.Errorf("v1 is charged by %s, which is on the books already as a payment: %+v", early.TxnID, v1)
		}
		pays, err := e.Payments(ctx, "G-TY")
		if err != nil || len(pays) != 1 || pays[0].TxnID != early.TxnID || pays[0].Status != lapse.PaymentReview {
			t.Errorf("payments of G-TY = %+v, %v; want %s in review", pays, err, early.TxnID)
		}
		if rs := orderReviews(t, e, "G-TY"); !slices.ContainsFunc(rs, func(r *lapse.Review) bool {
			return strings.Contains(r.Reason, "v1") && strings.Contains(r.Reason, early.TxnID)
		}) {
			t.Errorf("reviews of G-TY = %+v; want one naming v1's charge", rs)
		}
		rec, err = e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || rec.GroupCharges != 2 || tot.Captured != 3*990 || tot.Review != 990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want v1's charge counted once, in review", rec, tot, err)
		}
	})
}
