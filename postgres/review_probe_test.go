package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestReviewByKeyProbe checks that resolving a review by id or by order,
// and listing an order's open reviews, find their rows by key whatever the
// statistics say, and that a later page of the open queue seeks to its
// cursor. With statistics taken while no review was open, the
// partial index of open reviews looks empty; a look-up whose test of
// "open" matched its predicate could be planned as a read of every open
// review, as many as a flash sale's failed deliveries make, for each call.
func TestReviewByKeyProbe(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	conn := connect(t, dsn)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const resolved, open = 100, 20000
	var ps []*lapse.OrderCreateParams
	for i := range resolved + open {
		ps = append(ps, createParams(fmt.Sprintf("RV-%06d", i), nil, now))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, created_at, resolved_at)
		SELECT id, order_no, 'test', $1, $1 FROM orders ORDER BY id LIMIT $2`, now, resolved); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE reviews"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, created_at)
		SELECT id, order_no, 'test', $1::timestamptz + id * interval '1 ms' FROM orders ORDER BY id OFFSET $2`, now, resolved); err != nil {
		t.Fatal(err)
	}
	var id, orderID int64
	if err := conn.QueryRow(ctx, "SELECT id, order_id FROM reviews WHERE resolved_at IS NULL ORDER BY id LIMIT 1 OFFSET 5000").Scan(&id, &orderID); err != nil {
		t.Fatal(err)
	}
	list, listArgs := postgres.ReviewListQuery(&lapse.ReviewListParams{OrderID: orderID, Open: true, Limit: 50})
	for _, c := range []struct {
		name string
		sql  string
		args []any
		rows int
	}{
		{"resolve by id", postgres.ReviewResolveSQL("id"), []any{now, "op", "", id}, 1},
		{"resolve by order", postgres.ReviewResolveSQL("order_id"), []any{now, "op", "", orderID}, 1},
		{"list an order's open reviews", list, listArgs, 1},
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		read, plan := explainBuffers(t, tx, c.sql, c.args...)
		_ = tx.Rollback(ctx)
		if top := strings.SplitN(plan, "\n", 2)[0]; !strings.Contains(top, fmt.Sprintf(" rows=%d loops=1)", c.rows)) {
			t.Errorf("%s: the plan's top node does not return %d rows:\n%s", c.name, c.rows, plan)
		}
		if read > 20 {
			t.Errorf("%s: read %d buffers among %d open reviews; want at most 20:\n%s", c.name, read, open, plan)
		}
	}
	// The open queue itself still reads the partial index.
	q, args := postgres.ReviewListQuery(&lapse.ReviewListParams{Open: true, Limit: 50})
	if plan := explain(t, conn, q, args...); !strings.Contains(plan, "reviews_open_idx") {
		t.Errorf("the open queue does not read reviews_open_idx:\n%s", plan)
	}

	// A page deep in the open queue seeks to its cursor in reviews_open_idx
	// and sorts the ties of its created_at by id, rather than reading the
	// pages before it. It needs statistics that see the open reviews: with
	// those taken above, while none was open, the planner sorts every open
	// review older than the cursor, as it sorts every open one for the
	// first page.
	if _, err := conn.Exec(ctx, "ANALYZE reviews"); err != nil {
		t.Fatal(err)
	}
	var cursor lapse.ReviewCursor
	if err := conn.QueryRow(ctx, `SELECT created_at, id FROM reviews WHERE resolved_at IS NULL
		ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET 10000`).Scan(&cursor.CreatedAt, &cursor.ID); err != nil {
		t.Fatal(err)
	}
	q, args = postgres.ReviewListQuery(&lapse.ReviewListParams{Open: true, Before: &cursor, Limit: 50})
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read, plan := explainBuffers(t, tx, q, args...)
	_ = tx.Rollback(ctx)
	if top := strings.SplitN(plan, "\n", 2)[0]; !strings.Contains(top, " rows=50 loops=1)") || !strings.Contains(plan, "reviews_open_idx") || read > 20 {
		t.Errorf("a page 10,000 reviews into the open queue read %d buffers; want 50 rows of reviews_open_idx in at most 20:\n%s", read, plan)
	}
}
