package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/benchload"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// BenchmarkIdleDueCheck is the idle line of SPEC.md §7 on the database's
// side: with N pending orders of which none is due (deadlines from 5
// minutes to 7 days away), what do the claimer's due checks cost? It runs
// the claimer's own statements, the next-deadline query and the locked
// claim (the package's constants, so they follow any change), as prepared
// statements after a few runs, the way pgx runs them, and reports from
// EXPLAIN (ANALYZE, BUFFERS) the server's execution time (the median of
// the runs) and the shared buffers each touched; target ≤ 0.2 ms. It also
// reports the round trip of each as the client sees it (ns/op).
//
// Loading is untimed (see loadPending, then VACUUM ANALYZE) and logged; the
// schema is dropped at the end.
//
//	LAPSE_TEST_POSTGRES=… LAPSE_BENCH_PENDING=10000000 \
//	  go test -run '^$' -bench IdleDueCheck -benchtime 200x -timeout 120m ./postgres/
//
// LAPSE_BENCH_PENDING is N (default 100,000).
func BenchmarkIdleDueCheck(b *testing.B) {
	n := 100000
	if v := os.Getenv("LAPSE_BENCH_PENDING"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("LAPSE_BENCH_PENDING=%q: want a positive integer", v)
		}
	}
	ctx := context.Background()
	dsn := testenv.PostgresSchema(b)
	s := openStore(b, dsn, postgres.Config{})
	now := lapse.SystemClock{}.Now()
	took := loadPending(b, s, dsn, n, now)
	conn := connect(b, dsn)
	// The orders, and their deadline rows where the schema keeps them
	// apart, settled as autovacuum would have settled them.
	tables := "orders"
	var deadlines *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('order_deadlines')::text").Scan(&deadlines); err != nil {
		b.Fatal(err)
	}
	if deadlines != nil {
		tables += ", order_deadlines"
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+tables); err != nil {
		b.Fatal(err)
	}
	var size, deadlineSize string
	if err := conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('orders')),
		coalesce(pg_size_pretty(pg_total_relation_size(to_regclass('order_deadlines'))), 'none')`).Scan(&size, &deadlineSize); err != nil {
		b.Fatal(err)
	}
	loaded := fmt.Sprintf("%d pending orders loaded in %v, orders table with its indexes %s, order_deadlines %s", n, took.Round(time.Second), size, deadlineSize)

	var timed []string
	for _, f := range flows.Builtin() {
		timed = append(timed, f.Name)
	}
	slices.Sort(timed)
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"next-deadline", postgres.OrderNextDeadlineSQL, []any{timed, time.Time{}}},
		{"claim", postgres.OrderClaimDueLockedSQL, []any{now, timed, 500, time.Time{}, int64(0)}},
	} {
		b.Run(fmt.Sprintf("%s/%d", q.name, n), func(b *testing.B) {
			dueCheck(b, conn, loaded, q.name, q.sql, q.args)
		})
	}
}

// dueCheck times sql as the client sees it over b.N runs, then explains it
// b.N times and reports the median execution time and the buffers.
func dueCheck(b *testing.B, conn *pgx.Conn, loaded string, name, sql string, args []any) {
	ctx := context.Background()
	// pgx prepares a statement once and runs it by name; after five runs
	// PostgreSQL may settle on its generic plan. Warm up past that.
	for range 10 {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()

	if _, err := conn.Exec(ctx, "PREPARE due_check AS "+sql); err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE due_check") }()
	execute := "EXECUTE due_check(" + literals(args) + ")"
	for range 10 {
		if _, err := conn.Exec(ctx, execute); err != nil {
			b.Fatal(err)
		}
	}
	var execs []float64
	var last explained
	for range b.N {
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+execute).Scan(&last); err != nil {
			b.Fatal(err)
		}
		execs = append(execs, last[0].ExecutionTime)
	}
	slices.Sort(execs)
	median := execs[len(execs)/2]
	plan := last[0].Plan
	b.ReportMetric(median, "exec-ms")
	b.ReportMetric(execs[len(execs)*99/100], "p99-exec-ms")
	b.ReportMetric(float64(plan.SharedHit+plan.SharedRead), "buffers")
	verdict := "meets"
	if median > 0.2 {
		verdict = "misses"
	}
	b.Logf("idle (%s), none due: %s executes in %.3f ms (median of %d; p99 %.3f ms), shared buffers hit %d read %d, plan %s; %s the 0.2 ms target",
		loaded, name, median, len(execs), execs[len(execs)*99/100], plan.SharedHit, plan.SharedRead, plan.shape(), verdict)
}

// explained is the JSON form of EXPLAIN ANALYZE.
type explained []struct {
	Plan          planNode `json:"Plan"`
	ExecutionTime float64  `json:"Execution Time"`
}

type planNode struct {
	NodeType   string     `json:"Node Type"`
	IndexName  string     `json:"Index Name"`
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// shape names the plan's nodes, outermost first: "Limit > Index Only Scan
// (orders_due_idx)".
func (p planNode) shape() string {
	s := p.NodeType
	if p.IndexName != "" {
		s += " (" + p.IndexName + ")"
	}
	for _, c := range p.Plans {
		s += " > " + c.shape()
	}
	return s
}

// literals writes args as SQL literals for EXECUTE.
func literals(args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case int:
			out[i] = strconv.Itoa(v)
		case time.Time:
			out[i] = "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
		case []string:
			out[i] = "ARRAY['" + strings.Join(v, "','") + "']::text[]"
		default:
			panic(fmt.Sprintf("literals: %T", a))
		}
	}
	return strings.Join(out, ", ")
}

// loadPending inserts n UNPAID checkout orders created at now, due from 5
// minutes to 7 days later in no particular order, each with its creation
// log row and its deadline row, and returns how long it took. They carry
// no outbox rows: their order.created events are taken as delivered. The
// server makes most of them from templates (benchload.Pending); the rows
// are those OrderCreateMany would have written.
func loadPending(b *testing.B, s *postgres.Store, dsn string, n int, now time.Time) time.Duration {
	b.Helper()
	start := time.Now()
	spread := int64(7*24*time.Hour - 5*time.Minute)
	// A multiplicative hash spreads the deadlines over the week whatever
	// the order of creation.
	err := benchload.Pending(context.Background(), s, dsn, "IDLE-", n, func(i int) *lapse.OrderCreateParams {
		at := now.Add(5*time.Minute + time.Duration(uint64(i)*2654435761%uint64(spread/int64(time.Second)))*time.Second)
		return createParams(fmt.Sprintf("IDLE-%08d", i), &at, now)
	})
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
