package mysql_test

import (
	"context"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/storetest"
)

// BenchmarkTransitionMany is the burn-down of SPEC.md §7 on MySQL or MariaDB
// (see storetest.BenchTransitionMany), with 1, 2 and 4 claimers. Before the
// timing, ANALYZE TABLE brings the statistics of the tables just loaded up
// to date, as InnoDB's background statistics would have for orders created
// long before their deadline.
//
//	LAPSE_TEST_MYSQL=mysql://root@127.0.0.1:3306/test LAPSE_BENCH_ORDERS=20000 \
//	  go test -run '^$' -bench TransitionMany -benchtime 3x ./mysql/
func BenchmarkTransitionMany(b *testing.B) {
	storetest.BenchTransitionMany(b, []int{1, 2, 4}, func(b *testing.B, conns int) (lapse.Store, func()) {
		s := openStore(b, testenv.MySQLDatabase(b), mysql.Config{MaxConns: conns})
		return s, func() {
			if _, err := s.Exec(context.Background(), "ANALYZE TABLE orders, transitions, outbox, deliveries"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
