package postgres_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// explainBuffers runs sql in tx under EXPLAIN (ANALYZE, BUFFERS) and returns
// the shared buffers the statement hit and read to find its rows, and the
// plan. See findBuffers for what is counted.
func explainBuffers(t *testing.T, tx pgx.Tx, sql string, args ...any) (int, string) {
	t.Helper()
	rows, err := tx.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	n, ok := findBuffers(plan)
	if !ok {
		t.Fatalf("no buffer counts in the plan:\n%s", plan)
	}
	return n, plan
}

// findBuffers returns the buffers a plan's nodes hit and read to find rows:
// each node's own counts (its Buffers line, which includes its children's,
// less theirs), summed over every node but two kinds. Insert, Update, Delete
// and Merge nodes write: a row's new version and its index entries cost what
// the pages make them cost (a full page sends the row to another, an
// extension under contention pins several new pages, a split touches a few
// more), the same whatever the plan, while what the probe tests guard is the
// finding, which a bad plan makes a read of every row. A CTE Scan's counts
// are its common table expression's, which the plan lists, and counts, as a
// node of its own. A Buffers line belongs to the node line above it.
func findBuffers(plan string) (int, bool) {
	type node struct {
		parent          *node
		indent, buffers int
		children        int
		write, cteScan  bool
	}
	var nodes []*node
	var stack []*node
	found := false
	for i, line := range strings.Split(plan, "\n") {
		text := strings.TrimLeft(line, " ")
		indent := len(line) - len(text)
		isNode := i == 0 || strings.HasPrefix(text, "->")
		if !isNode && indent == 0 {
			break // Planning, Triggers, Execution Time: not the plan's nodes
		}
		if isNode {
			for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
				stack = stack[:len(stack)-1]
			}
			name := strings.TrimLeft(strings.TrimPrefix(text, "->"), " ")
			n := &node{indent: indent, write: writeNode.MatchString(name), cteScan: strings.HasPrefix(name, "CTE Scan on ")}
			if len(stack) > 0 {
				n.parent = stack[len(stack)-1]
			}
			nodes, stack = append(nodes, n), append(stack, n)
			continue
		}
		m := bufferCounts.FindStringSubmatch(line)
		if m == nil || len(stack) == 0 {
			continue
		}
		n := stack[len(stack)-1]
		for _, v := range m[1:] {
			if v != "" {
				k, _ := strconv.Atoi(v)
				n.buffers += k
			}
		}
		if n.parent != nil {
			n.parent.children += n.buffers
		}
		found = true
	}
	read := 0
	for _, n := range nodes {
		if own := n.buffers - n.children; !n.write && !n.cteScan && own > 0 {
			read += own
		}
	}
	return read, found
}

var (
	bufferCounts = regexp.MustCompile(`^\s*Buffers: shared hit=(\d+)(?: read=(\d+))?`)
	writeNode    = regexp.MustCompile(`^(Insert|Update|Delete|Merge) on `)
)

// TestFindBuffers pins what the probe tests count: a resolve whose index scan
// read 3 buffers while its update spent 39 more on a page the row had to move
// to (seen in CI) found its row in 3, and a statement whose writes are common
// table expressions is charged for its scans, once each.
func TestFindBuffers(t *testing.T) {
	for _, c := range []struct {
		name string
		plan string
		want int
	}{
		{"update by key", `Update on reviews  (cost=0.29..8.30 rows=1 width=78) (actual time=0.127..0.128 rows=1 loops=1)
  Buffers: shared hit=42
  ->  Index Scan using reviews_pkey on reviews  (cost=0.29..8.30 rows=1 width=78) (actual time=0.010..0.011 rows=1 loops=1)
        Index Cond: (id = '5101'::bigint)
        Filter: ((resolved_at IS NULL) IS TRUE)
        Buffers: shared hit=3
Planning:
  Buffers: shared hit=3
Planning Time: 0.082 ms
Execution Time: 0.342 ms`, 3},
		{"select", `Limit  (cost=0.29..8.30 rows=1 width=78) (actual time=0.010..0.011 rows=1 loops=1)
  Buffers: shared hit=4 read=1
  ->  Index Scan using reviews_pkey on reviews  (actual rows=1 loops=1)
        Buffers: shared hit=4 read=1
Planning:
  Buffers: shared hit=30
Execution Time: 0.342 ms`, 5},
		{"writes in a common table expression", `Aggregate  (actual rows=1 loops=1)
  Buffers: shared hit=120
  CTE done
    ->  Update on deliveries d  (actual rows=2 loops=1)
          Buffers: shared hit=80
          ->  Nested Loop  (actual rows=2 loops=1)
                Buffers: shared hit=12
                ->  Seq Scan on deliveries d  (actual rows=2 loops=1)
                      Buffers: shared hit=8
                ->  Index Scan using x on x  (actual rows=1 loops=2)
                      Buffers: shared hit=4
  CTE attempts
    ->  Insert on delivery_attempts  (actual rows=2 loops=1)
          Buffers: shared hit=30
          ->  CTE Scan on done  (actual rows=2 loops=1)
  ->  CTE Scan on attempts  (actual rows=2 loops=1)
        Buffers: shared hit=10
Planning Time: 0.082 ms`, 12},
	} {
		got, ok := findBuffers(c.plan)
		if !ok || got != c.want {
			t.Errorf("%s: %d buffers, found %v; want %d", c.name, got, ok, c.want)
		}
	}
}
