package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
)

func groupEngine(t *testing.T, s lapse.Store, clk lapse.Clock, sb *payment.Sandbox) *engine.Engine {
	t.Helper()
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk,
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func groupReq(id string, ttl time.Duration) *lapse.OrderCreate {
	return &lapse.OrderCreate{OrderNo: id, Flow: "groupbuy", UserID: "organiser", Amount: 990, Currency: "CNY", TTL: ttl}
}

// TestGroupBuy runs seed 000's group buy: 200 members join (concurrently),
// the deadline closes the group, the sandbox fails half of the charges and
// loses the answer of some it made, rounds follow the 1, 2, 4, 8, 16 s
// schedule until the group fails; once the provider recovers, an operator's
// retry settles it. Every member is charged exactly once.
func TestGroupBuy(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, FailRate: 0.5, UnknownRate: 0.1,
			Rand: rand.NewPCG(7, 7)})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-1", time.Hour))

		const members = 200
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < members; i += 8 {
					_, created, err := e.JoinGroup(ctx, "G-1", engine.JoinRequest{UserID: fmt.Sprintf("u%03d", i), Method: "tok-" + fmt.Sprint(i), By: app})
					if err != nil || !created {
						t.Errorf("join u%03d = %v, %v", i, created, err)
					}
				}
			})
		}
		wg.Wait()
		if _, created, err := e.JoinGroup(ctx, "G-1", engine.JoinRequest{UserID: "u000", Method: "tok-0", By: app}); err != nil || created {
			t.Errorf("joining twice = %v, %v; want the member, not created", created, err)
		}
		if _, _, err := e.JoinGroup(ctx, "G-1", engine.JoinRequest{UserID: "u000", Method: "other", By: app}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("joining again with another method = %v, want conflict", err)
		}
		for _, bad := range []engine.JoinRequest{{Method: "x"}, {UserID: "x"}, {UserID: "x", Method: "y", Provider: "nope"}} {
			if _, _, err := e.JoinGroup(ctx, "G-1", bad); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("JoinGroup(%+v) = %v, want invalid", bad, err)
			}
		}
		g, err := e.Group(ctx, "G-1")
		if err != nil || g.Order.State != flows.GroupOpen || len(g.Members) != members || g.Order.Version != members+1 {
			t.Fatalf("group after joins: %+v, %d members, %v", g.Order, len(g.Members), err)
		}
		if !g.Order.DeadlineAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("joining moved the deadline to %v", g.Order.DeadlineAt)
		}

		// At the deadline the group closes; joining is refused from then on.
		clk.Set(t0.Add(time.Hour))
		if _, _, err := e.JoinGroup(ctx, "G-late", engine.JoinRequest{UserID: "x", Method: "y"}); lapse.ErrorCode(err) != lapse.ENOTFOUND {
			t.Errorf("joining an unknown group = %v", err)
		}
		if _, _, err := e.JoinGroup(ctx, "G-1", engine.JoinRequest{UserID: "late", Method: "tok"}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("joining at the deadline = %v, want conflict", err)
		}
		cl := engine.NewClaimer(e, engine.ClaimerConfig{})
		if n, err := cl.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("claimer = %d, %v", n, err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		state := func() lapse.State {
			g, err := e.Group(ctx, "G-1")
			if err != nil {
				t.Fatal(err)
			}
			return g.Order.State
		}
		// Six rounds: the first, then after 1, 2, 4, 8 and 16 s. The provider
		// fails half the charges in the first round, then goes down.
		rounds := func() {
			for i, wait := range append([]time.Duration{0}, engine.DefaultGroupRetries...) {
				clk.Advance(wait)
				drain(t, d)
				if i == 0 && state() == flows.GroupClosed {
					if err := sb.SetRates(1, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		rounds()
		if st := state(); st != flows.GroupFailed {
			t.Fatalf("after the schedule the group is %s, want FAILED", st)
		}
		hs, err := e.Deliveries(ctx, "G-1")
		if err != nil {
			t.Fatal(err)
		}
		var settle *engine.DeliveryHistory
		for i := range hs {
			if hs[i].Subscriber == engine.SettleSubscriber {
				settle = &hs[i]
			}
		}
		if settle == nil || len(settle.History) != 6 {
			t.Fatalf("settle delivery: %+v", settle)
		}
		at := t0.Add(time.Hour)
		for i, a := range settle.History {
			if i > 0 {
				at = at.Add(engine.DefaultGroupRetries[i-1])
			}
			if !a.StartedAt.Equal(at) {
				t.Errorf("attempt %d started at %v, want %v", i+1, a.StartedAt, at)
			}
		}
		if settle.Status != lapse.DeliveryDone {
			t.Errorf("a failed settlement's delivery is %s, want done (FAILED is its end)", settle.Status)
		}

		// What was charged of a failed group is in an operator's hands.
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 || rec.GroupCharges == 0 || rec.Totals["CNY"].Review != int64(rec.GroupCharges)*990 {
			t.Fatalf("Reconcile of a failed group = %+v, %v", rec, err)
		}
		// Nothing retries a failed group but an operator.
		clk.Advance(time.Hour)
		drain(t, d)
		if st := state(); st != flows.GroupFailed {
			t.Fatalf("a failed group moved by itself to %s", st)
		}
		// An order's retry does not charge a group's members.
		if _, err := e.Retry(ctx, "G-1", "wrong kind", app); !errors.Is(err, engine.ErrRetryIsGroup) || state() != flows.GroupFailed {
			t.Fatalf("Retry of a group buy = %v (the group is %s), want ErrRetryIsGroup and FAILED", err, state())
		}
		// What a retry can charge: the price of each member not charged yet.
		if amount, cur, err := e.RetryGroupStake(ctx, "G-1"); err != nil || cur != "CNY" || amount != int64(members-rec.GroupCharges)*990 {
			t.Errorf("RetryGroupStake = %d %s, %v; want %d CNY (%d of %d members charged)", amount, cur, err,
				int64(members-rec.GroupCharges)*990, rec.GroupCharges, members)
		}
		if _, _, err := e.RetryStake(ctx, "G-1"); !errors.Is(err, engine.ErrRetryIsGroup) {
			t.Errorf("RetryStake of a group buy = %v, want ErrRetryIsGroup", err)
		}
		// The provider recovers, flakily; an operator retries until everyone
		// left is charged.
		for try := 0; state() == flows.GroupFailed; try++ {
			fail := 0.5
			if try == 3 {
				fail = 0
			}
			if err := sb.SetRates(fail, fail/5); err != nil {
				t.Fatal(err)
			}
			if _, err := e.RetryGroup(ctx, "G-1", "provider is back", app); err != nil {
				t.Fatal(err)
			}
			if try == 0 {
				if _, err := e.RetryGroup(ctx, "G-1", "twice", app); lapse.ErrorCode(err) != lapse.ECONFLICT {
					t.Errorf("retrying a group that is not failed = %v, want conflict", err)
				}
			}
			for _, wait := range append([]time.Duration{0}, engine.DefaultGroupRetries...) {
				clk.Advance(wait)
				drain(t, d)
			}
		}
		if st := state(); st != flows.GroupSettled {
			t.Fatalf("after the retries the group is %s", st)
		}
		g, _ = e.Group(ctx, "G-1")
		paid := map[string]int{}
		for _, p := range sb.Payments() {
			if p.Status == lapse.ProviderPaid {
				paid[p.OrderNo]++
			}
		}
		for _, m := range g.Members {
			if m.Status != lapse.ChargeCharged || m.TxnID == "" || m.ChargedAt == nil {
				t.Errorf("member %s: %+v", m.UserID, m)
			}
			if paid[m.Key] != 1 {
				t.Errorf("member %s was charged %d times at the provider", m.UserID, paid[m.Key])
			}
		}
		if len(paid) != members {
			t.Errorf("the provider made %d charges, want %d", len(paid), members)
		}
		rec, err = e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 || rec.GroupCharges != members || rec.Totals["CNY"].Applied != members*990 {
			t.Errorf("Reconcile of the settled group = %+v, %v", rec, err)
		}
		into, events, _ := history(t, e, "G-1")
		if into[flows.GroupClosed] != into[flows.GroupFailed]+1 || into[flows.GroupSettled] != 1 || events[flows.EventGroupFailed] != into[flows.GroupFailed] {
			t.Errorf("history: %v, %v", into, events)
		}
	})
}

// TestGroupBuyResumes: a settlement stopped anywhere resumes from the last
// committed step. A member left charging (its answer lost, or its worker
// dead) is asked about at the provider, not charged again; a group found
// closed goes straight on charging.
func TestGroupBuyResumes(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, UnknownRate: 1})
		s := open()
		e := groupEngine(t, s, clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-2", time.Minute))
		for i := range 5 {
			if _, _, err := e.JoinGroup(ctx, "G-2", engine.JoinRequest{UserID: fmt.Sprintf("u%d", i), Method: "tok", By: app}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		// Every charge is made and its answer lost: all five left charging.
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		g, _ := e.Group(ctx, "G-2")
		for _, m := range g.Members {
			if m.Status != lapse.ChargeCharging || m.Attempts != 1 {
				t.Fatalf("after lost answers: %+v", m)
			}
		}
		// A new process (a new engine on the same database) resumes.
		if err := sb.SetRates(0, 0); err != nil {
			t.Fatal(err)
		}
		e2 := groupEngine(t, open(), clk, sb)
		clk.Advance(time.Second)
		drain(t, engine.NewDeliverer(e2, engine.DelivererConfig{}))
		g, _ = e2.Group(ctx, "G-2")
		if g.Order.State != flows.GroupSettled {
			t.Fatalf("resumed group is %s", g.Order.State)
		}
		for _, m := range g.Members {
			if m.Status != lapse.ChargeCharged || m.Attempts != 1 {
				t.Errorf("member %s after resuming: %+v (want charged by the first attempt, found by asking)", m.UserID, m)
			}
		}
		if c := sb.Calls(); c.Charge != 5 || len(sb.Payments()) != 5 {
			t.Errorf("provider saw %d charges and holds %d payments, want 5 and 5", c.Charge, len(sb.Payments()))
		}
	})
}

// TestGroupTooFewMembers: a group that closes with fewer members than it
// needs (its metadata's min_members, one by default) fails at once through
// its flow (CLOSED --FAIL--> FAILED, fired by the settle subscriber), no one
// charged; one that has them settles. A min_members that is not a count of
// members is refused at creation.
func TestGroupTooFewMembers(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		withMin := func(id, md string) *lapse.OrderCreate {
			req := groupReq(id, time.Hour)
			req.Metadata = []byte(md)
			return req
		}
		create(t, e, groupReq("G-none", time.Hour))
		create(t, e, withMin("G-short", `{"min_members": 2}`))
		create(t, e, withMin("G-full", `{"min_members": 2, "title": "tea"}`))
		for _, bad := range []string{`{"min_members": 0}`, `{"min_members": 1.5}`, `{"min_members": "2"}`, `{"min_members": 2000000}`} {
			if _, _, err := e.CreateOrder(ctx, withMin("G-bad", bad), app); lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "metadata.min_members") {
				t.Errorf("min_members %s = %v, want invalid naming metadata.min_members", bad, err)
			}
		}
		join := func(group, user string) {
			t.Helper()
			if _, _, err := e.JoinGroup(ctx, group, engine.JoinRequest{UserID: user, Method: "tok-" + user, By: app}); err != nil {
				t.Fatalf("join %s %s: %v", group, user, err)
			}
		}
		join("G-short", "u1")
		join("G-full", "u1")
		join("G-full", "u2")

		clk.Set(t0.Add(time.Hour))
		if n, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); n != 3 || err != nil {
			t.Fatalf("claimer = %d, %v", n, err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		for id, want := range map[string]lapse.State{"G-none": flows.GroupFailed, "G-short": flows.GroupFailed, "G-full": flows.GroupSettled} {
			g, err := e.Group(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if g.Order.State != want {
				t.Errorf("%s is %s, want %s", id, g.Order.State, want)
			}
			_, events, trs := history(t, e, id)
			last := trs[len(trs)-1]
			if want == flows.GroupFailed {
				if last.Event != flows.Fail || last.FiredBy != lapse.FiredByEffect || !strings.Contains(last.Reason, "fewer than the") || events[flows.EventGroupFailed] != 1 {
					t.Errorf("%s: last transition %+v, events %v", id, last, events)
				}
				for _, m := range g.Members {
					if m.Status != lapse.ChargePending || m.Attempts != 0 {
						t.Errorf("%s: member %s of a group too small was charged: %+v", id, m.UserID, m)
					}
				}
			}
		}
		if len(sb.Payments()) != 2 {
			t.Errorf("the provider made %d charges, want the 2 of G-full", len(sb.Payments()))
		}
	})
}

// TestGroupEndsOnlyAsAGroup: an event that ends a group buy while it is
// open (CANCEL, which cancels every member's purchase) is refused through
// the events of an order (Fire.External) and taken only as the group's
// (Fire.Group), whose stake is its members; other events of the group, and
// the events of an order that is not a group buy, are as they were.
func TestGroupEndsOnlyAsAGroup(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-1", time.Hour))
		for _, u := range []string{"u1", "u2", "u3"} {
			if _, _, err := e.JoinGroup(ctx, "G-1", engine.JoinRequest{UserID: u, Method: "tok-" + u, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		create(t, e, &lapse.OrderCreate{OrderNo: "C-1", Flow: "checkout", UserID: "u", Amount: 100, Currency: "CNY"})
		cancel := engine.Fire{Event: flows.Cancel, Reason: "supplier gone", By: app, External: true}

		_, err := e.Fire(ctx, "G-1", cancel)
		if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "cancels every member's purchase") {
			t.Fatalf("CANCEL of an open group as an order's event = %v, want invalid", err)
		}
		if g, err := e.Group(ctx, "G-1"); err != nil || g.Order.State != flows.GroupOpen {
			t.Fatalf("after a refused CANCEL: %+v, %v", g, err)
		}
		group := cancel
		group.Group = true
		if n, err := e.GroupFireStake(ctx, "G-1", group); n != 3 || err != nil {
			t.Fatalf("GroupFireStake(CANCEL) = %d, %v; want its 3 members", n, err)
		}
		for _, c := range []struct {
			no   string
			f    engine.Fire
			code string
		}{
			{"C-1", group, lapse.EINVALID},                                        // not a group buy
			{"G-1", engine.Fire{Event: flows.Close, Group: true}, lapse.EINVALID}, // internal
			{"G-1", engine.Fire{Event: "NOPE", Group: true}, lapse.EINVALID},
			{"G-1", engine.Fire{Event: flows.Cancel, Reason: "bad\x00", Group: true}, lapse.EINVALID},
			{"G-none", group, lapse.ENOTFOUND},
		} {
			if _, err := e.GroupFireStake(ctx, c.no, c.f); lapse.ErrorCode(err) != c.code {
				t.Errorf("GroupFireStake(%s, %s) = %v, want %s", c.no, c.f.Event, err, c.code)
			}
			if _, err := e.Fire(ctx, c.no, c.f); lapse.ErrorCode(err) != c.code {
				t.Errorf("Fire(%s, %s as the group) = %v, want %s", c.no, c.f.Event, err, c.code)
			}
		}
		// As an order's event, the group's CANCEL is refused before it is
		// judged; a checkout's CANCEL ends that one order.
		if _, err := e.FireStake(ctx, "G-1", cancel); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("FireStake(CANCEL) of an open group = %v, want invalid", err)
		}
		if n, err := e.FireStake(ctx, "C-1", cancel); n != 1 || err != nil {
			t.Errorf("FireStake(CANCEL) of an unpaid checkout = %d, %v; want its 1 order", n, err)
		}
		o, err := e.Fire(ctx, "G-1", group)
		if err != nil || o.State != flows.GroupCancelled {
			t.Fatalf("CANCEL as the group = %+v, %v; want CANCELLED", o, err)
		}
		if _, err := e.GroupFireStake(ctx, "G-1", group); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("GroupFireStake of a cancelled group = %v, want conflict", err)
		}
		// An order that is not a group buy cancels as ever.
		if o, err := e.Fire(ctx, "C-1", cancel); err != nil || o.State != flows.Closed {
			t.Errorf("CANCEL of a checkout = %+v, %v", o, err)
		}
		if _, err := e.FireStake(ctx, "C-1", cancel); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("FireStake(CANCEL) of a closed checkout = %v, want conflict", err)
		}
	})
}
