package main_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/testenv"
)

// benchScratch finds the scratch database lapse bench named on stderr.
var benchScratch = regexp.MustCompile(`working in the scratch (?:schema|database|directory) (\S+)`)

// benchFigures are the lines of lapse bench's report on every store.
var benchFigures = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^closed 2000 due orders in \S+: \d+ closes/s$`),
	regexp.MustCompile(`(?m)^  workload +2000 due \+ 8000 not due \(4 per due order\)`),
	regexp.MustCompile(`(?m)^  close lag +p50 \S+ +p99 \S+ +p99\.9 \S+ +max \S+ `),
}

// schemaExists reports whether PostgreSQL (EnvPostgres) has a schema name.
func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.Require(t, testenv.EnvPostgres, "PostgreSQL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// checkFigures checks that out has every figure of lapse bench's report,
// and the extra ones.
func checkFigures(t *testing.T, out string, extra ...string) {
	t.Helper()
	for _, re := range benchFigures {
		if !re.MatchString(out) {
			t.Errorf("the report has no line matching %s:\n%s", re, out)
		}
	}
	for _, want := range extra {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
}

// TestBenchPostgres: lapse bench burns a backlog down in a scratch schema
// of its own, reports closes/s, the lag, the WAL and the settings, and
// drops the schema.
func TestBenchPostgres(t *testing.T) {
	t.Parallel()
	dsn := testenv.Require(t, testenv.EnvPostgres, "PostgreSQL")
	out, errOut, code := tool(t, t.TempDir(), "", "bench", "--db", dsn, "--orders", "2000", "--subscribers", "2")
	if code != 0 {
		t.Fatalf("lapse bench = %d:\n%s%s", code, out, errOut)
	}
	t.Logf("lapse bench:\n%s", out)
	checkFigures(t, out, "2 subscribers", "bytes/close", "µs/close in the database's sessions", "server_version", "shared_buffers", "synchronous_commit",
		"wal_compression", "full_page_writes", "checkpoint_timeout")
	m := benchScratch.FindStringSubmatch(errOut)
	if m == nil || !strings.HasPrefix(m[1], "lapse_bench_") {
		t.Fatalf("lapse bench named no scratch schema lapse_bench_…:\n%s", errOut)
	}
	if !strings.Contains(errOut, "due orders closed (100%)") || !strings.Contains(errOut, "orders loaded (100%)") {
		t.Errorf("no progress shown:\n%s", errOut)
	}
	if schemaExists(t, m[1]) {
		t.Errorf("the scratch schema %s is still there", m[1])
	}
}

// TestBenchSQLite: on SQLite the scratch database is a directory beside the
// --db file, removed at the end; the --db file is not made.
func TestBenchSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, code := tool(t, dir, "", "bench", "--db", filepath.Join(dir, "lapse.db"), "--orders", "2000")
	if code != 0 {
		t.Fatalf("lapse bench = %d:\n%s%s", code, out, errOut)
	}
	checkFigures(t, out, "sqlite")
	if strings.Contains(out, "WAL") {
		t.Errorf("the report of SQLite has WAL figures:\n%s", out)
	}
	if !benchScratch.MatchString(errOut) {
		t.Errorf("lapse bench named no scratch directory:\n%s", errOut)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("lapse bench left %v in the directory of --db", left)
	}
}

// TestBenchKeep: --keep leaves the scratch database and names its DSN.
func TestBenchKeep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, code := tool(t, dir, "", "bench", "--db", filepath.Join(dir, "lapse.db"), "--orders", "100", "--not-due", "0", "--keep")
	if code != 0 || !strings.Contains(out, "100 due + 0 not due") {
		t.Fatalf("lapse bench --keep = %d:\n%s%s", code, out, errOut)
	}
	m := regexp.MustCompile(`kept the scratch directory \S+: --db (\S+)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("lapse bench --keep named no DSN:\n%s", errOut)
	}
	if _, err := os.Stat(m[1]); err != nil {
		t.Errorf("the kept database: %v", err)
	}
}

// TestBenchArguments: -h exits 0 with the usage; a bad argument exits 2
// having made nothing.
func TestBenchArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, code := tool(t, dir, "", "bench", "-h")
	if code != 0 || !strings.Contains(errOut, "Usage: lapse bench") || !strings.Contains(errOut, "-not-due") {
		t.Errorf("lapse bench -h = %d:\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"--subscribers", "9"}, {"--orders", "0"}, {"--orders", "100000001"}, {"--not-due", "-1"},
		{"--orders", "50000000", "--not-due", "4"}, {"--batch", "0"}, {"--workers", "65"}, {"extra"}} {
		out, errOut, code := tool(t, dir, "", append([]string{"bench", "--db", filepath.Join(dir, "lapse.db")}, args...)...)
		if code != 2 || !strings.Contains(errOut, "lapse: ") || !strings.Contains(errOut, strings.TrimLeft(args[0], "-")) {
			t.Errorf("lapse bench %v = %d:\n%s%s", args, code, out, errOut)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("refused runs left %v", left)
	}
}

// TestBenchInterrupted: Ctrl-C while loading stops lapse bench, which
// drops its scratch schema before it exits.
func TestBenchInterrupted(t *testing.T) {
	t.Parallel()
	dsn := testenv.Require(t, testenv.EnvPostgres, "PostgreSQL")
	cmd := exec.Command(lapseBin, "bench", "--db", dsn, "--orders", "200000")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_CONFIG=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A lapse bench that does not stop is killed, and fails the test below.
	timeout := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timeout.Stop()
	var lines []string
	var schema string
	interrupted := false
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if m := benchScratch.FindStringSubmatch(sc.Text()); m != nil {
			schema = m[1]
		}
		if strings.Contains(sc.Text(), "orders loaded") && !interrupted {
			_ = cmd.Process.Signal(syscall.SIGINT)
			interrupted = true
		}
	}
	err = cmd.Wait()
	all := strings.Join(lines, "\n")
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("lapse bench did not stop by itself after Ctrl-C (%v):\n%s", err, all)
	}
	if !interrupted || err == nil || schema == "" {
		t.Fatalf("lapse bench ended (%v) without being interrupted while loading:\n%s", err, all)
	}
	if !strings.Contains(all, "stopped: context canceled") || !strings.Contains(all, "dropped the scratch schema "+schema) {
		t.Errorf("lapse bench said:\n%s", all)
	}
	if schemaExists(t, schema) {
		t.Errorf("the scratch schema %s is still there after Ctrl-C", schema)
	}
}

// TestBenchMySQL: on MySQL the scratch database is a database of the
// server, dropped at the end.
func TestBenchMySQL(t *testing.T) {
	t.Parallel()
	admin := testenv.MySQLAdmin(t)
	out, errOut, code := tool(t, t.TempDir(), "", "bench", "--db", os.Getenv(testenv.EnvMySQL), "--orders", "2000")
	if code != 0 {
		t.Fatalf("lapse bench = %d:\n%s%s", code, out, errOut)
	}
	checkFigures(t, out, "mysql")
	m := benchScratch.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("lapse bench named no scratch database:\n%s", errOut)
	}
	var left int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", m[1]).Scan(&left); err != nil || left != 0 {
		t.Errorf("the scratch database %s is still there: %d %v", m[1], left, err)
	}
}
