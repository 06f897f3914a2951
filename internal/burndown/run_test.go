package burndown_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/burndown"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

type migratingStore interface {
	lapse.Store
	Migrate(ctx context.Context) error
}

// open opens and migrates the store of a scratch database.
func open(t *testing.T, sc *burndown.Scratch) migratingStore {
	t.Helper()
	ctx := context.Background()
	var s migratingStore
	var err error
	switch sc.Kind {
	case burndown.KindPostgres:
		s, err = postgres.Open(ctx, sc.DSN, postgres.Config{})
	case burndown.KindMySQL:
		s, err = mysql.Open(ctx, sc.DSN, mysql.Config{})
	default:
		s, err = sqlite.Open(ctx, sc.DSN, sqlite.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s
}

// burnDown runs a small burn-down in a scratch database made beside dsn,
// checks what it reports, and drops the scratch database.
func burnDown(t *testing.T, dsn string, cfg burndown.Config) (*burndown.Scratch, *burndown.Result) {
	t.Helper()
	ctx := context.Background()
	sc, err := burndown.NewScratch(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sc.Name, "lapse_bench_") {
		t.Errorf("scratch database %q is not named lapse_bench_…", sc.Name)
	}
	s := open(t, sc)
	if sc.Kind == burndown.KindPostgres {
		cfg.Postgres = sc.DSN
	}
	var phases []burndown.Phase
	cfg.Progress = func(p burndown.Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		if p.Done > p.Total {
			t.Errorf("progress %+v: done past the total", p)
		}
	}
	res, err := burndown.Run(ctx, s, cfg)
	s.Close()
	if derr := sc.Drop(ctx); derr != nil {
		t.Error(derr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := []burndown.Phase{burndown.PhaseLoad, burndown.PhaseClose}; strings.Join(phaseNames(phases), ",") != strings.Join(phaseNames(want), ",") {
		t.Errorf("progress phases %v, want %v", phases, want)
	}
	t.Logf("%s: %d closed in %v (%.0f/s), lag %+v, WAL %d bytes, loaded %d in %v",
		sc.Kind, res.Closed, res.Elapsed, res.PerSecond(), res.Lag, res.WALBytes, res.Loaded, res.Load)
	n := cmpOr(cfg.Orders, burndown.DefaultOrders)
	if res.Closed != n || res.Orders != n {
		t.Errorf("closed %d of %d, want %d", res.Closed, res.Orders, n)
	}
	if res.Elapsed <= 0 || res.PerSecond() <= 0 {
		t.Errorf("elapsed %v, %v closes/s", res.Elapsed, res.PerSecond())
	}
	l := res.Lag
	if l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.P999 || l.P999 > l.Max || l.Max > res.Elapsed+spread(n) {
		t.Errorf("lag %+v in a run of %v", l, res.Elapsed)
	}
	return sc, res
}

// spread is how far apart the first and the last of n due deadlines are.
func spread(n int) time.Duration { return time.Duration(n) * time.Microsecond }

func phaseNames(ps []burndown.Phase) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p))
	}
	return out
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func TestRunSQLite(t *testing.T) {
	t.Parallel()
	sc, res := burnDown(t, t.TempDir()+"/lapse.db", burndown.Config{Orders: 2000, Subscribers: 2})
	if res.Loaded != 10000 || res.NotDue != 4 {
		t.Errorf("loaded %d orders, %d not due per due one; want 10000, 4", res.Loaded, res.NotDue)
	}
	if res.WALBytes != -1 || res.WALPerClose() != -1 || res.Settings != nil {
		t.Errorf("SQLite has WAL %d and settings %v", res.WALBytes, res.Settings)
	}
	if process, server := res.CPU.Per(res.Closed); process <= 0 || server != -1 {
		t.Errorf("SQLite's CPU per close: process %.1f µs, server %.1f µs; want some, and none known", process, server)
	}
	if _, err := os.Stat(sc.Name); !os.IsNotExist(err) {
		t.Errorf("scratch directory %s is still there: %v", sc.Name, err)
	}
}

func TestRunPostgres(t *testing.T) {
	t.Parallel()
	base := testenv.Require(t, testenv.EnvPostgres, "PostgreSQL")
	sc, res := burnDown(t, base, burndown.Config{Orders: 2000, NotDue: -1, Batch: 300})
	if res.Loaded != 2000 || res.NotDue != 0 || res.Batch != 300 {
		t.Errorf("loaded %d orders, %d not due per due one, batch %d; want 2000, 0, 300", res.Loaded, res.NotDue, res.Batch)
	}
	if res.WALBytes <= 0 {
		t.Errorf("WAL %d bytes", res.WALBytes)
	}
	// The server here is on this host: its sessions' CPU is read. A close
	// takes tens of µs of each; a meter that read nothing, or everything
	// the machine did, would be far off.
	if process, server := res.CPU.Per(res.Closed); process <= 0 || process > 5000 || server <= 0 || server > 5000 {
		t.Errorf("CPU per close: process %.1f µs, server %.1f µs", process, server)
	}
	if len(res.Settings) != 10 || res.Settings[0].Name != "server_version" || res.Settings[0].Value == "" {
		t.Errorf("settings %v", res.Settings)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", sc.Name).Scan(&left); err != nil || left {
		t.Errorf("schema %s left after Drop: %v %v", sc.Name, left, err)
	}
}

func TestRunMySQL(t *testing.T) {
	t.Parallel()
	base := testenv.Require(t, testenv.EnvMySQL, "MySQL")
	sc, _ := burnDown(t, base, burndown.Config{Orders: 1000, Subscribers: 2})
	var left int
	if err := testenv.MySQLAdmin(t).QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", sc.Name).Scan(&left); err != nil || left != 0 {
		t.Errorf("database %s left after Drop: %d %v", sc.Name, left, err)
	}
}

// TestRunRefusesAStoreWithOrders: a second run into the same store fails
// instead of measuring a table that holds the first one's orders.
func TestRunRefusesAStoreWithOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc, err := burndown.NewScratch(ctx, t.TempDir()+"/lapse.db")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, sc)
	defer s.Close()
	if _, err := burndown.Run(ctx, s, burndown.Config{Orders: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := burndown.Run(ctx, s, burndown.Config{Orders: 100}); err == nil {
		t.Error("a second run into the same store succeeded")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []burndown.Config{{Orders: -1}, {Subscribers: burndown.MaxSubscribers + 1}, {Subscribers: -1}, {Batch: -5}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v is valid", c)
		}
	}
}
