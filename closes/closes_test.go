package closes_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

var (
	app   = engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}
	alice = &lapse.AuditEntry{ActorKind: "operator", ActorID: "7", ActorName: "alice", Role: "operator", ClientAddr: "10.0.0.1"}
	cli   = &lapse.AuditEntry{ActorKind: "cli", ActorID: "root", ActorName: "root"}
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is one process of Lapse over a database: its store, engine, Closer
// and Deliverer (which gives back what closed orders held).
type env struct {
	t      *testing.T
	path   string // the SQLite file; "" on another store
	clk    *lapse.ManualClock
	s      accessStore
	e      *engine.Engine
	c      *closes.Closer
	d      *engine.Deliverer
	reopen func() *env // another process over the same database and clock
}

// accessStore is a store with the access records, as every built-in one.
type accessStore interface {
	lapse.Store
	lapse.AccessStore
}

// newEnv opens a fresh database with a tea SKU and three coupons, and an
// engine with the payment providers provs ("sandbox", when there is one).
func newEnv(t *testing.T, provs ...lapse.PaymentProvider) *env {
	t.Helper()
	return seed(openEnv(t, filepath.Join(t.TempDir(), "lapse.db"), lapse.NewManualClock(t0), provs...))
}

// seed gives a fresh database a tea SKU and three coupons.
func seed(v *env) *env {
	v.t.Helper()
	if _, err := v.e.SetStock(ctxT(v.t), "tea", 1000); err != nil {
		v.t.Fatal(err)
	}
	for _, code := range []string{"C-1", "C-2", "C-3"} {
		if _, err := v.e.CreateCoupon(ctxT(v.t), code); err != nil {
			v.t.Fatal(err)
		}
	}
	return v
}

// openEnv opens the database at path as another process would.
func openEnv(t *testing.T, path string, clk *lapse.ManualClock, provs ...lapse.PaymentProvider) *env {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	v := envOn(t, s, clk, provs...)
	v.path, v.reopen = path, func() *env { return openEnv(t, path, clk) }
	return v
}

// newServerEnv is newEnv on a fresh PostgreSQL schema or MySQL database,
// whose transactions, unlike SQLite's, run side by side.
func newServerEnv(t *testing.T, kind string) *env {
	t.Helper()
	clk := lapse.NewManualClock(t0)
	var open func() *env
	switch kind {
	case "postgres":
		dsn := testenv.PostgresSchema(t)
		open = func() *env {
			s, err := postgres.Open(context.Background(), dsn, postgres.Config{MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return envOn(t, s, clk)
		}
	case "mysql":
		dsn := testenv.MySQLDatabase(t)
		open = func() *env {
			s, err := mysql.Open(context.Background(), dsn, mysql.Config{MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return envOn(t, s, clk)
		}
	default:
		t.Fatalf("no store %q", kind)
	}
	reopen := func() *env {
		v := open()
		v.reopen = open
		return v
	}
	return seed(reopen())
}

// envOn is a process over s, which it migrates.
func envOn(t *testing.T, s accessStore, clk *lapse.ManualClock, provs ...lapse.PaymentProvider) *env {
	t.Helper()
	if err := s.(interface{ Migrate(context.Context) error }).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Clock: clk, StockLedger: true, CouponLedger: true, Logger: slog.New(slog.DiscardHandler)}
	if len(provs) > 0 {
		cfg.Payments.Providers = map[string]lapse.PaymentProvider{"sandbox": provs[0]}
	}
	e, err := engine.New(s, flows.Builtin(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := closes.New(e, s)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clk: clk, s: s, e: e, c: c, d: engine.NewDeliverer(e, engine.DelivererConfig{})}
}

// order creates an unpaid checkout order of user holding one tea (and
// coupon, when not empty), created at the clock's time.
func (v *env) order(no, user, coupon string) *lapse.Order {
	v.t.Helper()
	o, created, err := v.e.CreateOrder(ctxT(v.t), &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: user,
		Amount: 1000, Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: 1}}, Coupon: coupon}, app)
	if err != nil || !created {
		v.t.Fatalf("CreateOrder(%s) = created %v, %v", no, created, err)
	}
	return o
}

// orders creates n orders of user, numbered prefix-001 …
func (v *env) orders(prefix, user string, n int) []string {
	v.t.Helper()
	var nos []string
	for i := range n {
		no := fmt.Sprintf("%s-%03d", prefix, i+1)
		v.order(no, user, "")
		nos = append(nos, no)
	}
	return nos
}

// pay applies a payment of the whole order.
func (v *env) pay(no string) {
	v.t.Helper()
	o, err := v.e.Order(ctxT(v.t), no)
	if err != nil {
		v.t.Fatal(err)
	}
	_, err = v.e.ApplyPayment(ctxT(v.t), &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "txn-" + no,
		OrderNo: no, Amount: o.Amount, Currency: o.Currency, PaidAt: v.clk.Now(), Raw: []byte(`{}`)})
	if err != nil {
		v.t.Fatal(err)
	}
	if o, _ := v.e.Order(ctxT(v.t), no); o.State != flows.Paid {
		v.t.Fatalf("%s is %s after paying", no, o.State)
	}
}

// drain runs the deliverer until nothing is due.
func (v *env) drain() {
	v.t.Helper()
	for range 50 {
		n, err := v.d.RunOnce(ctxT(v.t))
		if err != nil {
			v.t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	v.t.Fatal("deliveries keep coming")
}

// items returns the items of a batch by order number.
func (v *env) items(batch int64) map[string]*lapse.CloseItem {
	v.t.Helper()
	its, err := v.s.CloseItemList(ctxT(v.t), batch, "", "", 0)
	if err != nil {
		v.t.Fatal(err)
	}
	m := map[string]*lapse.CloseItem{}
	for _, it := range its {
		m[it.OrderNo] = it
	}
	return m
}

// closeRows returns the batch's "order.close" audit rows by order number.
func (v *env) closeRows(batch int64) map[string][]*lapse.AuditEntry {
	v.t.Helper()
	rows, err := v.s.AuditList(ctxT(v.t), &lapse.AuditListParams{Action: closes.ActionClose, Batch: batch})
	if err != nil {
		v.t.Fatal(err)
	}
	m := map[string][]*lapse.AuditEntry{}
	for _, e := range rows {
		m[e.Target] = append(m[e.Target], e)
	}
	return m
}

// verifyAudit seals the audit log and checks its chain, and returns the
// number of its rows.
func (v *env) verifyAudit() int64 {
	v.t.Helper()
	if _, err := lapse.AuditSeal(ctxT(v.t), v.s, 0); err != nil {
		v.t.Fatalf("AuditSeal: %v", err)
	}
	c, err := lapse.AuditVerify(ctxT(v.t), v.s, 7)
	if err != nil || c.Unsealed != 0 {
		v.t.Fatalf("AuditVerify = %+v, %v; want every row sealed and the chain unbroken", c, err)
	}
	return c.Rows
}

// closedOnce checks that the order was closed once, by hand, by by: CLOSED,
// fired by an operator, one transition into CLOSED, and its stock given
// back once.
func (v *env) closedOnce(no string, by *lapse.AuditEntry) {
	v.t.Helper()
	o, err := v.e.Order(ctxT(v.t), no)
	if err != nil {
		v.t.Fatal(err)
	}
	if o.State != flows.Closed || o.FiredBy != lapse.FiredByOperator {
		v.t.Errorf("%s is %s fired by %s; want CLOSED by an operator", no, o.State, o.FiredBy)
	}
	trs, err := v.e.Transitions(ctxT(v.t), no)
	if err != nil {
		v.t.Fatal(err)
	}
	closes := 0
	for _, tr := range trs {
		if tr.ToState == flows.Closed {
			closes++
			if tr.FiredBy != lapse.FiredByOperator || tr.Actor != by.ActorName || tr.Reason == "" {
				v.t.Errorf("%s closed by %s %q for %q; want the operator %s with the batch's reason", no, tr.FiredBy, tr.Actor, tr.Reason, by.ActorName)
			}
		}
	}
	if closes != 1 {
		v.t.Errorf("%s has %d transitions into CLOSED, want 1", no, closes)
	}
	if n := v.moves(o, lapse.StockRelease); n != 1 {
		v.t.Errorf("%s has %d stock releases, want 1", no, n)
	}
}

// moves counts the stock moves of kind in o's journal.
func (v *env) moves(o *lapse.Order, kind lapse.StockMoveKind) int {
	v.t.Helper()
	ms, err := v.s.StockMoveList(ctxT(v.t), o.ID)
	if err != nil {
		v.t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Kind == kind {
			n++
		}
	}
	return n
}

// reserved returns the tea reserved.
func (v *env) reserved() int64 {
	v.t.Helper()
	st, err := v.e.Stock(ctxT(v.t), "tea")
	if err != nil {
		v.t.Fatal(err)
	}
	return st.Reserved
}

// counts is a batch's status and counts, for comparing.
func counts(b *lapse.CloseBatch) string {
	done := ""
	if !b.FinishedAt.IsZero() {
		done = " finished"
	}
	return fmt.Sprintf("%s total %d closed %d skipped %d failed %d%s", b.Status, b.Total, b.Closed, b.Skipped, b.Failed, done)
}
