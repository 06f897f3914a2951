package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// closeDue closes, as the deadline engine does, every order due by now:
// claims in a transaction, then one guarded update of them all.
func closeDue(t *testing.T, s *postgres.Store, now time.Time) int {
	t.Helper()
	ctx := context.Background()
	var moved []int64
	err := s.Tx(ctx, func(tx lapse.Store) error {
		due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{"checkout"}, Limit: 10000})
		if err != nil {
			return err
		}
		var ps []*lapse.OrderTransitionParams
		for _, o := range due {
			closed := *o
			closed.State, closed.DeadlineAt, closed.ClosedAt, closed.Version = flows.Closed, nil, &now, o.Version+1
			ps = append(ps, &lapse.OrderTransitionParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
				ToState: flows.Closed, Event: flows.Timeout, ClosedAt: &now, CloseReason: "TIMEOUT", FiredBy: lapse.FiredByTimer,
				At: now, Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(flows.EventOrderClosed, &closed, nil)}})
		}
		moved, err = tx.OrderTransitionMany(ctx, ps)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(moved)
}

// deadlinesDisagree counts the orders whose deadline and deadline row
// disagree: a deadline without a row would never fire, a row without a
// deadline would be claimed for nothing.
func deadlinesDisagree(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM orders o FULL JOIN order_deadlines d ON d.order_id = o.id
		WHERE o.deadline_at IS DISTINCT FROM d.deadline_at OR (d.order_id IS NOT NULL AND o.flow IS DISTINCT FROM d.flow)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCloseIsHOT pins what makes the close path fast: closing an order
// changes no indexed column of orders, so PostgreSQL updates it in place
// (a heap-only tuple, no index entry), and its deadline row goes. An index
// added on a column the close changes, such as state or deadline_at, fails
// it.
func TestCloseIsHOT(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 400 {
		d := now.Add(-time.Minute)
		if i%2 == 1 {
			d = now.Add(time.Hour) // not due
		}
		ps = append(ps, createParams(fmt.Sprintf("HOT-%04d", i), &d, now.Add(-time.Hour)))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if n := closeDue(t, s, now); n != 200 {
		t.Fatalf("closed %d orders, want 200", n)
	}
	var rows, nulls int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM order_deadlines),
		(SELECT count(*) FROM orders WHERE state = 'CLOSED' AND deadline_at IS NULL)`).Scan(&rows, &nulls); err != nil {
		t.Fatal(err)
	}
	if rows != 200 || nulls != 200 {
		t.Errorf("after the close: %d deadline rows, %d closed orders without a deadline; want 200 and 200", rows, nulls)
	}
	if n := deadlinesDisagree(t, conn); n != 0 {
		t.Errorf("%d orders disagree with their deadline rows", n)
	}
	// A backend reports its table counters when it ends: close the store's
	// connections and wait for the counts of all 200 updates.
	_ = s.Close()
	var upd, hot int64
	for deadline := time.Now().Add(15 * time.Second); ; {
		if err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'orders'::regclass`).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		if upd >= 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if upd != 200 || hot != upd {
		t.Errorf("closing 200 orders made %d updates of orders, %d of them HOT; want 200, all HOT", upd, hot)
	}
}

// TestDeadlineRowsFollowOrders moves orders through every statement that
// writes a deadline (create, one create, a deadline moved, a transition to
// a state with a deadline, a close) and checks after each that orders and
// order_deadlines agree.
func TestDeadlineRowsFollowOrders(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	conn := connect(t, dsn)
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	check := func(step string) {
		t.Helper()
		if n := deadlinesDisagree(t, conn); n != 0 {
			t.Fatalf("after %s: %d orders disagree with their deadline rows", step, n)
		}
	}
	d := now.Add(time.Minute)
	if err := s.OrderCreateMany(ctx, []*lapse.OrderCreateParams{
		createParams("DL-1", &d, now), createParams("DL-2", nil, now),
	}); err != nil {
		t.Fatal(err)
	}
	check("a bulk create")
	o, created, err := s.OrderCreate(ctx, createParams("DL-3", &d, now))
	if err != nil || !created {
		t.Fatalf("OrderCreate = %v, %v", created, err)
	}
	if _, created, err := s.OrderCreate(ctx, createParams("DL-3", &d, now)); err != nil || created {
		t.Fatalf("OrderCreate again = %v, %v", created, err)
	}
	check("a create and its replay")
	later := now.Add(time.Hour)
	o, err = s.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version, DeadlineAt: later, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version - 1, DeadlineAt: now, At: now}); err != lapse.ErrStale {
		t.Fatalf("a stale deadline move = %v, want ErrStale", err)
	}
	check("a deadline moved, and a stale move")
	// To a state with a deadline of its own, then out of it.
	next := now.Add(2 * time.Hour)
	o, err = s.OrderTransition(ctx, &lapse.OrderTransitionParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
		ToState: "PAYING", Event: "PAY_STARTED", DeadlineAt: &next, FiredBy: lapse.FiredByApp, At: now})
	if err != nil {
		t.Fatal(err)
	}
	check("a transition to a state with a deadline")
	if _, err := s.OrderTransition(ctx, &lapse.OrderTransitionParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
		ToState: flows.Paid, Event: flows.Pay, FiredBy: lapse.FiredByApp, At: now}); err != nil {
		t.Fatal(err)
	}
	check("a transition out of deadlines")
	if n := closeDue(t, s, now.Add(time.Minute)); n != 1 {
		t.Fatalf("closed %d orders, want 1 (DL-1)", n)
	}
	check("a close")
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM order_deadlines").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d deadline rows left, %v; want none", rows, err)
	}
}
