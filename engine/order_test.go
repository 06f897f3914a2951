package engine_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

func TestCreateOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)

		o := create(t, e, checkout("C-1", 0))
		if o.State != flows.Unpaid || o.Version != 1 || !o.DeadlineAt.Equal(t0.Add(flows.CheckoutPaymentWindow)) || o.FiredBy != lapse.FiredByApp {
			t.Errorf("default order: %+v", o)
		}
		o = create(t, e, checkout("C-2", 2*time.Second))
		if !o.DeadlineAt.Equal(t0.Add(2 * time.Second)) {
			t.Errorf("ttl 2s: deadline %v", o.DeadlineAt)
		}
		at := t0.Add(time.Hour)
		req := checkout("C-3", 0)
		req.DeadlineAt = &at
		if o = create(t, e, req); !o.DeadlineAt.Equal(at) {
			t.Errorf("deadline_at: deadline %v", o.DeadlineAt)
		}
		into, events, _ := history(t, e, "C-3")
		if into[flows.Unpaid] != 1 || events[lapse.EventOrderCreated] != 1 {
			t.Errorf("creation history: %v %v", into, events)
		}

		// Idempotent: the same request later returns the same order, even
		// with a TTL (the TTL is part of the request, not the deadline).
		clk.Advance(time.Minute)
		again, created, err := e.CreateOrder(ctxT(t), checkout("C-2", 2*time.Second), app)
		if err != nil || created || again.DeadlineAt == nil || !again.DeadlineAt.Equal(t0.Add(2*time.Second)) {
			t.Errorf("same request again = %+v, created %v, %v", again, created, err)
		}
		// A retry after the requested deadline passed still finds its order.
		soon := clk.Now().Add(time.Second)
		r5 := checkout("C-5", 0)
		r5.DeadlineAt = &soon
		create(t, e, r5)
		clk.Advance(time.Minute)
		if got, created, err := e.CreateOrder(ctxT(t), r5, app); err != nil || created || got.OrderNo != "C-5" {
			t.Errorf("retry after the deadline = %v, created %v, %v", got, created, err)
		}
		// Metadata that differs only in spacing and key order is the same request.
		m1, m2 := checkout("C-4", 0), checkout("C-4", 0)
		m1.Metadata, m2.Metadata = json.RawMessage(`{"a":1,"b":[1,2]}`), json.RawMessage(`{ "b": [1, 2], "a": 1 }`)
		create(t, e, m1)
		if _, created, err := e.CreateOrder(ctxT(t), m2, app); err != nil || created {
			t.Errorf("same metadata respelled = created %v, %v", created, err)
		}
		// Lines in another order are the same purchase, and so the same
		// request: a client that builds its lines from a map retries with
		// them shuffled. Other quantities are another request.
		i1, i2 := checkout("C-6", 0), checkout("C-6", 0)
		i1.Items = []lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "cake", Qty: 2}, {SKU: "tea", Qty: 3}}
		i2.Items = []lapse.Item{{SKU: "tea", Qty: 3}, {SKU: "cake", Qty: 2}, {SKU: "tea", Qty: 1}}
		create(t, e, i1)
		if got, created, err := e.CreateOrder(ctxT(t), i2, app); err != nil || created || !slices.Equal(got.Items, i1.Items) {
			t.Errorf("same lines in another order = %+v, created %v, %v; want the order as first created", got, created, err)
		}
		i2.Items = []lapse.Item{{SKU: "tea", Qty: 3}, {SKU: "cake", Qty: 1}, {SKU: "tea", Qty: 2}}
		if _, _, err := e.CreateOrder(ctxT(t), i2, app); !errors.Is(err, lapse.ErrOrderExists) {
			t.Errorf("other quantities = %v, want ErrOrderExists", err)
		}
		// Metadata that is an empty object says what no metadata says, as
		// items that are an empty list do.
		e1, e2 := checkout("C-7", 0), checkout("C-7", 0)
		e2.Metadata = json.RawMessage(`{ }`)
		create(t, e, e1)
		if _, created, err := e.CreateOrder(ctxT(t), e2, app); err != nil || created {
			t.Errorf("no metadata, then metadata {} = created %v, %v; want the same request", created, err)
		}
		// Same order_no, different body: conflict, nothing changes.
		diff := checkout("C-2", 2*time.Second)
		diff.Amount = 1001
		if _, _, err := e.CreateOrder(ctxT(t), diff, app); !errors.Is(err, lapse.ErrOrderExists) || lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("different body = %v, want ErrOrderExists", err)
		}
		if got, _ := e.Order(ctxT(t), "C-2"); got.Amount != 1000 || got.Version != 1 {
			t.Errorf("order after a conflicting create: %+v", got)
		}
	})
}

func TestCreateOrderInvalid(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		past := t0.Add(-time.Second)
		now := t0
		far := t0.Add(400 * 24 * time.Hour)
		cases := []struct {
			field string
			edit  func(r *lapse.OrderCreate)
		}{
			{"order_no", func(r *lapse.OrderCreate) { r.OrderNo = "" }},
			{"order_no", func(r *lapse.OrderCreate) { r.OrderNo = "has space" }},
			{"order_no", func(r *lapse.OrderCreate) { r.OrderNo = strings.Repeat("x", 65) }},
			{"flow", func(r *lapse.OrderCreate) { r.Flow = "" }},
			{"flow", func(r *lapse.OrderCreate) { r.Flow = "nope" }},
			{"user_id", func(r *lapse.OrderCreate) { r.UserID = "" }},
			{"amount", func(r *lapse.OrderCreate) { r.Amount = -1 }},
			{"currency", func(r *lapse.OrderCreate) { r.Currency = "cny" }},
			{"currency", func(r *lapse.OrderCreate) { r.Currency = "" }},
			{"items", func(r *lapse.OrderCreate) { r.Items = []lapse.Item{{SKU: "", Qty: 1}} }},
			{"items", func(r *lapse.OrderCreate) { r.Items = []lapse.Item{{SKU: "a", Qty: 0}} }},
			{"items", func(r *lapse.OrderCreate) { r.Items = []lapse.Item{{SKU: "a\x00b", Qty: 1}} }},
			{"user_id", func(r *lapse.OrderCreate) { r.UserID = "u\n1" }},
			{"coupon", func(r *lapse.OrderCreate) { r.Coupon = "\x00" }},
			{"ttl", func(r *lapse.OrderCreate) { r.TTL = time.Nanosecond }},
			{"ttl", func(r *lapse.OrderCreate) { r.TTL = -time.Second }},
			{"ttl", func(r *lapse.OrderCreate) { r.TTL = time.Second; r.DeadlineAt = &far }},
			{"deadline_at", func(r *lapse.OrderCreate) { r.DeadlineAt = &past }},
			{"deadline_at", func(r *lapse.OrderCreate) { r.DeadlineAt = &now }},
			{"deadline_at", func(r *lapse.OrderCreate) { r.DeadlineAt = &far }},
			{"metadata", func(r *lapse.OrderCreate) { r.Metadata = json.RawMessage(`[1]`) }},
			{"metadata", func(r *lapse.OrderCreate) { r.Metadata = json.RawMessage(`null`) }},
		}
		for i, c := range cases {
			req := checkout(orderNo("BAD", i), 0)
			c.edit(req)
			_, _, err := e.CreateOrder(ctxT(t), req, app)
			var le *lapse.Error
			if !errors.As(err, &le) || le.Code != lapse.EINVALID || le.Field != c.field {
				t.Errorf("case %d: err = %v, want invalid %s", i, err, c.field)
			}
		}
		if list, _ := e.Orders(ctxT(t), &lapse.OrderListParams{Limit: 10}); len(list) != 0 {
			t.Errorf("invalid creates wrote %d orders", len(list))
		}
	})
}

func TestFire(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		api := engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}
		create(t, e, checkout("F-1", time.Minute))

		// Internal events are not the API's to fire.
		for _, ev := range []lapse.Event{flows.Pay, flows.Timeout} {
			_, err := e.Fire(ctxT(t), "F-1", engine.Fire{Event: ev, By: api, External: true})
			if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), string(ev)) {
				t.Errorf("API firing %s = %v, want invalid", ev, err)
			}
		}
		if _, err := e.Fire(ctxT(t), "F-1", engine.Fire{Event: "EXPLODE", By: api, External: true}); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("unknown event = %v", err)
		}
		if _, err := e.Fire(ctxT(t), "nope", engine.Fire{Event: flows.Cancel, By: api, External: true}); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("missing order = %v", err)
		}

		clk.Advance(time.Second)
		o, err := e.Fire(ctxT(t), "F-1", engine.Fire{Event: flows.Cancel, Reason: "customer asked", By: api, External: true})
		if err != nil {
			t.Fatal(err)
		}
		if o.State != flows.Closed || o.CloseReason != "CANCEL" || o.ClosedAt == nil || !o.ClosedAt.Equal(t0.Add(time.Second)) ||
			o.DeadlineAt != nil || o.FiredBy != lapse.FiredByAPI || o.Version != 2 {
			t.Errorf("after CANCEL: %+v", o)
		}
		_, err = e.Fire(ctxT(t), "F-1", engine.Fire{Event: flows.Cancel, By: api, External: true})
		if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(err.Error(), "CLOSED") {
			t.Errorf("second CANCEL = %v, want a conflict naming CLOSED", err)
		}
		into, events, trs := history(t, e, "F-1")
		if into[flows.Closed] != 1 || events[flows.EventOrderClosed] != 1 || len(trs) != 2 {
			t.Errorf("history after CANCEL: %v %v", into, events)
		}
		if tr := trs[1]; tr.Event != flows.Cancel || tr.Reason != "customer asked" || tr.Actor != "api" || tr.FiredBy != lapse.FiredByAPI {
			t.Errorf("CANCEL log row: %+v", tr)
		}

		// PAY from Go before the deadline pays; at or after it, it is refused.
		create(t, e, checkout("F-2", time.Minute))
		create(t, e, checkout("F-3", time.Minute))
		if o, err := e.Fire(ctxT(t), "F-2", engine.Fire{Event: flows.Pay, By: app}); err != nil || o.State != flows.Paid || o.DeadlineAt != nil || o.ClosedAt != nil {
			t.Errorf("PAY before deadline = %+v, %v", o, err)
		}
		clk.Advance(time.Minute) // F-3's deadline is now exactly reached
		if _, err := e.Fire(ctxT(t), "F-3", engine.Fire{Event: flows.Pay, By: app}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("PAY at the deadline = %v, want a conflict", err)
		}
		if o, _ := e.Order(ctxT(t), "F-3"); o.State != flows.Unpaid {
			t.Errorf("refused PAY moved the order to %s", o.State)
		}
	})
}

func TestSetDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		c := engine.NewClaimer(e, engine.ClaimerConfig{})
		api := engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}
		create(t, e, checkout("E-1", time.Minute))
		create(t, e, checkout("E-2", time.Hour))

		// Extend E-1 by an hour; at its old deadline nothing fires.
		o, _, err := e.SetDeadline(ctxT(t), "E-1", engine.DeadlineChange{ExtendBy: time.Hour, Reason: "support", By: api})
		if err != nil || !o.DeadlineAt.Equal(t0.Add(time.Minute+time.Hour)) || o.Version != 2 {
			t.Fatalf("extend = %+v, %v", o, err)
		}
		// Shorten E-2 to two minutes.
		at := t0.Add(2 * time.Minute)
		if o, _, err = e.SetDeadline(ctxT(t), "E-2", engine.DeadlineChange{At: &at, By: api}); err != nil || !o.DeadlineAt.Equal(at) {
			t.Fatalf("shorten = %+v, %v", o, err)
		}
		clk.Set(t0.Add(time.Minute))
		if n, err := c.RunOnce(ctxT(t)); n != 0 || err != nil {
			t.Errorf("RunOnce at E-1's old deadline fired %d, %v; want 0 (stale firing)", n, err)
		}
		clk.Set(at)
		if n, _ := c.RunOnce(ctxT(t)); n != 1 {
			t.Errorf("RunOnce at E-2's new deadline fired %d, want 1", n)
		}
		if o, _ := e.Order(ctxT(t), "E-2"); o.State != flows.Closed || o.CloseReason != "TIMEOUT" {
			t.Errorf("E-2 after its shortened deadline: %s %s", o.State, o.CloseReason)
		}
		clk.Set(t0.Add(time.Hour + time.Minute - time.Microsecond))
		if n, _ := c.RunOnce(ctxT(t)); n != 0 {
			t.Errorf("RunOnce a microsecond before E-1's new deadline fired %d", n)
		}
		clk.Set(t0.Add(time.Hour + time.Minute))
		if n, _ := c.RunOnce(ctxT(t)); n != 1 {
			t.Errorf("RunOnce at E-1's new deadline fired %d, want 1", n)
		}
		_, events, _ := history(t, e, "E-1")
		if events[lapse.EventOrderDeadlineChanged] != 1 || events[flows.EventOrderClosed] != 1 {
			t.Errorf("E-1 events: %v", events)
		}

		// Closed orders have no deadline to move; bad changes are refused.
		if _, _, err := e.SetDeadline(ctxT(t), "E-1", engine.DeadlineChange{ExtendBy: time.Minute, By: api}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("extend a closed order = %v, want conflict", err)
		}
		create(t, e, checkout("E-3", time.Minute))
		past := clk.Now().Add(-time.Second)
		for _, bad := range []engine.DeadlineChange{{}, {At: &past}, {ExtendBy: -time.Minute}, {At: &at, ExtendBy: time.Minute},
			{ExtendBy: time.Nanosecond}, {ExtendBy: time.Microsecond - 1}} {
			if _, _, err := e.SetDeadline(ctxT(t), "E-3", bad); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("SetDeadline(%+v) = %v, want invalid", bad, err)
			}
		}
		if o, _ := e.Order(ctxT(t), "E-3"); o.Version != 1 {
			t.Errorf("refused changes moved E-3 to version %d", o.Version)
		}

		// The deadline as it stands (a retry of a change that went
		// through, say): the order as it is, no new version, no event.
		e3, _ := e.Order(ctxT(t), "E-3")
		same := e3.DeadlineAt.Add(-999 * time.Nanosecond) // rounded up to the microsecond a deadline is kept to, the same
		if o, moved, err := e.SetDeadline(ctxT(t), "E-3", engine.DeadlineChange{At: &same, By: api}); err != nil || moved || o.Version != 1 || !o.DeadlineAt.Equal(*e3.DeadlineAt) {
			t.Errorf("SetDeadline to the deadline as it stands = %+v, moved %v, %v; want E-3 unchanged at version 1", o, moved, err)
		}
		if _, events, _ := history(t, e, "E-3"); events[lapse.EventOrderDeadlineChanged] != 0 {
			t.Errorf("a deadline set where it stands wrote %d order.deadline_changed events, want none", events[lapse.EventOrderDeadlineChanged])
		}
		if o, _, err := e.SetDeadline(ctxT(t), "E-3", engine.DeadlineChange{ExtendBy: time.Microsecond, By: api}); err != nil || o.Version != 2 ||
			!o.DeadlineAt.Equal(e3.DeadlineAt.Add(time.Microsecond)) {
			t.Errorf("extend E-3 by 1µs = %+v, %v; want its deadline a microsecond later, version 2", o, err)
		}
	})
}

// TestSetDeadlinePastWhilePaying: a deadline_at that is not in the future
// is refused whether or not the customer started paying. Once they have,
// the new window is deadline_at and the flow's grace, which can still be
// ahead when deadline_at is not: that must not let a time already past
// through as a deadline, nor DeadlineStake count it.
func TestSetDeadlinePastWhilePaying(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		f := flows.Checkout()
		f.Grace = time.Minute
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Clock: clk, Payments: engine.PaymentConfig{
			Providers: map[string]lapse.PaymentProvider{"sandbox": &fakeProvider{}}}})
		if err != nil {
			t.Fatal(err)
		}
		api := engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}
		create(t, e, checkout("PP-1", time.Hour))
		if _, err := e.StartPayment(ctxT(t), "PP-1", "sandbox", app); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		for _, back := range []time.Duration{30 * time.Second, 0} {
			past := clk.Now().Add(-back) // plus the grace, still ahead
			c := engine.DeadlineChange{At: &past, By: api}
			if _, _, err := e.SetDeadline(ctxT(t), "PP-1", c); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("SetDeadline to %v ago while paying = %v, want invalid", back, err)
			}
			if _, err := e.DeadlineStake(ctxT(t), "PP-1", c); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("DeadlineStake to %v ago while paying = %v, want invalid", back, err)
			}
		}
		if o, _ := e.Order(ctxT(t), "PP-1"); o.Version != 2 || !o.DeadlineAt.Equal(t0.Add(time.Hour+f.Grace)) {
			t.Errorf("refused changes moved PP-1: %+v", o)
		}
		// A deadline_at ahead still gets the grace added.
		ahead := clk.Now().Add(time.Second)
		if o, _, err := e.SetDeadline(ctxT(t), "PP-1", engine.DeadlineChange{At: &ahead, By: api}); err != nil ||
			!o.DeadlineAt.Equal(ahead.Add(f.Grace)) || o.PayBy == nil || !o.PayBy.Equal(ahead.Add(f.Grace)) {
			t.Errorf("SetDeadline a second ahead while paying = %+v, %v; want the window to end a second and the grace on", o, err)
		}
	})
}

// TestDeadlineStake: a deadline brought earlier puts its order at stake
// (1); one moved later, or to where it is, nothing. With a payment
// started, the window compared is the PayBy, which a new deadline_at gets
// the flow's grace added to, as SetDeadline does. It refuses what
// SetDeadline refuses, and changes nothing.
func TestDeadlineStake(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		f := flows.Checkout()
		f.Grace = time.Minute
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Clock: clk, Payments: engine.PaymentConfig{
			Providers: map[string]lapse.PaymentProvider{"sandbox": &fakeProvider{}}}})
		if err != nil {
			t.Fatal(err)
		}
		api := engine.Actor{FiredBy: lapse.FiredByAPI, Name: "operator:alice"}
		create(t, e, checkout("DS-1", time.Hour))
		create(t, e, checkout("DS-2", time.Hour))
		at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
		for _, c := range []struct {
			no     string
			change engine.DeadlineChange
			want   int64
		}{
			{"DS-1", engine.DeadlineChange{ExtendBy: time.Minute}, 0},
			{"DS-1", engine.DeadlineChange{At: at(2 * time.Hour)}, 0},
			{"DS-1", engine.DeadlineChange{At: at(time.Hour)}, 0},
			{"DS-1", engine.DeadlineChange{At: at(time.Hour - time.Second)}, 1},
			{"DS-1", engine.DeadlineChange{At: at(time.Second)}, 1},
		} {
			c.change.By = api
			if n, err := e.DeadlineStake(ctxT(t), c.no, c.change); err != nil || n != c.want {
				t.Errorf("DeadlineStake(%s, %+v) = %d, %v; want %d", c.no, c.change, n, err, c.want)
			}
		}
		// The customer started paying: the window ends at PayBy, an hour
		// and the grace on.
		if _, err := e.StartPayment(ctxT(t), "DS-2", "sandbox", app); err != nil {
			t.Fatal(err)
		}
		if n, err := e.DeadlineStake(ctxT(t), "DS-2", engine.DeadlineChange{At: at(time.Hour), By: api}); err != nil || n != 0 {
			t.Errorf("DS-2 to its own deadline: %d, %v; want 0", n, err)
		}
		if n, err := e.DeadlineStake(ctxT(t), "DS-2", engine.DeadlineChange{At: at(time.Hour - time.Second), By: api}); err != nil || n != 1 {
			t.Errorf("DS-2 a second earlier: %d, %v; want 1", n, err)
		}
		for _, bad := range []engine.DeadlineChange{{}, {At: at(-time.Second)}, {ExtendBy: -time.Minute}, {At: at(time.Second), ExtendBy: time.Minute}} {
			if _, err := e.DeadlineStake(ctxT(t), "DS-1", bad); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("DeadlineStake(%+v) = %v, want invalid", bad, err)
			}
		}
		if _, err := e.DeadlineStake(ctxT(t), "DS-none", engine.DeadlineChange{At: at(time.Second)}); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("DeadlineStake of no order = %v", err)
		}
		if _, err := e.Fire(ctxT(t), "DS-1", engine.Fire{Event: "CANCEL", By: api, External: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.DeadlineStake(ctxT(t), "DS-1", engine.DeadlineChange{At: at(time.Second)}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("DeadlineStake of a closed order = %v, want conflict", err)
		}
		if o, _ := e.Order(ctxT(t), "DS-2"); o.Version != 2 || !o.DeadlineAt.Equal(t0.Add(time.Hour+f.Grace)) {
			t.Errorf("DeadlineStake changed DS-2: %+v", o)
		}
	})
}
