package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// BenchmarkCreateAudited measures what the audit log costs an order's
// creation: plain, and with its audit row in the same transaction (as every
// creation through the API with a key is), side by side on one store, 16
// callers at once. An audited row is appended unsealed, taking no lock
// another appender waits for, and a sealer (engine.AuditSealer, as lapse
// serve runs it) seals the rows behind the writes meanwhile; after the run
// every row is sealed and the chain verified, outside the timer.
//
//	go test -run x -bench CreateAudited ./engine/
func BenchmarkCreateAudited(b *testing.B) {
	stores := map[string]func(b *testing.B) lapse.Store{
		"sqlite": func(b *testing.B) lapse.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"postgres": func(b *testing.B) lapse.Store {
			s, err := postgres.Open(context.Background(), testenv.PostgresSchema(b), postgres.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, audited := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/audited=%v", name, audited), func(b *testing.B) {
				s := stores[name](b)
				b.Cleanup(func() { s.Close() })
				if err := s.(migrator).Migrate(context.Background()); err != nil {
					b.Fatal(err)
				}
				e, err := engine.New(s, flows.Builtin(), engine.Config{})
				if err != nil {
					b.Fatal(err)
				}
				var sealer *engine.AuditSealer
				if audited {
					if sealer, err = engine.NewAuditSealer(e, engine.AuditSealerConfig{}); err != nil {
						b.Fatal(err)
					}
					sealer.Start(context.Background())
				}
				var n atomic.Int64
				b.SetParallelism(8) // 16 callers on 2 cores
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						no := fmt.Sprintf("B-%d", n.Add(1))
						c := ctx
						if audited {
							c = engine.WithAudit(ctx, &lapse.AuditEntry{ActorKind: "key", ActorID: "k", ActorName: "storefront",
								Action: "order.create", Target: "order:" + no})
						}
						_, _, err := e.CreateOrder(c, &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: "u", Amount: 100,
							Currency: "CNY", TTL: time.Hour}, app)
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
				if audited {
					b.StopTimer()
					sealer.Stop()
					ctx := context.Background()
					if _, err := sealer.RunOnce(ctx); err != nil {
						b.Fatal(err)
					}
					c, err := lapse.AuditVerify(ctx, s.(lapse.AccessStore), 0)
					if err != nil || c.Unsealed != 0 || c.Rows != n.Load() {
						b.Fatalf("AuditVerify = %+v, %v; want %d rows sealed", c, err, n.Load())
					}
				}
			})
		}
	}
}
