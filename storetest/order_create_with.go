package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// The cases of lapse.OrderCreateWither. A store that has it may write
// concurrent creations together (PostgreSQL batches them into shared
// statements and commits), so every clause of the contract is checked on
// a creation alone and again among many at once, where one batch may
// hold creations that are refused, whose order_no exists, that are
// audited, beside ones that are none of these.

// withSink is the subscriber of every event the cases write, so that the
// deliveries of a creation that must have written nothing can be counted
// across the store.
const withSink = "cw-sink"

// creationWith returns the store's lapse.OrderCreateWither and its audit
// log. A store without one skips, saying so: the engine then creates in a
// transaction of its own (Tx with OrderCreate, StockMove and AuditAppend),
// which the suite's other cases cover.
func creationWith(t *testing.T, s lapse.Store) (lapse.OrderCreateWither, lapse.AccessStore) {
	t.Helper()
	cw, ok := s.(lapse.OrderCreateWither)
	if !ok {
		t.Skipf("%T does not implement lapse.OrderCreateWither: the engine creates its orders with Tx, OrderCreate, StockMove and AuditAppend", s)
	}
	as, ok := s.(lapse.AccessStore)
	if !ok {
		t.Fatalf("%T is a lapse.OrderCreateWither but no lapse.AccessStore: it has nowhere to append a creation's audit row", s)
	}
	return cw, as
}

// withCreation builds the creation of an UNPAID checkout order at now, the
// way the engine does, with one event fanned out to withSink, holding
// reserve and audited with audit (neither when nil). Both are checked
// valid, as the engine checks them before its store sees them.
func withCreation(t *testing.T, no string, amount int64, now time.Time, reserve []lapse.Item, audit *lapse.AuditEntry) (*lapse.OrderCreateParams, lapse.OrderCreateWith) {
	t.Helper()
	deadline := now.Add(time.Hour)
	req := &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: "u-" + no, Amount: amount, Currency: "CNY",
		Items: reserve, DeadlineAt: &deadline, Metadata: []byte(`{"order": "` + no + `"}`)}
	o := &lapse.Order{OrderNo: no, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &deadline, Amount: amount,
		Currency: req.Currency, UserID: req.UserID, Items: reserve, Metadata: req.Metadata, Version: 1,
		CreatedAt: now, UpdatedAt: now, RequestHash: req.Fingerprint()}
	ev := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	ev.Subscribers = []string{withSink}
	p := &lapse.OrderCreateParams{Order: o, Outbox: []lapse.OutboxEvent{ev},
		Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, Actor: "storetest", CreatedAt: now}}
	w := lapse.OrderCreateWith{Reserve: reserve, Audit: audit}
	if err := p.Validate(); err != nil {
		t.Fatalf("the creation of %s: %v", no, err)
	}
	if err := w.Validate(); err != nil {
		t.Fatalf("what the creation of %s holds: %v", no, err)
	}
	return p, w
}

// creationEntry is the audit row of the n-th caller's creation of order
// no: every field set and told apart from the others', and a time finer
// than the log keeps, with a fraction of a microsecond that a store
// rounding it rather than truncating it would round up.
func creationEntry(no string, n int) *lapse.AuditEntry {
	return &lapse.AuditEntry{At: base.Add(time.Duration(n)*time.Second + 1234567*time.Nanosecond),
		ActorKind: "key", ActorID: fmt.Sprintf("lk_%d", n), ActorName: fmt.Sprintf("svc-%d", n), Role: "orders:write",
		Action: "order.create", Target: "order:" + no, Params: []byte(fmt.Sprintf(`{"order_no": %q, "caller": %d}`, no, n)),
		Result: "ok", Reason: "reason " + no, SecondFactor: "totp", Approver: fmt.Sprintf("carol-%d", n),
		ApprovalID: int64(100 + n), ClientAddr: fmt.Sprintf("10.0.%d.%d", n/250, n%250)}
}

func stockLines(t *testing.T, items ...lapse.Item) []lapse.Item {
	t.Helper()
	ls, err := lapse.StockLines(items)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func setStock(t *testing.T, s lapse.Store, sku string, onHand int64) {
	t.Helper()
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: sku, OnHand: onHand, At: base}); err != nil {
		t.Fatalf("StockSet(%s): %v", sku, err)
	}
}

// checkCreatedWith checks that o is the order that p created, holding
// w.Reserve, audited with want (nil: not audited), and that the store
// holds it so: the order, its creation log row, its event and that
// event's delivery, one reserve move per line at the order's CreatedAt,
// and its audit row, or none.
func checkCreatedWith(t *testing.T, s lapse.Store, as lapse.AccessStore, p *lapse.OrderCreateParams, w lapse.OrderCreateWith, o *lapse.Order, want *lapse.AuditEntry) {
	t.Helper()
	ctx, no := ctxT(t), p.Order.OrderNo
	got, err := s.OrderGet(ctx, no)
	if err != nil {
		t.Errorf("OrderGet(%s): %v", no, err)
		return
	}
	wo := p.Order
	for _, g := range []*lapse.Order{o, got} {
		if g.ID == 0 || g.ID != got.ID || g.OrderNo != no || g.Flow != wo.Flow || g.State != wo.State || !timeEq(g.DeadlineAt, wo.DeadlineAt) ||
			g.Amount != wo.Amount || g.Currency != wo.Currency || g.UserID != wo.UserID || !slices.Equal(g.Items, wo.Items) ||
			string(g.Metadata) != string(wo.Metadata) || g.Version != 1 || !g.CreatedAt.Equal(wo.CreatedAt) ||
			!g.UpdatedAt.Equal(wo.UpdatedAt) || g.RequestHash != wo.RequestHash {
			t.Errorf("order %s = %+v (OrderGet %+v); want %+v at version 1", no, g, got, wo)
		}
	}
	trs, err := s.TransitionList(ctx, got.ID)
	if err != nil || len(trs) != 1 {
		t.Errorf("TransitionList(%s) = %d rows, %v; want the creation row", no, len(trs), err)
	} else if tr := trs[0]; tr.FromState != "" || tr.ToState != flows.Unpaid || tr.Event != lapse.EventCreate || tr.Version != 1 ||
		tr.Actor != p.Log.Actor || tr.FiredBy != p.Log.FiredBy || !tr.CreatedAt.Equal(p.Log.CreatedAt) {
		t.Errorf("creation row of %s = %+v, want %+v", no, tr, p.Log)
	}
	evs, err := s.OutboxList(ctx, got.ID)
	if err != nil || len(evs) != 1 {
		t.Errorf("OutboxList(%s) = %d rows, %v; want its order.created", no, len(evs), err)
	} else if e, we := evs[0], p.Outbox[0]; e.ID != we.ID || e.Type != we.Type || e.OrderNo != no || string(e.Payload) != string(we.Payload) ||
		e.Seq == 0 || !e.CreatedAt.Equal(we.CreatedAt) {
		t.Errorf("event of %s = %+v, want %+v", no, e, we)
	}
	ds, err := s.DeliveryList(ctx, got.ID)
	if err != nil || len(ds) != 1 {
		t.Errorf("DeliveryList(%s) = %d, %v; want the delivery of its event to %s", no, len(ds), err, withSink)
	} else if d := ds[0]; d.EventID != p.Outbox[0].ID || d.Subscriber != withSink || d.Status != lapse.DeliveryPending || d.Attempts != 0 ||
		!d.NextAttemptAt.Equal(p.Outbox[0].CreatedAt) {
		t.Errorf("delivery of %s = %+v, want its event's, pending, due at %v", no, d, p.Outbox[0].CreatedAt)
	}
	checkReserved(t, s, got, w.Reserve)
	checkAudit(t, as, no, want)
}

// checkReserved checks that the stock journal of o is a reserve of each of
// lines, in their order, at o's creation.
func checkReserved(t *testing.T, s lapse.Store, o *lapse.Order, lines []lapse.Item) {
	t.Helper()
	moves, err := s.StockMoveList(ctxT(t), o.ID)
	if err != nil {
		t.Errorf("StockMoveList(%s): %v", o.OrderNo, err)
		return
	}
	var got, want []string
	for _, m := range moves {
		got = append(got, fmt.Sprintf("%s %s %d at %v", m.Kind, m.SKU, m.Qty, m.CreatedAt))
	}
	for _, l := range lines {
		want = append(want, fmt.Sprintf("%s %s %d at %v", lapse.StockReserve, l.SKU, l.Qty, o.CreatedAt))
	}
	if !slices.Equal(got, want) {
		t.Errorf("stock journal of %s = %q, want %q", o.OrderNo, got, want)
	}
}

// checkAudit checks that the audit log has exactly want for order no (no
// row when want is nil), as AuditAppend appends it: unsealed, its time
// truncated to the microsecond, in no close batch.
func checkAudit(t *testing.T, as lapse.AccessStore, no string, want *lapse.AuditEntry) {
	t.Helper()
	es, err := as.AuditList(ctxT(t), &lapse.AuditListParams{Target: "order:" + no})
	if err != nil {
		t.Errorf("AuditList(order:%s): %v", no, err)
		return
	}
	if want == nil {
		if len(es) != 0 {
			t.Errorf("order %s has audit rows %+v, want none", no, values(es))
		}
		return
	}
	if len(es) != 1 {
		t.Errorf("order %s has %d audit rows %+v, want one: %+v", no, len(es), values(es), *want)
		return
	}
	w := *want
	w.ID, w.Seq, w.PrevHash, w.Hash, w.Batch, w.At = es[0].ID, 0, nil, nil, 0, lapse.Truncate(want.At)
	if g := *es[0]; g.ID == 0 || fmt.Sprint(g) != fmt.Sprint(w) || string(g.Params) != string(w.Params) {
		t.Errorf("audit row of %s =\n%+v\nwant, as AuditAppend appends it,\n%+v", no, g, w)
	}
}

// checkNone checks that order no does not exist and has no audit row.
func checkNone(t *testing.T, s lapse.Store, as lapse.AccessStore, no string) {
	t.Helper()
	if o, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("OrderGet(%s) = %+v, %v; want ErrOrderNotFound", no, o, err)
	}
	checkAudit(t, as, no, nil)
}

// checkTotals checks what the whole store holds: orders (their deadlines
// in the index, their events' deliveries, one each) and audit rows.
func checkTotals(t *testing.T, s lapse.Store, as lapse.AccessStore, orders, audited int) {
	t.Helper()
	ctx := ctxT(t)
	all, err := s.OrderList(ctx, &lapse.OrderListParams{Probes: true})
	if err != nil || len(all) != orders {
		t.Errorf("OrderList = %d orders, %v; want %d", len(all), err, orders)
	}
	ds, err := s.OrderDeadlineList(ctx, &lapse.OrderDeadlineListParams{Limit: 1000})
	if err != nil || len(ds) != len(all) {
		t.Errorf("OrderDeadlineList = %d deadlines, %v; want the %d orders'", len(ds), err, len(all))
	}
	for _, d := range ds {
		if i := slices.IndexFunc(all, func(o *lapse.Order) bool { return o.ID == d.ID }); i < 0 || !timeEq(&d.DeadlineAt, all[i].DeadlineAt) {
			t.Errorf("deadline %+v is not that of an order listed", d)
		}
	}
	if c, err := s.DeliveryCount(ctx); err != nil || c.Pending != int64(orders) || c.Dead != 0 {
		t.Errorf("DeliveryCount = %+v, %v; want the %d of the orders' events pending", c, err, orders)
	}
	if es := auditList(t, as); len(es) != audited {
		t.Errorf("the audit log has %d rows, want %d", len(es), audited)
	}
}

// checkStock checks a SKU's ledger line.
func checkStock(t *testing.T, s lapse.Store, sku string, onHand, reserved int64) {
	t.Helper()
	if st := stockOf(t, s, sku); st.OnHand != onHand || st.Reserved != reserved {
		t.Errorf("stock of %s = %d reserved of %d, want %d of %d", sku, st.Reserved, st.OnHand, reserved, onHand)
	}
}

// testOrderCreateWith checks each clause of OrderCreateWith on creations
// one at a time.
func testOrderCreateWith(t *testing.T, s lapse.Store) {
	cw, as := creationWith(t, s)
	ctx := ctxT(t)
	setStock(t, s, "cw-cup", 3)
	setStock(t, s, "cw-tea", 10)
	create := func(p *lapse.OrderCreateParams, w lapse.OrderCreateWith) *lapse.Order {
		t.Helper()
		o, created, err := cw.OrderCreateWith(ctx, p, w)
		if err != nil || !created || o == nil {
			t.Fatalf("OrderCreateWith(%s) = %+v, created %v, %v; want it created", p.Order.OrderNo, o, created, err)
		}
		return o
	}

	// Holding nothing and unaudited, it is OrderCreate.
	p1, w1 := withCreation(t, "CW-1", 100, base, nil, nil)
	o1 := create(p1, w1)
	checkCreatedWith(t, s, as, p1, w1, o1, nil)

	// Holding stock and audited: the lines reserved as StockMove reserves
	// them, at the order's creation, and the row appended.
	p2, w2 := withCreation(t, "CW-2", 200, base.Add(time.Second), stockLines(t, lapse.Item{SKU: "cw-tea", Qty: 4}, lapse.Item{SKU: "cw-cup", Qty: 2}), creationEntry("CW-2", 2))
	o2 := create(p2, w2)
	checkCreatedWith(t, s, as, p2, w2, o2, creationEntry("CW-2", 2))
	checkStock(t, s, "cw-cup", 3, 2)
	checkStock(t, s, "cw-tea", 10, 4)
	checkTotals(t, s, as, 2, 1)

	// A refused reservation is StockMove's error, of the first line in SKU
	// order that fails, and writes nothing at all: no order, no log, no
	// event, no delivery, no audit row, no stock.
	for _, c := range []struct {
		lines []lapse.Item
		want  error
		sku   string
	}{
		{[]lapse.Item{{SKU: "cw-cup", Qty: 2}, {SKU: "cw-tea", Qty: 1}}, lapse.ErrStockShort, "cw-cup"},
		{[]lapse.Item{{SKU: "cw-tea", Qty: 7}}, lapse.ErrStockShort, "cw-tea"},
		{[]lapse.Item{{SKU: "cw-cup", Qty: 5}, {SKU: "cw-nope", Qty: 1}}, lapse.ErrStockShort, "cw-cup"},
		{[]lapse.Item{{SKU: "cw-aaa", Qty: 1}, {SKU: "cw-cup", Qty: 5}}, lapse.ErrStockNotFound, "cw-aaa"},
		{[]lapse.Item{{SKU: "cw-cup", Qty: 1}, {SKU: "cw-tea", Qty: 1}, {SKU: "cw-zzz", Qty: 1}}, lapse.ErrStockNotFound, "cw-zzz"},
	} {
		p, w := withCreation(t, "CW-3", 300, base.Add(2*time.Second), c.lines, creationEntry("CW-3", 3))
		o, created, err := cw.OrderCreateWith(ctx, p, w)
		if !errors.Is(err, c.want) || !strings.Contains(lapse.ErrorMessage(err), fmt.Sprintf("%q", c.sku)) || created || o != nil {
			t.Errorf("OrderCreateWith holding %v = %+v, created %v, %v (%q); want %v naming %s", c.lines, o, created, err, lapse.ErrorMessage(err), c.want, c.sku)
		}
		checkNone(t, s, as, "CW-3")
		checkStock(t, s, "cw-cup", 3, 2)
		checkStock(t, s, "cw-tea", 10, 4)
		checkTotals(t, s, as, 2, 1)
	}
	// The order_no of a refused creation is left free.
	p3, w3 := withCreation(t, "CW-3", 300, base.Add(2*time.Second), stockLines(t, lapse.Item{SKU: "cw-cup", Qty: 1}), creationEntry("CW-3", 3))
	o3 := create(p3, w3)
	checkCreatedWith(t, s, as, p3, w3, o3, creationEntry("CW-3", 3))
	checkStock(t, s, "cw-cup", 3, 3)

	// An order_no that exists: that order, created=false, and nothing
	// written, neither a reservation nor an audit row, even where the
	// reservation would have been refused.
	for _, first := range []struct {
		p     *lapse.OrderCreateParams
		w     lapse.OrderCreateWith
		o     *lapse.Order
		audit *lapse.AuditEntry
	}{{p1, w1, o1, nil}, {p2, w2, o2, creationEntry("CW-2", 2)}} {
		no := first.p.Order.OrderNo
		for i, ls := range [][]lapse.Item{nil, {{SKU: "cw-tea", Qty: 1}}, {{SKU: "cw-cup", Qty: 1}}, {{SKU: "cw-nope", Qty: 1}}} {
			p, w := withCreation(t, no, 5, base.Add(time.Minute), ls, creationEntry(no, 10+i))
			o, created, err := cw.OrderCreateWith(ctx, p, w)
			if err != nil || created || o == nil || o.ID != first.o.ID || o.Amount != first.p.Order.Amount || o.Version != 1 ||
				o.RequestHash != first.p.Order.RequestHash || !o.CreatedAt.Equal(first.p.Order.CreatedAt) {
				t.Errorf("OrderCreateWith(%s) again, holding %v = %+v, created %v, %v; want the order there, %+v", no, ls, o, created, err, first.o)
			}
		}
		checkCreatedWith(t, s, as, first.p, first.w, first.o, first.audit)
	}
	checkStock(t, s, "cw-cup", 3, 3)
	checkStock(t, s, "cw-tea", 10, 4)
	checkTotals(t, s, as, 3, 2)

	// The rows are unsealed rows like any other: the sealer chains them.
	if n := mustSeal(t, s); n != 2 {
		t.Errorf("AuditSeal sealed %d rows, want the 2 creations'", n)
	}
	verify(t, as, 2, 0)
}

// withCall is one creation of testOrderCreateWithConcurrent and what it
// returned.
type withCall struct {
	n     int // the caller: its amount and its audit row's
	p     *lapse.OrderCreateParams
	w     lapse.OrderCreateWith
	plain bool // OrderCreate, which shares the store's creations with OrderCreateWith
	// refusal, when set, is the error the creation may fail with, naming
	// sku; a creation without one must not fail.
	refusal error
	sku     string

	o       *lapse.Order
	created bool
	err     error
}

// testOrderCreateWithConcurrent runs 64 creations at once, as a store
// batching them would write them together: plain ones, audited ones, ones
// that reserve from a SKU with plenty, from SKUs that sell out and from one
// with no ledger line, and order_nos that several callers race for, one of
// them an order that exists. Each is answered about its own order alone;
// the store ends holding exactly what the answers say.
func testOrderCreateWithConcurrent(t *testing.T, s lapse.Store) {
	cw, as := creationWith(t, s)
	ctx := ctxT(t)
	onHand := map[string]int64{"cwc-a": 1000, "cwc-b": 6, "cwc-c": 7}
	for sku, n := range onHand {
		setStock(t, s, sku, n)
	}
	pe, _ := withCreation(t, "CWC-D2", 99, base, nil, nil)
	existing, created, err := s.OrderCreate(ctx, pe)
	if err != nil || !created {
		t.Fatalf("OrderCreate(CWC-D2) = created %v, %v", created, err)
	}

	var calls []*withCall
	add := func(no string, reserve []lapse.Item, audited, plain bool, refusal error, sku string) {
		n := len(calls) + 1
		var e *lapse.AuditEntry
		if audited {
			e = creationEntry(no, n)
		}
		p, w := withCreation(t, no, int64(1000+n), base.Add(time.Duration(n)*time.Millisecond), reserve, e)
		calls = append(calls, &withCall{n: n, p: p, w: w, plain: plain, refusal: refusal, sku: sku})
	}
	item := func(sku string, qty int64) lapse.Item { return lapse.Item{SKU: sku, Qty: qty} }
	for i := range 9 {
		add(orderNo("CWC-P", i), nil, false, i%3 == 2, nil, "")
	}
	for i := range 10 {
		add(orderNo("CWC-A", i), nil, true, false, nil, "")
	}
	for i := range 8 {
		add(orderNo("CWC-R", i), stockLines(t, item("cwc-a", int64(1+i%3))), i%2 == 0, false, nil, "")
	}
	// 12 units of cwc-b asked for one at a time, of 6 (and CWC-D1's):
	// exactly 6 hold one, the others are short of cwc-b, not of cwc-a.
	for i := range 12 {
		add(orderNo("CWC-B", i), stockLines(t, item("cwc-a", 1), item("cwc-b", 1)), i%2 == 0, false, lapse.ErrStockShort, "cwc-b")
	}
	for i := range 8 {
		add(orderNo("CWC-C", i), stockLines(t, item("cwc-c", int64(2+i%2))), i%2 == 1, false, lapse.ErrStockShort, "cwc-c")
	}
	for i := range 3 {
		add(orderNo("CWC-N", i), stockLines(t, item("cwc-a", 1), item("cwc-none", 1)), true, false, lapse.ErrStockNotFound, "cwc-none")
	}
	// Callers racing for one order_no, each with its own amount, events
	// and audit row: one creates and the others get its order.
	for range 4 {
		add("CWC-D0", stockLines(t, item("cwc-a", 2)), true, false, nil, "")
	}
	for range 3 {
		add("CWC-D1", stockLines(t, item("cwc-b", 1)), true, false, lapse.ErrStockShort, "cwc-b")
	}
	for range 4 {
		add("CWC-D2", stockLines(t, item("cwc-b", 1), item("cwc-c", 1)), true, false, nil, "")
	}
	for range 3 {
		add("CWC-D3", stockLines(t, item("cwc-none", 1)), true, false, lapse.ErrStockNotFound, "cwc-none")
	}
	if len(calls) != 64 {
		t.Fatalf("%d calls, want 64", len(calls))
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			<-start
			if c.plain {
				c.o, c.created, c.err = s.OrderCreate(ctx, c.p)
			} else {
				c.o, c.created, c.err = cw.OrderCreateWith(ctx, c.p, c.w)
			}
		})
	}
	close(start)
	wg.Wait()

	// Each answer on its own: created, its order_no's order, or a refusal
	// that it may meet, naming its SKU.
	byNo := map[string][]*withCall{}
	var refused int
	for _, c := range calls {
		no := c.p.Order.OrderNo
		byNo[no] = append(byNo[no], c)
		switch {
		case c.err != nil:
			refused++
			if c.refusal == nil || !errors.Is(c.err, c.refusal) || !strings.Contains(lapse.ErrorMessage(c.err), fmt.Sprintf("%q", c.sku)) {
				t.Errorf("caller %d of %s holding %v: %v (%q); want it created, or else refused with %v naming %s",
					c.n, no, c.w.Reserve, c.err, lapse.ErrorMessage(c.err), c.refusal, c.sku)
			}
			if c.o != nil || c.created {
				t.Errorf("caller %d of %s: refused with %+v, created %v", c.n, no, c.o, c.created)
			}
		case c.o == nil || c.o.OrderNo != no || c.o.ID == 0:
			t.Errorf("caller %d of %s: %+v, created %v; want its order", c.n, no, c.o, c.created)
		}
	}
	if refused == 0 {
		t.Errorf("no creation was refused; the stock asked for was more than there is")
	}

	// Each order_no: at most one creator; the others answered with its
	// order (or the one there before) and nothing written of theirs; or
	// every caller refused, and nothing of any written.
	want := map[string]int64{} // reserved, by SKU
	var orders, audited int
	for no, cs := range byNo {
		var winner *withCall
		for _, c := range cs {
			if c.err == nil && c.created && c.o != nil {
				if winner != nil {
					t.Errorf("order %s created by callers %d and %d", no, winner.n, c.n)
				}
				winner = c
			}
		}
		first, firstP := (*lapse.Order)(nil), (*lapse.OrderCreateParams)(nil)
		switch {
		case no == existing.OrderNo:
			if winner != nil {
				t.Errorf("caller %d created %s, which exists", winner.n, no)
				continue
			}
			first, firstP = existing, pe
		case winner != nil:
			first, firstP = winner.o, winner.p
		}
		if first == nil {
			for _, c := range cs {
				if c.err == nil {
					t.Errorf("caller %d of %s: not created, %+v, though no caller created it", c.n, no, c.o)
				}
			}
			checkNone(t, s, as, no)
			continue
		}
		for _, c := range cs {
			if c != winner && (c.err != nil || c.created || c.o == nil || c.o.ID != first.ID || c.o.Amount != firstP.Order.Amount || c.o.RequestHash != firstP.Order.RequestHash) {
				t.Errorf("caller %d of %s: %+v, created %v, %v; want the order there, %d of amount %d, not created",
					c.n, no, c.o, c.created, c.err, first.ID, firstP.Order.Amount)
			}
		}
		orders++
		if winner == nil {
			checkCreatedWith(t, s, as, pe, lapse.OrderCreateWith{}, existing, nil)
			continue
		}
		var e *lapse.AuditEntry
		if winner.w.Audit != nil {
			e, audited = creationEntry(no, winner.n), audited+1
		}
		checkCreatedWith(t, s, as, winner.p, winner.w, winner.o, e)
		for _, l := range winner.w.Reserve {
			want[l.SKU] += l.Qty
		}
	}

	// The ledger holds what the creations reserved, no more, never more
	// than there is; and a creation was refused only where its SKU had too
	// little left for it, which, since nothing gives stock back here, it
	// still has.
	for sku, n := range onHand {
		if want[sku] > n {
			t.Errorf("the creations hold %d of %s, which has %d: oversold", want[sku], sku, n)
		}
		checkStock(t, s, sku, n, want[sku])
	}
	if want["cwc-b"] != onHand["cwc-b"] {
		t.Errorf("the creations hold %d of cwc-b, want all %d: each asked for one, and more asked than there are", want["cwc-b"], onHand["cwc-b"])
	}
	for _, c := range calls {
		if !errors.Is(c.err, lapse.ErrStockShort) {
			continue
		}
		i := slices.IndexFunc(c.w.Reserve, func(l lapse.Item) bool { return l.SKU == c.sku })
		if st := stockOf(t, s, c.sku); i < 0 || st.Available() >= c.w.Reserve[i].Qty {
			t.Errorf("caller %d of %s was refused short of %s, which has %d available: enough for it", c.n, c.p.Order.OrderNo, c.sku, st.Available())
		}
	}
	checkTotals(t, s, as, orders, audited)
	if n := mustSeal(t, s); n != audited {
		t.Errorf("AuditSeal sealed %d rows, want the %d audited creations'", n, audited)
	}
	verify(t, as, int64(audited), 0)
}
