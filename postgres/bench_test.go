package postgres_test

import (
	"context"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/storetest"
)

// BenchmarkTransitionMany is the burn-down of SPEC.md §7 on PostgreSQL (see
// storetest.BenchTransitionMany), with 1, 2 and 4 claimers. Before the
// timing, VACUUM ANALYZE settles the orders just loaded, as autovacuum would
// have settled orders created long before their deadline.
//
// testdata/pgbench holds the same close as one raw SQL statement for
// pgbench, the baseline this benchmark is measured against. On a local
// server, add sslmode=disable to the DSN of both: TLS costs the two of them
// alike, and it is not what either measures.
func BenchmarkTransitionMany(b *testing.B) {
	storetest.BenchTransitionMany(b, []int{1, 2, 4}, func(b *testing.B, conns int) (lapse.Store, func()) {
		dsn := testenv.PostgresSchema(b)
		s := openStore(b, dsn, postgres.Config{MaxConns: int32(conns)})
		conn := connect(b, dsn)
		return s, func() {
			if _, err := conn.Exec(context.Background(), "VACUUM ANALYZE orders, transitions, outbox, deliveries"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
