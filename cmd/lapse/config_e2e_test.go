package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lapseEnv runs the lapse binary in dir with args and the variables env,
// and returns its stdout, its stderr and whether it exited 0.
func lapseEnv(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lapseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_HTTP=", "LAPSE_FLOWS=", "LAPSE_CONFIG=", "LAPSE_BATCH=", "LAPSE_MAX_SLEEP=")
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("lapse %v did not exit within a minute:\n%s", args, errOut.String())
	}
	return out.String(), errOut.String(), err == nil
}

// configRow is a line of `lapse config`.
type configRow struct{ value, source string }

// configRows parses the output of `lapse config`, checking that it is sorted
// and aligned.
func configRows(t *testing.T, out string) map[string]configRow {
	t.Helper()
	rows := map[string]configRow{}
	var names []string
	valueCol := -1
	for line := range strings.Lines(strings.TrimSpace(out)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("line %q: want name, value, source", line)
		}
		names = append(names, f[0])
		rows[f[0]] = configRow{f[1], strings.Join(f[2:], " ")}
		col := strings.Index(line[len(f[0]):], f[1]) + len(f[0])
		if valueCol >= 0 && col != valueCol {
			t.Errorf("line %q: value at column %d, not %d", line, col, valueCol)
		}
		valueCol = col
	}
	if !slices.IsSorted(names) {
		t.Errorf("flags not sorted by name: %q", names)
	}
	return rows
}

func TestConfigCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lapse.yaml")
	if err := os.WriteFile(path, []byte(`sweep-interval: 5s
db: postgres://lapse:hunter2@db.example:5432/lapse?sslmode=disable
webhook-events: [order.*, group.*]
webhook-secret: 0123456789abcdef-s3cret
batch: 100
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, ok := lapseEnv(t, dir, []string{"LAPSE_BATCH=7", "LAPSE_CONFIG=" + path}, "config", "--max-sleep", "3s")
	if !ok {
		t.Fatalf("lapse config failed:\n%s", errOut)
	}
	rows := configRows(t, out)
	for name, want := range map[string]configRow{
		"config":         {path, "env LAPSE_CONFIG"},
		"sweep-interval": {"5s", "file " + path + ":1"},
		"db":             {"postgres://lapse:xxxxx@db.example:5432/lapse?sslmode=disable", "file " + path + ":2"},
		"webhook-events": {"order.*,group.*", "file " + path + ":3"},
		"webhook-secret": {"xxxxx", "file " + path + ":4"},
		"batch":          {"7", "env LAPSE_BATCH"},
		"max-sleep":      {"3s", "flag"},
		"workers":        {"2", "default"},
		"stripe-secrets": {`""`, "default"},
	} {
		if got := rows[name]; got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for _, secret := range []string{"hunter2", "s3cret"} {
		if strings.Contains(out+errOut, secret) {
			t.Errorf("lapse config shows %q:\n%s", secret, out)
		}
	}
}

func TestConfigCommandSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lapse.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("sweep-interval: 5s\n")
	if _, errOut, ok := lapseEnv(t, dir, nil, "config", "--config", "lapse.yaml"); !ok {
		t.Fatalf("lapse config failed:\n%s", errOut)
	}
	// lapse config shows; only serve writes the snapshot.
	if _, err := os.Stat(path + ".lastgood"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("lapse config wrote a snapshot (%v)", err)
	}
	if err := os.WriteFile(path+".lastgood", []byte("sweep-interval: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	write("sweep-interval: 5s\nsweep-intervall: 6s\n")
	out, errOut, ok := lapseEnv(t, dir, nil, "config", "--config", "lapse.yaml")
	if !ok {
		t.Fatalf("lapse config on the snapshot failed:\n%s", errOut)
	}
	want := regexp.MustCompile(`lapse: warning: config lapse.yaml is unreadable or invalid: lapse.yaml:2: unknown key "sweep-intervall": ` +
		`no command of lapse has a flag --sweep-intervall; running on the last good snapshot lapse.yaml.lastgood written at \d{4}-`)
	if !want.MatchString(errOut) {
		t.Errorf("stderr %q does not match %s", errOut, want)
	}
	if got := configRows(t, out)["sweep-interval"]; got != (configRow{"5s", "file lapse.yaml.lastgood:1"}) {
		t.Errorf("sweep-interval: %q, want it from the snapshot", got)
	}

	if err := os.Remove(path + ".lastgood"); err != nil {
		t.Fatal(err)
	}
	out, errOut, ok = lapseEnv(t, dir, nil, "config", "--config", "lapse.yaml")
	if ok || out != "" || !strings.Contains(errOut, `lapse: --config: lapse.yaml:2: unknown key "sweep-intervall"`) {
		t.Errorf("without a snapshot: ok %v, stdout %q, stderr %q; want the error", ok, out, errOut)
	}
}

// flagNames returns the flags that `-h` lists in usage.
func flagNames(usage string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(usage, -1) {
		names = append(names, m[1])
	}
	return names
}

// TestConfigFlagsMatchServe guards `lapse config` against serve's flags
// changing under it.
func TestConfigFlagsMatchServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, serveHelp, _ := lapseEnv(t, dir, nil, "serve", "-h")
	_, configHelp, _ := lapseEnv(t, dir, nil, "config", "-h")
	serve, config := flagNames(serveHelp), flagNames(configHelp)
	if len(serve) < 50 || !slices.Contains(serve, "config") || !slices.Equal(serve, config) {
		t.Errorf("flags of serve and config differ:\nserve  %q\nconfig %q", serve, config)
	}
}

// TestConfigOtherCommands: one config file serves every command. Each
// takes the keys of its own flags; the keys of the other commands' flags
// are checked and otherwise ignored; an unknown key or a refused value
// stops every command.
func TestConfigOtherCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "serve.yaml"), []byte("db: from-file.db\nsweep-interval: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("db: from-file.db\nsweep-interval: 5x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bogus.yaml"), []byte("db: from-file.db\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, ok := lapseEnv(t, dir, nil, "migrate", "--config", "serve.yaml"); !ok || !strings.Contains(out, "migrated from-file.db") {
		t.Fatalf("migrate: ok %v, %s%s", ok, out, errOut)
	}
	for _, cmd := range [][]string{{"migrate"}, {"flows"}, {"reconcile"}, {"serve", "--db", "serve.db"}} {
		_, errOut, ok := lapseEnv(t, dir, nil, append(cmd, "--config", "bad.yaml")...)
		if ok || !strings.Contains(errOut, `bad.yaml:2: sweep-interval: invalid duration "5x"`) {
			t.Errorf("%s: ok %v, stderr %q", cmd, ok, errOut)
		}
		_, errOut, ok = lapseEnv(t, dir, nil, append(cmd, "--config", "bogus.yaml")...)
		if ok || !strings.Contains(errOut, `bogus.yaml:2: unknown key "bogus": no command of lapse has a flag --bogus`) {
			t.Errorf("%s: ok %v, stderr %q", cmd, ok, errOut)
		}
	}
	// serve refuses a bad value before it touches the database.
	if _, err := os.Stat(filepath.Join(dir, "serve.db")); err == nil {
		t.Errorf("serve made its database despite the bad config")
	}
}

// TestConfigOfTheREADME: every command runs on the README's own lapse.yaml
// (its database overridden on the command line), and none of them writes
// a snapshot beside it.
func TestConfigOfTheREADME(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(# lapse\\.yaml\n.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```yaml block that starts # lapse.yaml")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "lapse.yaml")
	if err := os.WriteFile(path, m[1], 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "lapse.db")
	for _, cmd := range [][]string{
		{"migrate"}, {"reconcile"}, {"flows"}, {"flows", "checkout"}, {"config"},
		{"apikey", "list"}, {"operator", "list"}, {"audit", "verify"}, {"audit", "list"},
		{"close", "--order", "A-1", "--dry-run"},
	} {
		args := append(cmd, "--config", path)
		if cmd[0] != "flows" {
			args = append(args, "--db", db)
		}
		if out, errOut, ok := lapseEnv(t, dir, nil, args...); !ok {
			t.Errorf("lapse %s --config README's lapse.yaml: %s%s", strings.Join(cmd, " "), out, errOut)
		}
	}
	if _, err := os.Stat(path + ".lastgood"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a command that only reads the config wrote its snapshot (%v)", err)
	}
}

// TestConfigSnapshotNeedsAStart: lapse serve makes a file its last good
// snapshot only once it serves on it. A file whose values pass one by one
// but do not go together stops the start and leaves the snapshot alone,
// so that the next start on a broken file runs on the last good one.
func TestConfigSnapshotNeedsAStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, snap := filepath.Join(dir, "lapse.yaml"), filepath.Join(dir, "lapse.yaml.lastgood")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const good = "sweep-interval: 5s\n"
	write(good)
	// The snapshot is written before serve says it serves.
	p := startServe(t, dir, "--config", "lapse.yaml")
	if b, err := os.ReadFile(snap); string(b) != good {
		t.Fatalf("serving, and the snapshot is %q (%v), not the file it serves on", b, err)
	}
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	write("sweep-interval: 6s\ntrigger-mode: database\n") // without redis
	_, errOut, code := lapseExit(t, dir, nil, "serve", "--http", "127.0.0.1:0", "--admin-key", testAdminKey, "--config", "lapse.yaml")
	if code != 2 || !strings.Contains(errOut, "--trigger-mode database needs --redis") {
		t.Fatalf("serve on a file whose values do not go together: exit %d, want 2:\n%s", code, errOut)
	}
	if b, _ := os.ReadFile(snap); string(b) != good {
		t.Fatalf("a file serve refused replaced the snapshot: %q", b)
	}

	write("sweep-interval: [\n")
	p = startServe(t, dir, "--config", "lapse.yaml")
	if !strings.Contains(p.Logs(), "running on the last good snapshot") {
		t.Errorf("serve on a broken file did not say it runs on the snapshot:\n%s", p.Logs())
	}
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// startSignalled runs lapse serve on a new database in a new directory with
// a config file that every user may read and that holds its admin key, so
// that it warns at once, before it makes and migrates the database; sends
// sig as soon as it has; and returns its log up to "lapse serving" (or its
// end), whether it got there, and the process.
func startSignalled(t *testing.T, sig syscall.Signal) (string, bool, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "lapse.yaml")
	if err := os.WriteFile(path, []byte("admin-key: "+testAdminKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lapseBin, "serve", "--log-format", "json", "--http", "127.0.0.1:0", "--probe-interval", "0", "--config", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_HTTP=", "LAPSE_ADMIN_KEY=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var logs strings.Builder
	sent, serving := false, false
	sc := bufio.NewScanner(stderr)
	for !serving && sc.Scan() {
		line := sc.Text()
		logs.WriteString(line + "\n")
		if !sent && strings.Contains(line, "readable by every user") {
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			sent = true
		}
		serving = strings.Contains(line, `"msg":"lapse serving"`)
	}
	if !sent {
		t.Fatalf("lapse serve did not warn of its config file:\n%s", logs.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	return logs.String(), serving, cmd
}

// TestServeSIGHUPWhileStarting: a SIGHUP that comes while lapse serve starts
// does not end it: it starts, and serves.
func TestServeSIGHUPWhileStarting(t *testing.T) {
	t.Parallel()
	logs, serving, cmd := startSignalled(t, syscall.SIGHUP)
	if !serving {
		t.Fatalf("lapse serve did not serve after a SIGHUP while starting: %v\n%s", cmd.Wait(), logs)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("lapse serve after SIGTERM: %v\n%s", err, logs)
	}
}

// TestServeSIGTERMWhileStarting: a SIGTERM that comes while lapse serve
// starts (making and migrating its database) stops it as one that comes
// later does: exit 0, saying so, not as a failed start.
func TestServeSIGTERMWhileStarting(t *testing.T) {
	t.Parallel()
	logs, serving, cmd := startSignalled(t, syscall.SIGTERM)
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("lapse serve stopped while starting: %v, want exit 0\n%s", err, logs)
	}
	if !serving && !strings.Contains(logs, "lapse stopped before it served: asked to stop while starting") {
		t.Errorf("lapse serve stopped while starting without saying so:\n%s", logs)
	}
}
