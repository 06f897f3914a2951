package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// created is what one creation returned.
type created struct {
	o       *lapse.Order
	created bool
	err     error
}

// createCall is one creation to queue: OrderCreate when w is zero and
// plain is set, else OrderCreateWith.
type createCall struct {
	p     *lapse.OrderCreateParams
	w     lapse.OrderCreateWith
	plain bool
}

// queueCreates sends every call at once while s's creations are held, and
// lets them go once all are queued: they go in one batch, but for those a
// batch cannot hold together.
func queueCreates(t *testing.T, s *postgres.Store, calls []createCall) []created {
	t.Helper()
	ctx := context.Background()
	queued, release := postgres.HoldOrderCreates(s)
	out := make([]created, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			var a created
			if c.plain {
				a.o, a.created, a.err = s.OrderCreate(ctx, c.p)
			} else {
				a.o, a.created, a.err = s.OrderCreateWith(ctx, c.p, c.w)
			}
			out[i] = a
		})
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(calls); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d creations queued", queued(), len(calls))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	return out
}

// auditRow is the audit row of the creation of order no by a service's key,
// at a time finer than the log keeps.
func auditRow(no string) *lapse.AuditEntry {
	return &lapse.AuditEntry{At: batchBase.Add(1234567 * time.Nanosecond), ActorKind: "key", ActorID: "7", ActorName: "svc-" + no,
		Role: "service", Action: "order.create", Target: "order:" + no, Params: []byte(`{"order_no":"` + no + `"}`),
		Result: "ok", ClientAddr: "10.0.0.1"}
}

// checkAudited checks that the log has exactly the row want of order no,
// as AuditAppend would have written it: unsealed, its time truncated.
func checkAudited(t *testing.T, s *postgres.Store, no string, want *lapse.AuditEntry) {
	t.Helper()
	rows, err := s.AuditList(context.Background(), &lapse.AuditListParams{Target: "order:" + no})
	if err != nil {
		t.Fatal(err)
	}
	if want == nil {
		if len(rows) != 0 {
			t.Errorf("order %s: audit rows %+v; want none", no, rows)
		}
		return
	}
	w := *want
	w.At = lapse.Truncate(w.At)
	if len(rows) != 1 {
		t.Errorf("order %s: %d audit rows; want 1", no, len(rows))
		return
	}
	g := *rows[0]
	if g.ID == 0 || g.Seq != 0 || g.Hash != nil || !g.At.Equal(w.At) || g.ActorKind != w.ActorKind || g.ActorID != w.ActorID ||
		g.ActorName != w.ActorName || g.Role != w.Role || g.Action != w.Action || string(g.Params) != string(w.Params) ||
		g.Result != w.Result || g.Reason != w.Reason || g.SecondFactor != w.SecondFactor || g.Approver != w.Approver ||
		g.ApprovalID != w.ApprovalID || g.Batch != 0 || g.ClientAddr != w.ClientAddr {
		t.Errorf("order %s: audit row %+v; want %+v, unsealed", no, g, w)
	}
}

// writers counts the transactions that wrote the orders nos and their
// audit rows.
func writers(t *testing.T, s *postgres.Store, nos ...string) int {
	t.Helper()
	targets := make([]string, len(nos))
	for i, no := range nos {
		targets[i] = "order:" + no
	}
	var n int
	if err := s.QueryRowForTest(context.Background(), `SELECT count(DISTINCT x) FROM (
		SELECT xmin::text AS x FROM orders WHERE order_no = ANY($1)
		UNION ALL SELECT xmin::text FROM audit_log WHERE target = ANY($2)) w`, nos, targets).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkSealed seals the log and checks that its chain holds n rows.
func checkSealed(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := lapse.AuditSeal(ctx, s, 0); err != nil {
		t.Fatalf("AuditSeal: %v", err)
	}
	if c, err := lapse.AuditVerify(ctx, s, 100); err != nil || c.Rows != int64(n) || c.Unsealed != 0 {
		t.Errorf("AuditVerify = %+v, %v; want %d rows sealed and chained, none unsealed", c, err, n)
	}
}

// Concurrent audited creations share one statement and one commit with
// their audit rows and with a creation that is not audited, each answered
// about its own order: a creation of an order_no that exists is answered
// with the order there and appends no row. The rows seal into the chain
// as any others do. A creation alone is one commit, its row with it.
func TestOrderCreateBatchAudited(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	ctx := context.Background()
	old := batchOrders(t, s, 1)[0]
	deadline := batchBase.Add(time.Hour)
	var calls []createCall
	for i := range 4 {
		no := fmt.Sprintf("A-%d", i)
		calls = append(calls, createCall{p: creation(no, &deadline, "", nil), w: lapse.OrderCreateWith{Audit: auditRow(no)}})
	}
	calls = append(calls, createCall{p: creation("P-0", &deadline, "", nil), plain: true},
		createCall{p: creation(old.OrderNo, &deadline, "", nil), w: lapse.OrderCreateWith{Audit: auditRow(old.OrderNo)}})
	got := queueCreates(t, s, calls)
	for i, c := range calls[:5] {
		if a := got[i]; a.err != nil || !a.created || a.o.ID == 0 || a.o.OrderNo != c.p.Order.OrderNo || a.o.RequestHash != c.p.Order.RequestHash {
			t.Errorf("creation %d: %+v; want %s created", i, a, c.p.Order.OrderNo)
		}
		checkAudited(t, s, c.p.Order.OrderNo, c.w.Audit)
	}
	if a := got[5]; a.err != nil || a.created || a.o.ID != old.ID {
		t.Errorf("audited creation of an order_no that exists: %+v; want order %d, not created", a, old.ID)
	}
	checkAudited(t, s, old.OrderNo, nil)
	if n := writers(t, s, "A-0", "A-1", "A-2", "A-3", "P-0"); n != 1 {
		t.Errorf("the batch's orders and audit rows were written by %d transactions; want 1", n)
	}

	alone := createCall{p: creation("L-0", &deadline, "", nil), w: lapse.OrderCreateWith{Audit: auditRow("L-0")}}
	if o, created, err := s.OrderCreateWith(ctx, alone.p, alone.w); err != nil || !created || o.OrderNo != "L-0" {
		t.Fatalf("OrderCreateWith(L-0) alone = %+v, %v, %v", o, created, err)
	}
	checkAudited(t, s, "L-0", alone.w.Audit)
	if n := writers(t, s, "L-0"); n != 1 {
		t.Errorf("a creation alone and its audit row were written by %d transactions; want 1", n)
	}
	checkSealed(t, s, 5)
}

// A batch whose statement fails (an event id that exists meets the outbox's
// key) fails no one else: each creation is decided alone, each with its
// audit row, and the one that cannot be written fails, leaving no order
// and no row.
func TestOrderCreateBatchAuditedFails(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	ctx := context.Background()
	old := batchOrders(t, s, 1)[0]
	evs, err := s.OutboxList(ctx, old.ID)
	if err != nil || len(evs) != 1 {
		t.Fatalf("OutboxList = %v, %v", evs, err)
	}
	deadline := batchBase.Add(time.Hour)
	var calls []createCall
	for i := range 4 {
		no := fmt.Sprintf("F-%d", i)
		calls = append(calls, createCall{p: creation(no, &deadline, "", nil), w: lapse.OrderCreateWith{Audit: auditRow(no)}})
	}
	calls[2].p.Outbox[0].ID = evs[0].ID
	got := queueCreates(t, s, calls)
	for i, c := range calls {
		no := c.p.Order.OrderNo
		if i == 2 {
			if a := got[i]; a.err == nil || a.created {
				t.Errorf("creation with an event id that exists: %+v; want an error", a)
			}
			if _, err := s.OrderGet(ctx, no); !errors.Is(err, lapse.ErrOrderNotFound) {
				t.Errorf("OrderGet(%s) of the creation that failed = %v; want ErrOrderNotFound", no, err)
			}
			checkAudited(t, s, no, nil)
			continue
		}
		if a := got[i]; a.err != nil || !a.created || a.o.OrderNo != no {
			t.Errorf("creation %d beside one that fails: %+v; want %s created", i, a, no)
		}
		checkAudited(t, s, no, c.w.Audit)
		if n := writers(t, s, no); n != 1 {
			t.Errorf("order %s and its audit row were written by %d transactions; want 1", no, n)
		}
	}
	checkSealed(t, s, 3)
}

// stockOf returns the reserved quantity of sku and the journal of order id.
func stockOf(t *testing.T, s *postgres.Store, sku string, id int64) (int64, []*lapse.StockMove) {
	t.Helper()
	ctx := context.Background()
	st, err := s.StockGet(ctx, sku)
	if err != nil {
		t.Fatal(err)
	}
	var ms []*lapse.StockMove
	if id != 0 {
		if ms, err = s.StockMoveList(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	return st.Reserved, ms
}

// setStock sets the on-hand of each SKU.
func setStock(t *testing.T, s *postgres.Store, onHand map[string]int64) {
	t.Helper()
	for sku, n := range onHand {
		if _, err := s.StockSet(context.Background(), &lapse.StockSetParams{SKU: sku, OnHand: n, At: batchBase}); err != nil {
			t.Fatal(err)
		}
	}
}

// journal renders a stock journal as sku:qty:kind in its order.
func journal(ms []*lapse.StockMove) string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s:%d:%s", m.SKU, m.Qty, m.Kind))
	}
	return fmt.Sprint(out)
}

// Concurrent creations that hold stock share one transaction, with one
// commit, with their audit rows and the creations that hold none: each
// order's lines are reserved and journalled in their order; a creation of
// an order_no that exists reserves nothing.
func TestOrderCreateBatchStock(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	old := batchOrders(t, s, 1)[0]
	setStock(t, s, map[string]int64{"s-a": 10, "s-b": 10, "s-c": 10})
	deadline := batchBase.Add(time.Hour)
	lines := [][]lapse.Item{
		{{SKU: "s-a", Qty: 2}, {SKU: "s-b", Qty: 1}},
		{{SKU: "s-b", Qty: 3}},
		{{SKU: "s-a", Qty: 1}, {SKU: "s-c", Qty: 4}},
	}
	var calls []createCall
	for i, ls := range lines {
		no := fmt.Sprintf("S-%d", i)
		w := lapse.OrderCreateWith{Reserve: ls}
		if i != 1 {
			w.Audit = auditRow(no)
		}
		calls = append(calls, createCall{p: creation(no, &deadline, "", ls), w: w})
	}
	calls = append(calls, createCall{p: creation("P-0", &deadline, "", nil), plain: true},
		createCall{p: creation(old.OrderNo, &deadline, "", lines[0]), w: lapse.OrderCreateWith{Reserve: lines[0], Audit: auditRow(old.OrderNo)}})
	got := queueCreates(t, s, calls)
	for i, c := range calls[:4] {
		no := c.p.Order.OrderNo
		a := got[i]
		if a.err != nil || !a.created || a.o.OrderNo != no {
			t.Errorf("creation %d: %+v; want %s created", i, a, no)
			continue
		}
		checkAudited(t, s, no, c.w.Audit)
		if i < 3 {
			_, ms := stockOf(t, s, "s-a", a.o.ID)
			var want []*lapse.StockMove
			for _, l := range c.w.Reserve {
				want = append(want, &lapse.StockMove{SKU: l.SKU, Qty: l.Qty, Kind: lapse.StockReserve})
			}
			if journal(ms) != journal(want) || !ms[0].CreatedAt.Equal(c.p.Order.CreatedAt) {
				t.Errorf("order %s: journal %s; want %s at its creation", no, journal(ms), journal(want))
			}
		}
	}
	if a := got[4]; a.err != nil || a.created || a.o.ID != old.ID {
		t.Errorf("creation with stock of an order_no that exists: %+v; want order %d, not created", a, old.ID)
	}
	if _, ms := stockOf(t, s, "s-a", old.ID); len(ms) != 0 {
		t.Errorf("the order that existed has stock moves %s; want none", journal(ms))
	}
	checkAudited(t, s, old.OrderNo, nil)
	for sku, want := range map[string]int64{"s-a": 3, "s-b": 4, "s-c": 4} {
		if r, _ := stockOf(t, s, sku, 0); r != want {
			t.Errorf("%s: %d reserved; want %d", sku, r, want)
		}
	}
	if n := writers(t, s, "S-0", "S-1", "S-2", "P-0"); n != 1 {
		t.Errorf("the batch's orders and audit rows were written by %d transactions; want 1", n)
	}
	var moves int
	if err := s.QueryRowForTest(context.Background(), `SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM stock_moves
		UNION ALL SELECT xmin FROM orders WHERE order_no LIKE 'S-%') w`).Scan(&moves); err != nil || moves != 1 {
		t.Errorf("the reservations and their orders were written by %d transactions, %v; want 1", moves, err)
	}
	checkSealed(t, s, 2)
}

// A batch whose stock is short for one SKU (each creation fits, the two
// together do not) or that names a SKU the ledger lacks leaves the
// creations that name those SKUs to be decided alone: the one that fits is
// created with its row and reservation, and the others fail as they would
// alone, ErrStockShort and ErrStockNotFound, writing nothing: no order, no
// audit row, no move. The batch's other creations, with stock or without,
// are written together without them. The ledger never goes past its
// on-hand.
func TestOrderCreateBatchStockShort(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	ctx := context.Background()
	setStock(t, s, map[string]int64{"s-a": 3, "s-b": 10})
	deadline := batchBase.Add(time.Hour)
	two := []lapse.Item{{SKU: "s-a", Qty: 2}, {SKU: "s-b", Qty: 1}}
	none := []lapse.Item{{SKU: "s-b", Qty: 1}, {SKU: "s-x", Qty: 1}}
	var calls []createCall
	for i, ls := range [][]lapse.Item{two, two, none} {
		no := fmt.Sprintf("T-%d", i)
		calls = append(calls, createCall{p: creation(no, &deadline, "", ls), w: lapse.OrderCreateWith{Reserve: ls, Audit: auditRow(no)}})
	}
	one := []lapse.Item{{SKU: "s-b", Qty: 1}}
	calls = append(calls, createCall{p: creation("P-0", &deadline, "", nil), w: lapse.OrderCreateWith{Audit: auditRow("P-0")}},
		createCall{p: creation("T-4", &deadline, "", one), w: lapse.OrderCreateWith{Reserve: one, Audit: auditRow("T-4")}})
	got := queueCreates(t, s, calls)
	won := slices.IndexFunc(got[:2], func(a created) bool { return a.created })
	if won < 0 {
		t.Fatalf("of two creations that each fit, none was created: %+v", got[:2])
	}
	lost := 1 - won
	for i, a := range got {
		no := calls[i].p.Order.OrderNo
		switch i {
		case won, 3, 4:
			if a.err != nil || !a.created {
				t.Errorf("creation %s: %+v; want it created", no, a)
			}
			checkAudited(t, s, no, calls[i].w.Audit)
			continue
		case lost:
			if !errors.Is(a.err, lapse.ErrStockShort) || a.created {
				t.Errorf("creation %s, short: %+v; want ErrStockShort", no, a)
			}
		default:
			if !errors.Is(a.err, lapse.ErrStockNotFound) || a.created {
				t.Errorf("creation %s of a SKU the ledger lacks: %+v; want ErrStockNotFound", no, a)
			}
		}
		if _, err := s.OrderGet(ctx, no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("OrderGet(%s) of a creation refused = %v; want ErrOrderNotFound", no, err)
		}
		checkAudited(t, s, no, nil)
	}
	if a, _ := stockOf(t, s, "s-a", 0); a != 2 {
		t.Errorf("s-a: %d reserved; want 2, of the creation that fit", a)
	}
	if b, _ := stockOf(t, s, "s-b", 0); b != 2 {
		t.Errorf("s-b: %d reserved; want 2, of the creation that fit and T-4", b)
	}
	var moves int
	if err := s.QueryRowForTest(ctx, `SELECT count(*) FROM stock_moves`).Scan(&moves); err != nil || moves != 3 {
		t.Errorf("%d stock moves, %v; want the 2 of the creation that fit and T-4's", moves, err)
	}
	if n := writers(t, s, "P-0", "T-4"); n != 1 {
		t.Errorf("the creations beside those that were short were written by %d transactions; want 1", n)
	}
}

// Many creations at once over a few SKUs that sell out, some audited, some
// of one order_no twice: every one is created or refused for its stock
// (none deadlocks or fails otherwise), the ledger reserves exactly the
// lines of the orders created and never more than it has, and every
// audited order created has its one row, a refused one none.
func TestOrderCreateBatchStockRace(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 8})
	ctx := context.Background()
	const skus, onHand, n = 5, 40, 240
	stock := map[string]int64{}
	for i := range skus {
		stock[fmt.Sprintf("s-%d", i)] = onHand
	}
	setStock(t, s, stock)
	deadline := batchBase.Add(time.Hour)
	calls := make([]createCall, n)
	for i := range n {
		no := fmt.Sprintf("R-%d", i%(n-20)) // the last 20 repeat an order_no of the first
		a, b := i%skus, (i*3+1)%skus
		if a == b {
			b = (b + 1) % skus
		}
		ls, err := lapse.StockLines([]lapse.Item{{SKU: fmt.Sprintf("s-%d", a), Qty: int64(1 + i%3)}, {SKU: fmt.Sprintf("s-%d", b), Qty: 1}})
		if err != nil {
			t.Fatal(err)
		}
		w := lapse.OrderCreateWith{Reserve: ls}
		if i%2 == 0 {
			w.Audit = auditRow(no)
		}
		calls[i] = createCall{p: creation(no, &deadline, "", ls), w: w}
	}
	got := make([]created, n)
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			var a created
			a.o, a.created, a.err = s.OrderCreateWith(ctx, c.p, c.w)
			got[i] = a
		})
	}
	wg.Wait()
	want := map[string]int64{}
	for i, a := range got {
		no := calls[i].p.Order.OrderNo
		switch {
		case a.err != nil && !errors.Is(a.err, lapse.ErrStockShort):
			t.Errorf("creation %d (%s): %v; want it created or short", i, no, a.err)
		case a.created:
			if a.o.RequestHash != calls[i].p.Order.RequestHash {
				t.Errorf("creation %d (%s) created an order of another request", i, no)
			}
			for _, l := range calls[i].w.Reserve {
				want[l.SKU] += l.Qty
			}
			_, ms := stockOf(t, s, "s-0", a.o.ID)
			if journal(ms) != journal(movesOf(calls[i].w.Reserve)) {
				t.Errorf("order %s: journal %s; want %s", no, journal(ms), journal(movesOf(calls[i].w.Reserve)))
			}
		}
	}
	for sku := range stock {
		if r, _ := stockOf(t, s, sku, 0); r != want[sku] || r > onHand {
			t.Errorf("%s: %d reserved; want %d, of the orders created, at most %d", sku, r, want[sku], onHand)
		}
	}
	for i := range n - 20 {
		no := fmt.Sprintf("R-%d", i)
		o, err := s.OrderGet(ctx, no)
		var row *lapse.AuditEntry
		switch {
		case errors.Is(err, lapse.ErrOrderNotFound):
		case err != nil:
			t.Fatal(err)
		default:
			// The order of whichever call created it: audited when that
			// call was (the even ones).
			for j, a := range got {
				if a.created && a.o.ID == o.ID && j%2 == 0 {
					row = calls[j].w.Audit
				}
			}
		}
		checkAudited(t, s, no, row)
	}
}

// movesOf is the journal a reservation of lines writes.
func movesOf(lines []lapse.Item) []*lapse.StockMove {
	var out []*lapse.StockMove
	for _, l := range lines {
		out = append(out, &lapse.StockMove{SKU: l.SKU, Qty: l.Qty, Kind: lapse.StockReserve})
	}
	return out
}
