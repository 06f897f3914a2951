package engine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/sqlite"
)

// eachStoreTwice is eachStore with two databases of each kind: two
// deployments of Lapse. open(i) opens database i (0 or 1), migrated; each
// call opens another handle on it, as another process would.
func eachStoreTwice(t *testing.T, fn func(t *testing.T, open func(i int) lapse.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		paths := []string{filepath.Join(t.TempDir(), "a.db"), filepath.Join(t.TempDir(), "b.db")}
		fn(t, func(i int) lapse.Store {
			s, err := sqlite.Open(context.Background(), paths[i], sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsns := []string{testenv.PostgresSchema(t), testenv.PostgresSchema(t)}
		fn(t, func(i int) lapse.Store { return openPostgres(t, dsns[i]) })
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsns := []string{testenv.MySQLDatabase(t), testenv.MySQLDatabase(t)}
		fn(t, func(i int) lapse.Store {
			s, err := mysql.Open(context.Background(), dsns[i], mysql.Config{MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

// TestGroupChargeKeyPerDatabase: two deployments of Lapse that share one
// provider account make different charge keys for the same group and user
// (each database's own salt), so each member is charged by a capture of
// its own rather than answered with the other's. Processes sharing a
// database make the same key. A member who joined before the database had
// a salt keeps the key it was given: joining again finds it, even once the
// group closed, and its charge is made under that key.
func TestGroupChargeKeyPerDatabase(t *testing.T) {
	eachStoreTwice(t, func(t *testing.T, open func(i int) lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk}) // one provider account
		ea, eb := groupEngine(t, open(0), clk, sb), groupEngine(t, open(1), clk, sb)
		ctx := ctxT(t)
		settleThrough(t, ea, clk, "G-1", engine.JoinRequest{UserID: "u1", Method: "tok"})
		settleThrough(t, eb, clk, "G-1", engine.JoinRequest{UserID: "u1", Method: "tok"})
		ma, mb := members(t, ea, "G-1")["u1"], members(t, eb, "G-1")["u1"]
		if ma.Key == mb.Key {
			t.Errorf("two databases made the same charge key %s for group G-1 and user u1", ma.Key)
		}
		if !lapse.IsChargeKey(ma.Key) || !lapse.IsChargeKey(mb.Key) {
			t.Errorf("charge keys %s and %s; want both with prefix %s", ma.Key, mb.Key, lapse.ChargeKeyPrefix)
		}
		if ma.Status != lapse.ChargeCharged || mb.Status != lapse.ChargeCharged || ma.TxnID == mb.TxnID {
			t.Errorf("u1 of each deployment: %+v and %+v; want each charged by a capture of its own", ma, mb)
		}
		if n := len(sb.Payments()); n != 2 {
			t.Errorf("the provider made %d captures; want 2, one per deployment", n)
		}

		// Another process on the same database makes the same key.
		ea2 := groupEngine(t, open(0), clk, sb)
		create(t, ea, groupReq("G-2", time.Hour))
		m1, _, err := ea.JoinGroup(ctx, "G-2", engine.JoinRequest{UserID: "u2", Method: "tok", By: app})
		if err != nil {
			t.Fatal(err)
		}
		if m2, created, err := ea2.JoinGroup(ctx, "G-2", engine.JoinRequest{UserID: "u2", Method: "tok", By: app}); err != nil || created || m2.Key != m1.Key {
			t.Errorf("joining again through another process = %+v, %v, %v; want the member, key %s", m2, created, err, m1.Key)
		}

		// A member who joined before the salt, under the key of its group
		// and user alone.
		o := create(t, ea, groupReq("G-OLD", time.Minute))
		old := engine.LegacyChargeKey("G-OLD", "u9")
		if _, _, err := ea.Store().GroupMemberAdd(ctx, &lapse.GroupMember{OrderID: o.ID, GroupID: "G-OLD", UserID: "u9", Provider: "sandbox",
			Method: "tok", Amount: o.Amount, Currency: o.Currency, Key: old, JoinedAt: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if m, created, err := ea.JoinGroup(ctx, "G-OLD", engine.JoinRequest{UserID: "u9", Method: "tok", By: app}); err != nil || created || m.Key != old {
			t.Errorf("joining again, the group past its deadline = %+v, %v, %v; want the member, its key %s kept", m, created, err, old)
		}
		if _, err := engine.NewClaimer(ea, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(ea, engine.DelivererConfig{}))
		if m := members(t, ea, "G-OLD")["u9"]; m.Status != lapse.ChargeCharged || m.Key != old {
			t.Errorf("u9 = %+v; want charged under its key %s", m, old)
		}
		if pp, err := sb.Query(ctx, old); err != nil || pp.Status != lapse.ProviderPaid {
			t.Errorf("the provider's charge under %s: %+v, %v; want paid", old, pp, err)
		}
		if g, err := ea.Group(ctx, "G-OLD"); err != nil || g.Order.State != flows.GroupSettled {
			t.Errorf("G-OLD = %+v, %v; want SETTLED", g, err)
		}
	})
}
