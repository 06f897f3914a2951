package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// The claim and next-deadline queries read the partial due index in deadline
// order, without a sort, both on an empty database and on one that has been
// analyzed with most orders closed.
func TestDueQueriesUseDueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	check := func(when string) {
		t.Helper()
		for _, nflows := range []int{1, 3} {
			args := []any{int64(0)}
			for i := range nflows {
				args = append(args, fmt.Sprintf("flow%d", i))
			}
			claim := queryPlan(t, s, sqlite.ClaimDueQuery(nflows), append([]any{int64(0), int64(-1), int64(0)}, append(args[1:], 500)...)...)
			next := queryPlan(t, s, sqlite.NextDeadlineQuery(nflows), args...) // from 0, then the flows
			for name, plan := range map[string]string{"claim": claim, "next deadline": next} {
				if !strings.Contains(plan, "orders_due_idx") || strings.Contains(plan, "TEMP B-TREE") {
					t.Errorf("%s, %d flows: %s query plan is %q; want a read of orders_due_idx without a sort", when, nflows, name, plan)
				}
			}
			if !strings.Contains(next, "COVERING INDEX") {
				t.Errorf("%s: next deadline plan %q does not read the index alone", when, next)
			}
		}
	}
	check("empty")

	var ps []*lapse.OrderCreateParams
	for i := range 2000 {
		ps = append(ps, newOrder(fmt.Sprintf("E-%05d", i), base.Add(time.Duration(i)*time.Second)))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	due, err := s.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: base.Add(time.Hour), Flows: []string{"checkout"}, Limit: 1900})
	if err != nil {
		t.Fatal(err)
	}
	var plans []*lapse.OrderTransitionParams
	for _, o := range due {
		p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Cancel, Now: base, FiredBy: lapse.FiredByApp})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	if _, err := s.OrderTransitionMany(ctx, plans); err != nil {
		t.Fatal(err)
	}
	// The store has no way to write but its methods; ANALYZE through a
	// connection of the test's own.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	check("analyzed")
}

func queryPlan(t *testing.T, s *sqlite.Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.ReaderDB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN: %v", err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(steps, "; ")
}
