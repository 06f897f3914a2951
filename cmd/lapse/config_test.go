package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// testSettings returns the settings of a test command, with none of them
// set in the environment. A reload of sweep-interval, max-sleep, batch or
// workers is recorded in a; the others need a restart. Those four have
// serve's ranges.
func testSettings(t *testing.T, a *applied) []*setting {
	t.Helper()
	settings := []*setting{
		{Name: "sweep-interval", Kind: kindDuration, Default: "10s", Range: serveSetting("sweep-interval").Range, Doc: "beat of the sweep",
			field: func(o *options) any { return &o.cc.SweepInterval }, Reload: a.reload("sweep-interval")},
		{Name: "max-sleep", Kind: kindDuration, Default: "1s", Range: serveSetting("max-sleep").Range, Doc: "longest sleep",
			field: func(o *options) any { return &o.cc.MaxSleep }, Reload: a.reload("max-sleep")},
		{Name: "batch", Kind: kindInt, Default: "500", Range: serveSetting("batch").Range, Doc: "batch size",
			field: func(o *options) any { return &o.cc.Batch }, Reload: a.reload("batch")},
		{Name: "workers", Kind: kindInt, Default: "2", Range: serveSetting("workers").Range, Doc: "workers",
			field: func(o *options) any { return &o.cc.Workers }, Reload: a.reload("workers")},
		{Name: "db", Kind: kindString, Default: "lapse.db", Doc: "database",
			field: func(o *options) any { return &o.db }},
		{Name: "webhook-events", Kind: kindList, Default: "order.*", Doc: "events",
			field: func(o *options) any { return &o.sf.webhookEvents }},
		{Name: "webhook-retry", Kind: kindSchedule, Default: "1m,5m", Doc: "retries",
			field: func(o *options) any { return &o.sf.webhookRetry }},
		{Name: "webhook-secret", Kind: kindString, Secret: true, Doc: "secret",
			field: func(o *options) any { return &o.sf.webhookSecret }},
		{Name: "sandbox", Kind: kindBool, Doc: "sandbox",
			field: func(o *options) any { return &o.pf.sandbox }},
	}
	for _, s := range append(settings, configSetting) {
		t.Setenv(envName(s.Name), "")
	}
	return settings
}

// load loads settings from args as command "lapse test" does.
func load(settings []*setting, args ...string) (*flag.FlagSet, *flagConfig, error) {
	fs := newFlagSet("test", io.Discard)
	cfg, err := loadFlags(fs, settings, &options{}, args)
	return fs, cfg, err
}

// writeConfig writes text to the file name in dir and returns its path.
func writeConfig(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func value(fs *flag.FlagSet, name string) string { return fs.Lookup(name).Value.String() }

func TestConfigPrecedence(t *testing.T) {
	settings := testSettings(t, nil)
	path := writeConfig(t, t.TempDir(), "lapse.yaml", `# comment
sweep-interval: 5s
batch: 100
max-sleep: 2s
workers: 3
`)
	t.Setenv("LAPSE_BATCH", "7")
	t.Setenv("LAPSE_MAX_SLEEP", "3s")
	t.Setenv("LAPSE_DB", "env.db")
	fs, cfg, err := load(settings, "--config", path, "--max-sleep", "4s")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ name, value, source string }{
		{"sandbox", "false", "default"},
		{"sweep-interval", "5s", "file " + path + ":2"},
		{"workers", "3", "file " + path + ":5"},
		{"batch", "7", "env LAPSE_BATCH"},
		{"db", "env.db", "env LAPSE_DB"},
		{"max-sleep", "4s", "flag"},
		{"config", path, "flag"},
	} {
		if got := value(fs, want.name); got != want.value {
			t.Errorf("--%s = %q, want %q", want.name, got, want.value)
		}
		if got := cfg.Sources[want.name]; got != want.source {
			t.Errorf("source of --%s = %q, want %q", want.name, got, want.source)
		}
	}
	if cfg.Path != path || cfg.FileErr != nil || len(cfg.warnings()) != 0 {
		t.Errorf("config = %+v, want the file %s and no warnings", cfg, path)
	}
}

func TestConfigFromEnv(t *testing.T) {
	settings := testSettings(t, nil)
	path := writeConfig(t, t.TempDir(), "lapse.yaml", "batch: 100\n")
	t.Setenv("LAPSE_CONFIG", path)
	fs, cfg, err := load(settings)
	if err != nil {
		t.Fatal(err)
	}
	if value(fs, "batch") != "100" || cfg.Sources["config"] != "env LAPSE_CONFIG" || cfg.Sources["batch"] != "file "+path+":1" {
		t.Errorf("batch %s, sources %v", value(fs, "batch"), cfg.Sources)
	}
}

func TestConfigValues(t *testing.T) {
	settings := testSettings(t, nil)
	path := writeConfig(t, t.TempDir(), "lapse.yaml", `webhook-events:
  - order.*
  - group.*
db: "with space.db"
sandbox: true
webhook-secret:
`)
	fs, _, err := load(settings, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"webhook-events": "order.*,group.*", "db": "with space.db", "sandbox": "true", "webhook-secret": ""} {
		if got := value(fs, name); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	for _, text := range []string{"", "# all commented out\n", "---\n"} {
		path := writeConfig(t, t.TempDir(), "lapse.yaml", text)
		if _, _, err := load(testSettings(t, nil), "--config", path); err != nil {
			t.Errorf("file %q: %v", text, err)
		}
	}
}

// TestConfigExposed: a config file that every user of the machine may read
// is warned about when it holds a secret (a secret setting, a password in a
// URL, also a key of another command's), without showing it; not when it
// holds none, or when only its owner and group may read it.
func TestConfigExposed(t *testing.T) {
	settings := testSettings(t, nil)
	for _, tc := range []struct {
		text string
		mode os.FileMode
		want string
	}{
		{"webhook-secret: s3cret-s3cret-s3cret\nbatch: 5\n", 0o644, "holds secrets (webhook-secret) and is readable by every user of this machine (mode 0644)"},
		{"db: postgres://u:hunter2@db/lapse\nadmin-key: s3cret-s3cret-s3cret-s3cret-s3cret\n", 0o604, "holds secrets (db, admin-key)"},
		{"webhook-secret: s3cret-s3cret-s3cret\n", 0o640, ""},
		{"db: postgres://u@db/lapse\nbatch: 5\n", 0o644, ""},
	} {
		path := writeConfig(t, t.TempDir(), "lapse.yaml", tc.text)
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, cfg, err := load(settings, "--config", path)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(cfg.warnings(), "\n")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("file %q, mode %04o: warnings %q, want %q", tc.text, tc.mode, got, tc.want)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "hunter2") {
			t.Errorf("the warning shows a secret: %s", got)
		}
	}
}

// TestConfigMisspeltVariable: a LAPSE_ variable a typo away from a
// setting's is warned about, naming the one meant and not the value; one
// far from every setting's (a test harness's) and a setting's own are not.
func TestConfigMisspeltVariable(t *testing.T) {
	t.Setenv("LAPSE_SWEEP_INTERAVL", "5s")
	t.Setenv("LAPSE_WEBHOOK_SECRT", "s3cret-s3cret-s3cret")
	t.Setenv("LAPSE_TEST_POSTGRES", "postgres://u:hunter2@db/lapse")
	t.Setenv("LAPSE_BENCH_GATHER", "1ms")
	t.Setenv("LAPSE_BATCH", "7")
	_, cfg, err := load(testSettings(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cfg.warnings(), "\n")
	for _, want := range []string{
		"LAPSE_SWEEP_INTERAVL is set, and no command of lapse reads it: did you mean LAPSE_SWEEP_INTERVAL?",
		"LAPSE_WEBHOOK_SECRT is set, and no command of lapse reads it: did you mean LAPSE_WEBHOOK_SECRET?",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings %q, want %q", got, want)
		}
	}
	for _, not := range []string{"LAPSE_TEST_POSTGRES", "LAPSE_BENCH_GATHER", "LAPSE_BATCH", "s3cret", "5s"} {
		if strings.Contains(got, not) {
			t.Errorf("warnings %q name %s", got, not)
		}
	}
}

// TestConfigNamedPipe: a config file that is a named pipe is refused:
// opening it waited for a writer that never came, and Ctrl-C and SIGTERM,
// which lapse takes for itself, did not end the wait.
func TestConfigNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lapse.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal("make a named pipe:", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := load(testSettings(t, nil), "--config", path)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a named pipe as the config file: %v, want it refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a named pipe as the config file still waits after 10s") // the goroutine stays blocked
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string // in the error, besides the file's path
	}{
		{"unknown key", "batch: 1\n\nbogus: 2\n", []string{":3:", `unknown key "bogus"`, "no command of lapse has a flag --bogus"}},
		{"misspelt key", "sweep_interval: 5s\n", []string{":1:", "did you mean sweep-interval?"}},
		{"bad duration", "batch: 1\nsweep-interval: 5x\n", []string{":2:", "sweep-interval", `invalid duration "5x"`}},
		{"bad int", "batch: lots\n", []string{":1:", "batch", `invalid int "lots"`}},
		{"bad bool", "sandbox: yes\n", []string{":1:", "sandbox", `invalid boolean "yes"`}},
		{"bad schedule", "webhook-retry: 1m,soon\n", []string{":1:", "webhook-retry", `invalid schedule "1m,soon"`}},
		{"twice", "batch: 1\nbatch: 2\n", []string{":2:", "batch: given twice (first on line 1)"}},
		{"mapping value", "batch:\n  a: 1\n", []string{":1:", "batch: want a value or a list of values"}},
		{"config key", "config: other.yaml\n", []string{":1:", "cannot name a config file"}},
		{"not a mapping", "- batch\n", []string{":1:", "want flag names and their values"}},
		{"yaml syntax", "batch: 1\nsweep-interval: [5s\n", []string{"yaml:", "line"}},
		{"two documents", "batch: 1\n---\nbatch: 2\n", []string{":2:", "second YAML document"}},
		{"every error", "bogus: 1\nbatch: x\n", []string{":1:", ":2:", "bogus", "batch"}},
		// Joined with commas, a list would be one value: an admin key or a
		// webhook secret "K1,K2", which nobody holds.
		{"list of one-value secret", "webhook-secret: [aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb]\n",
			[]string{":1:", "webhook-secret: a list, but --webhook-secret takes one string"}},
		{"list of numbers", "batch: [1, 2]\n", []string{":1:", "batch: a list, but --batch takes one int"}},
		{"list of one", "db:\n  - other.db\n", []string{":1:", "db: a list, but --db takes one string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, t.TempDir(), "lapse.yaml", tc.text)
			fs, _, err := load(testSettings(t, nil), "--config", path)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range append([]string{"--config: " + path}, tc.want...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if value(fs, "batch") != "500" {
				t.Errorf("a bad file changed --batch to %s", value(fs, "batch"))
			}
			if _, err := os.Stat(path + snapshotSuffix); err == nil {
				t.Errorf("a bad file was snapshotted")
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		// A comment of 1 MiB and a byte: what /dev/zero would be, but ends.
		path := writeConfig(t, t.TempDir(), "lapse.yaml", "#"+strings.Repeat("x", maxConfigSize))
		if _, _, err := load(testSettings(t, nil), "--config", path); err == nil || !strings.Contains(err.Error(), path+" is larger than 1024 KiB") {
			t.Errorf("error %v, want the file refused as too large", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "lapse.yaml")
		_, _, err := load(testSettings(t, nil), "--config", path)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("error %v does not name %s", err, path)
		}
	})
	t.Run("bad variable beneath a flag", func(t *testing.T) {
		settings := testSettings(t, nil)
		t.Setenv("LAPSE_BATCH", "lots")
		if _, _, err := load(settings, "--batch", "5"); err == nil || !strings.Contains(err.Error(), "LAPSE_BATCH") {
			t.Errorf("error %v does not name LAPSE_BATCH", err)
		}
	})
	t.Run("bad schedule in a variable or a flag", func(t *testing.T) {
		settings := testSettings(t, nil)
		t.Setenv("LAPSE_WEBHOOK_RETRY", "exp:1s")
		if _, _, err := load(settings); err == nil || !strings.Contains(err.Error(), `LAPSE_WEBHOOK_RETRY="exp:1s"`) {
			t.Errorf("error %v does not name LAPSE_WEBHOOK_RETRY", err)
		}
		t.Setenv("LAPSE_WEBHOOK_RETRY", "")
		if _, _, err := load(settings, "--webhook-retry", "soon"); err == nil || !strings.Contains(err.Error(), `invalid value "soon" for flag -webhook-retry`) {
			t.Errorf("error %v does not name --webhook-retry", err)
		}
	})
}

func TestConfigSnapshot(t *testing.T) {
	dir := t.TempDir()
	good := "sweep-interval: 5s\nbatch: 100\n"
	path := writeConfig(t, dir, "lapse.yaml", good)
	snap := path + snapshotSuffix
	// Loading writes nothing: only serve keeps a snapshot, through
	// WriteSnapshot.
	_, cfg, err := load(testSettings(t, nil), "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("loading the file wrote a snapshot (%v)", err)
	}
	cfg.WriteSnapshot()
	if b, err := os.ReadFile(snap); err != nil || string(b) != good || cfg.SnapshotErr != nil {
		t.Fatalf("snapshot %q, %v, %v; want the file's contents", b, err, cfg.SnapshotErr)
	}

	// An unchanged file leaves its snapshot alone.
	written := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(snap, written, written); err != nil {
		t.Fatal(err)
	}
	if _, cfg, err := load(testSettings(t, nil), "--config", path); err != nil {
		t.Fatal(err)
	} else {
		cfg.WriteSnapshot()
	}
	if info, err := os.Stat(snap); err != nil || !info.ModTime().Equal(written) {
		t.Fatalf("the snapshot of an unchanged file was rewritten")
	}

	// A broken file starts on the snapshot, and says so.
	writeConfig(t, dir, "lapse.yaml", "sweep-interval: 5x\nbatch: 9\nbogus: 1\n")
	flags, cfg, err := load(testSettings(t, nil), "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WriteSnapshot() // on the snapshot, a no-op
	if value(flags, "sweep-interval") != "5s" || value(flags, "batch") != "100" || cfg.Sources["batch"] != "file "+snap+":2" {
		t.Errorf("on the snapshot: sweep-interval %s, batch %s from %s", value(flags, "sweep-interval"), value(flags, "batch"), cfg.Sources["batch"])
	}
	w := cfg.warnings()
	if len(w) != 1 {
		t.Fatalf("warnings %q, want one", w)
	}
	for _, want := range []string{"config " + path + " is unreadable or invalid", path + ":1: sweep-interval", path + ":3: unknown key",
		"running on the last good snapshot " + snap + " written at " + written.Format(time.RFC3339)} {
		if !strings.Contains(w[0], want) {
			t.Errorf("warning %q does not say %q", w[0], want)
		}
	}
	var logs bytes.Buffer
	cfg.Log(slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "last good snapshot") {
		t.Errorf("logged %q, want the warning at Error level", logs.String())
	}
	if b, _ := os.ReadFile(snap); string(b) != good {
		t.Errorf("the snapshot changed to %q", b)
	}

	// So does a file that is gone.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, cfg, err := load(testSettings(t, nil), "--config", path); err != nil || cfg.FileErr == nil {
		t.Errorf("missing file: %v, %+v; want the snapshot", err, cfg)
	}

	// Without a snapshot, the error stops the command.
	writeConfig(t, dir, "lapse.yaml", "sweep-interval: 5x\n")
	if err := os.Remove(snap); err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(testSettings(t, nil), "--config", path); err == nil || !strings.Contains(err.Error(), path+":1") {
		t.Errorf("error %v, want one naming %s:1", err, path)
	}
}

// syncBuffer is a log destination the test reads while a watcher writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// applied records the values the watcher applies.
type applied struct {
	mu    sync.Mutex
	calls []string // "flag=value"
	fail  map[string]bool
	seen  chan string
}

// reload returns a Reload of setting name that records the values given,
// and refuses those a.fail names. It is nil when a is: the setting needs a
// restart.
func (a *applied) reload(name string) func(*process, string) error {
	if a == nil {
		return nil
	}
	return func(_ *process, v string) error {
		a.mu.Lock()
		a.calls = append(a.calls, name+"="+v)
		fail := a.fail[name]
		a.mu.Unlock()
		if a.seen != nil {
			a.seen <- name + "=" + v
		}
		if fail {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
}

func (a *applied) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.calls
	a.calls = nil
	return out
}

// startWatcher loads text as the config file of args, with the variables
// of env, and returns a watcher of it, with sweep-interval, max-sleep, batch
// and workers reloadable.
func startWatcher(t *testing.T, text string, env map[string]string, args ...string) (w *configWatcher, path string, a *applied, logs *syncBuffer, reg *prometheus.Registry) {
	t.Helper()
	a, logs, reg = &applied{fail: map[string]bool{}}, &syncBuffer{}, prometheus.NewRegistry()
	settings := testSettings(t, a)
	for k, v := range env {
		t.Setenv(k, v)
	}
	path = writeConfig(t, t.TempDir(), "lapse.yaml", text)
	_, cfg, err := load(settings, append([]string{"--config", path}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	w = newConfigWatcher(cfg, nil, slog.New(slog.NewTextHandler(logs, nil)), reg)
	return w, path, a, logs, reg
}

func TestConfigReload(t *testing.T) {
	w, path, a, logs, reg := startWatcher(t, "sweep-interval: 5s\nbatch: 100\nworkers: 3\ndb: a.db\n",
		map[string]string{"LAPSE_BATCH": "7"}, "--max-sleep", "4s")
	t.Setenv("LAPSE_BATCH", "") // read at start only

	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 1m\nbatch: 200\nmax-sleep: 9s\ndb: b.db\nwebhook-secret: s3cret-s3cret-s3cret\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	// workers left the file: back to its default. batch (env) and max-sleep
	// (flag) outrank the file; db needs a restart.
	if got, want := a.take(), []string{"sweep-interval=1m0s", "workers=2"}; !slices.Equal(got, want) {
		t.Errorf("applied %q, want %q", got, want)
	}
	out := logs.String()
	for _, want := range []string{
		`msg="config: changed value needs a restart" flag=db value=b.db running=a.db source="file ` + path + `:4"`,
		`flag=webhook-secret value=xxxxx`,
		`msg="config: the file's value is not used: the flag is set by env LAPSE_BATCH" flag=batch value=200`,
		`msg="config: the file's value is not used: the flag is set by flag" flag=max-sleep value=9s`,
		`msg="config: reloaded" flag=sweep-interval value=1m0s was=5s`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("logs do not say %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("logs show a secret:\n%s", out)
	}
	if w.Errors() != 0 || w.LastError() != nil || w.LastSuccess().IsZero() {
		t.Errorf("errors %d, last %v, success at %v", w.Errors(), w.LastError(), w.LastSuccess())
	}
	if b, _ := os.ReadFile(path + snapshotSuffix); !strings.Contains(string(b), "1m") {
		t.Errorf("snapshot %q is not the reloaded file", b)
	}

	// The same file again applies nothing.
	if err := w.Reload(); err != nil || len(a.take()) != 0 {
		t.Errorf("reloading an unchanged file: %v, applied %q", err, a.take())
	}

	// An invalid file keeps the running configuration.
	good, _ := os.ReadFile(path + snapshotSuffix)
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 2s\nworkers: 9\nbatch: x\n")
	err := w.Reload()
	if err == nil || !strings.Contains(err.Error(), path+":3: batch") {
		t.Errorf("reload error %v, want one naming %s:3", err, path)
	}
	if got := a.take(); len(got) != 0 {
		t.Errorf("an invalid file applied %q", got)
	}
	if w.Errors() != 1 || w.LastError() == nil || metric(t, reg, "lapse_config_reload_errors_total") != 1 {
		t.Errorf("errors %d, last %v, counter %v", w.Errors(), w.LastError(), metric(t, reg, "lapse_config_reload_errors_total"))
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"config reload failed; the running configuration stays\"") {
		t.Errorf("the failure is not logged at Error:\n%s", logs.String())
	}
	if b, _ := os.ReadFile(path + snapshotSuffix); !bytes.Equal(b, good) {
		t.Errorf("an invalid file replaced the snapshot: %q", b)
	}

	// Fixed, it applies from the running values.
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 2s\nworkers: 2\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := a.take(), []string{"sweep-interval=2s"}; !slices.Equal(got, want) {
		t.Errorf("applied %q, want %q", got, want)
	}
	if w.LastError() != nil {
		t.Errorf("last error %v after a good reload", w.LastError())
	}
	if at := metric(t, reg, "lapse_config_last_reload_success_timestamp_seconds"); at != float64(w.LastSuccess().UnixNano())/1e9 {
		t.Errorf("last success gauge %v, want %v", at, w.LastSuccess())
	}
}

// metric returns the value of the counter or gauge name in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestConfigReloadApplyError(t *testing.T) {
	w, path, a, logs, _ := startWatcher(t, "sweep-interval: 5s\n", nil)
	good := writeConfig(t, filepath.Dir(path), "lapse.yaml.lastgood", "sweep-interval: 5s\n")
	a.fail["max-sleep"] = true
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 6s\nmax-sleep: 3s\nbatch: 9\n")
	err := w.Reload()
	if err == nil || !strings.Contains(err.Error(), "--max-sleep 3s") {
		t.Errorf("reload error %v, want the refused max-sleep", err)
	}
	if got, want := a.take(), []string{"batch=9", "max-sleep=3s", "sweep-interval=6s"}; !slices.Equal(got, want) {
		t.Errorf("applied %q, want %q", got, want)
	}
	if w.Errors() != 1 || !strings.Contains(logs.String(), "config: reloaded value refused") {
		t.Errorf("errors %d, logs:\n%s", w.Errors(), logs.String())
	}
	// A file with a value refused is no last good one.
	if b, _ := os.ReadFile(good); string(b) != "sweep-interval: 5s\n" {
		t.Errorf("a file with a refused value replaced the snapshot: %q", b)
	}
	// The refused value is offered again; the others are in force.
	a.fail["max-sleep"] = false
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := a.take(), []string{"max-sleep=3s"}; !slices.Equal(got, want) {
		t.Errorf("applied %q, want %q", got, want)
	}
}

func TestConfigWatcherStartsOnSnapshot(t *testing.T) {
	a := &applied{}
	settings := testSettings(t, a)
	path := writeConfig(t, t.TempDir(), "lapse.yaml", "sweep-interval: 5s\n")
	if _, cfg, err := load(settings, "--config", path); err != nil {
		t.Fatal(err)
	} else {
		cfg.WriteSnapshot() // as serve does
	}
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 5x\n")
	_, cfg, err := load(settings, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	w := newConfigWatcher(cfg, nil, slog.New(slog.DiscardHandler), nil)
	if w.Errors() != 1 || w.LastError() == nil || !w.LastSuccess().IsZero() {
		t.Errorf("on the snapshot: errors %d, last %v, success %v", w.Errors(), w.LastError(), w.LastSuccess())
	}
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 7s\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := a.take(); !slices.Equal(got, []string{"sweep-interval=7s"}) || w.LastError() != nil {
		t.Errorf("applied %q, last error %v", got, w.LastError())
	}
}

// waitApplied waits for the watcher to apply want.
func waitApplied(t *testing.T, a *applied, want string, poke func()) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case got := <-a.seen:
			if got == want {
				return
			}
			t.Errorf("applied %s, want %s", got, want)
		case <-tick.C:
			poke()
		case <-timeout:
			t.Fatalf("%s was not applied within 10s", want)
		}
	}
}

func TestConfigWatcherPolls(t *testing.T) {
	w, path, a, _, _ := startWatcher(t, "sweep-interval: 5s\n", nil)
	a.seen = make(chan string, 10)
	w.Interval = 5 * time.Millisecond
	defer w.Start(t.Context())()

	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 6s\n")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil { // a change even on coarse clocks
		t.Fatal(err)
	}
	waitApplied(t, a, "sweep-interval=6s", func() {})
}

// TestConfigWatcherSIGHUP: a SIGHUP sent as soon as Start returns, as one
// sent when lapse serve says it serves may be, reloads the file; it must
// not find the default action (exit) still in place.
func TestConfigWatcherSIGHUP(t *testing.T) {
	w, path, a, logs, _ := startWatcher(t, "sweep-interval: 5s\n", nil)
	a.seen = make(chan string, 10)
	w.Interval = time.Hour
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 8s\n")
	stop := w.Start(t.Context())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, a, "sweep-interval=8s", func() {})
	if !strings.Contains(logs.String(), "config: SIGHUP, reloading") {
		t.Errorf("logs:\n%s", logs.String())
	}
	stop()

	// Once the context is done, until stop returns, a SIGHUP is still
	// taken, and ignored.
	ctx, cancel := context.WithCancel(t.Context())
	stop = w.Start(ctx)
	cancel()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // for a wrongly handled signal to end the process
	stop()
}

func TestConfigRedact(t *testing.T) {
	settings := settingsByName(serveSettings)
	for _, tc := range []struct{ name, value, want string }{
		{"webhook-secret", "abc", "xxxxx"},
		{"wechatpay-apiv3-key", "k", "xxxxx"},
		{"payment-provider-secrets", "a=s3cret", "xxxxx"},
		{"webhook-secret", "", ""},
		{"db", "postgres://u:hunter2@db:5432/lapse?sslmode=disable", "postgres://u:xxxxx@db:5432/lapse?sslmode=disable"},
		{"db", "postgres://db/lapse?user=u&password=hunter2&sslmode=disable", "postgres://db/lapse?user=u&password=xxxxx&sslmode=disable"},
		{"db", "host=db password=hunter2 dbname=lapse", "host=db password=xxxxx dbname=lapse"},
		// Quoted, with blanks and escapes in it; blanks around the =; a
		// quote left open.
		{"db", "host=db password='hun ter2' dbname=lapse", "host=db password=xxxxx dbname=lapse"},
		{"db", `host=db password='it\'s a \\ secret' dbname=lapse`, "host=db password=xxxxx dbname=lapse"},
		{"db", "host=db password = hunter2 dbname=lapse", "host=db password = xxxxx dbname=lapse"},
		{"db", "host=db PASSWORD= 'a b c", "host=db PASSWORD= xxxxx"},
		{"db", "postgres://u:hun@ter2@db:5432/lapse", "postgres://u:xxxxx@db:5432/lapse"},
		{"db", "u:hunter2@tcp(db:3306)/lapse", "u:xxxxx@tcp(db:3306)/lapse"},
		{"payment-providers", "a=https://u:p1@a.example/x,b=https://b.example:8443/y@z", "a=https://u:xxxxx@a.example/x,b=https://b.example:8443/y@z"},
		{"db", "lapse.db", "lapse.db"},
		// A token in a URL's query is a secret too.
		{"webhook", "https://hooks.example/lapse?token=s3cret&v=2", "https://hooks.example/lapse?token=xxxxx&v=xxxxx"},
		{"payment-providers", "a=https://a.example/x?key=k1,b=http://b.example/y", "a=https://a.example/x?key=xxxxx,b=http://b.example/y"},
		// A user without a password is NATS's token, HTTP's Basic credential;
		// a database's user is a name.
		{"nats", "nats://s3cret-token@nats:4222", "nats://xxxxx@nats:4222"},
		{"nats", "nats://u:hunter2@nats:4222", "nats://u:xxxxx@nats:4222"},
		{"webhook", "https://tok3n@hooks.example/lapse", "https://xxxxx@hooks.example/lapse"},
		// A token in the path (Slack's and Discord's incoming webhooks).
		{"webhook", "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/abcdEFGHijklMNOPqrstUVWX", "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/xxxxx"},
		{"payment-providers", "a=https://a.example/hooks/0123456789abcdef0123/x?k=v,b=http://b.example/y", "a=https://a.example/hooks/xxxxx/x?k=xxxxx,b=http://b.example/y"},
		{"payment-providers", "a=https://k1@a.example/x,b=http://b.example/y@z", "a=https://xxxxx@a.example/x,b=http://b.example/y@z"},
		{"db", "postgres://lapse@db:5432/lapse", "postgres://lapse@db:5432/lapse"},
		{"redis", "redis://default@cache:6379/0", "redis://default@cache:6379/0"},
		// A password with a / not percent-encoded, as generated ones have.
		{"redis", "redis://u:s3c/r+et@cache:6379/0", "redis://u:xxxxx@cache:6379/0"},
		{"db", "postgres://u:/s3cret@db/lapse", "postgres://u:xxxxx@db/lapse"},
		{"webhook", "https://h.example:8443/y@z", "https://h.example:8443/y@z"},
		// A blank in a user or password, left as it is rather than
		// percent-encoded: the value is refused, and shown in the error.
		{"db", "postgres://u:hun ter2@db:5432/lapse", "postgres://u:xxxxx@db:5432/lapse"},
		{"db", "mysql://my user:hunter2@db:3306/lapse", "mysql://my user:xxxxx@db:3306/lapse"},
		{"redis", "redis://u:s3c\tret@cache:6379/0", "redis://u:xxxxx@cache:6379/0"},
		{"redis", "redis://u:s3c/r et@cache:6379/0", "redis://u:xxxxx@cache:6379/0"},
		{"nats", "nats://s3cret token@nats:4222", "nats://xxxxx@nats:4222"},
		{"nats", "nats://h1:4222, nats://tok3n@h2:4222", "nats://h1:4222, nats://xxxxx@h2:4222"},
		{"nats", "nats://h1:4222,nats://tok3n@h2:4222", "nats://h1:4222,nats://xxxxx@h2:4222"},
		// Files of public keys are no secret.
		{"alipay-public-key", "/etc/lapse/alipay.pub", "/etc/lapse/alipay.pub"},
	} {
		if got := settings[tc.name].shown(tc.value); got != tc.want {
			t.Errorf("--%s %q shown as %q, want %q", tc.name, tc.value, got, tc.want)
		}
	}
}

// TestArguments: an argument comes from the command line only: a variable
// of its name is not read, a config file that names it is refused, and a
// list argument adds up over its uses.
func TestArguments(t *testing.T) {
	settings := append(testSettings(t, nil), closeArgs...)
	t.Setenv("LAPSE_REASON", "from the environment")
	t.Setenv("LAPSE_ORDER", "ENV-1")
	fs, cfg, err := load(settings, "--order", "A-1", "--order", "A-2,A-3")
	if err != nil {
		t.Fatal(err)
	}
	if got := value(fs, "reason"); got != "" {
		t.Errorf("--reason = %q from LAPSE_REASON; an argument takes no variable", got)
	}
	if got := value(fs, "order"); got != "A-1,A-2,A-3" || cfg.Sources["order"] != sourceFlag {
		t.Errorf("--order = %q (%s), want A-1,A-2,A-3 from the flags", got, cfg.Sources["order"])
	}
	path := writeConfig(t, t.TempDir(), "lapse.yaml", "batch: 5\nreason: from a file\n")
	_, _, err = load(settings, "--config", path)
	if err == nil || !strings.Contains(err.Error(), "lapse.yaml:2: reason: --reason is given on the command line only") {
		t.Errorf("a file naming --reason: %v, want it refused naming the line", err)
	}
}

// TestSettingChecks: a word that no flag takes, an address that is no
// HOST:PORT, and a --db that names no store (a URL of another scheme, a
// DSN of another form, which would be taken for the name of an SQLite file
// to make) are refused wherever they come from, naming the setting; the
// errors show neither a password nor a secret.
func TestSettingChecks(t *testing.T) {
	for _, s := range append(slices.Clone(serveSettings), configSetting) {
		t.Setenv(envName(s.Name), "")
	}
	for _, tc := range []struct{ name, value, want string }{
		{"trigger-mode", "bogus", "want auto, redis or database"},
		{"log-level", "verbose", "want debug, info, warn or error"},
		{"log-format", "xml", "want text or json"},
		{"http", "", "want HOST:PORT"},
		{"metrics-http", "9090", "want HOST:PORT"},
		{"console-http", "localhost", "want HOST:PORT"},
		{"db", "", "empty"},
		{"db", "postgress://u:hunter2@db/lapse", `the scheme "postgress" names no store`},
		{"db", "mariadb://u:hunter2@db/lapse", `the scheme "mariadb" names no store`},
		{"db", "POSTGRES://u:hunter2@db/lapse", `the scheme "POSTGRES" names no store`},
		{"db", "host=db user=u password=hunter2 dbname=lapse", "keyword=value form is not taken"},
		{"db", "u:hunter2@tcp(db:3306)/lapse", "Go MySQL driver's DSN is not taken"},
		{"db", "sqlite://lapse.db", "names a host, not a file"},
		{"payment-provider-secrets", "a=b,hunter2hunter2hunter2", "not a NAME=VALUE list"},
		// An item that is no pair is shown without the password of its
		// URL. A name given twice would leave one of its values unused,
		// unsaid.
		{"payment-providers", "a=https://a.example/p,https://u:hunter2@b.example/p", `"https://u:xxxxx@b.example/p" is not NAME=VALUE`},
		{"payment-providers", "a=https://a.example/p,a=https://u:hunter2@b.example/p", "a: given twice"},
		{"payment-merchants", "wechatpay=1000,wechatpay=2000", "wechatpay: given twice"},
		{"payment-grace", "checkout=2m,checkout=0s", "checkout: given twice"},
		{"payment-provider-secrets", "a=hunter2hunter2hunter2,a=hunter3hunter3hunter3", "not a NAME=VALUE list"},
		// A URL that does not parse, for a password with a / left in it:
		// url.Parse's error, which would show it, is not passed on.
		{"redis", "redis://u:hun/ter2@cache:6379/0", "not a URL"},
		{"nats", "nats://a:4222,nats://u:hun/ter2@b:4222", "not a URL"},
		{"rabbitmq", "amqp://u:hun/ter2@mq:5672/", "not a URL"},
		{"webhook", "https://u:hun/ter2@hooks.example/x", "not a URL"},
		{"stock-port", "stock.example/x", "not a URL"},
	} {
		t.Run(tc.name, func(t *testing.T) { // not the value: it names the temporary directory
			check := func(source string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s %q: no error", source, tc.value)
				}
				name := tc.name
				if source == "variable" {
					name = envName(tc.name)
				}
				if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s %q: error %q does not name %s and say %q", source, tc.value, err, name, tc.want)
				}
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ter2") {
					t.Errorf("%s %q: error %q shows the password", source, tc.value, err)
				}
			}
			_, _, err := load(serveSettings, "--"+tc.name+"="+tc.value)
			check("flag", err)
			path := writeConfig(t, t.TempDir(), "lapse.yaml", tc.name+": '"+tc.value+"'\n")
			_, _, err = load(serveSettings, "--config", path)
			check("file", err)
			if tc.value != "" { // an empty variable is unset
				t.Setenv(envName(tc.name), tc.value)
				_, _, err = load(serveSettings)
				check("variable", err)
			}
		})
	}
	for _, tc := range []struct{ name, value string }{
		{"db", "lapse.db"}, {"db", "sqlite:lapse.db"}, {"db", "sqlite:///var/lib/lapse/lapse.db"},
		{"db", "postgres://u:p@db:5432/lapse?sslmode=disable"}, {"db", "postgresql://db/lapse"},
		{"db", "mysql://u:p@db:3306/lapse"}, {"db", "./data=1/lapse.db"},
		{"trigger-mode", "redis"}, {"trigger-mode", "db"}, {"log-level", "WARN"}, {"log-format", "json"},
		{"http", ":8080"}, {"http", "[::1]:0"}, {"metrics-http", ""},
		{"nats", "nats://a:4222, nats://b:4222"}, {"nats", "127.0.0.1:4222"}, {"redis", "redis://s1:26379/0?master_name=m&addr=s2:26379"}, {"webhook", ""},
	} {
		if _, _, err := load(serveSettings, "--"+tc.name+"="+tc.value); err != nil {
			t.Errorf("--%s %q refused: %v", tc.name, tc.value, err)
		}
	}
}

// TestIntSettingsDecimal: a whole number is read in decimal wherever it
// comes from. The flag package reads 0x10, 0b11 and 1_000, which escaped
// the range check (it reads decimal only) when they came from a variable or
// a file, so --workers 0 or --batch -1 ran; and it reads 050000 as octal,
// 20480: the four-eyes threshold a tenth of what was written.
func TestIntSettingsDecimal(t *testing.T) {
	for _, s := range append(slices.Clone(serveSettings), configSetting) {
		t.Setenv(envName(s.Name), "")
	}
	sources := func(t *testing.T, name, text string) map[string]func() (*flag.FlagSet, error) {
		return map[string]func() (*flag.FlagSet, error){
			"flag": func() (*flag.FlagSet, error) {
				fs, _, err := load(serveSettings, "--"+name, text)
				return fs, err
			},
			"flag=": func() (*flag.FlagSet, error) {
				fs, _, err := load(serveSettings, "--"+name+"="+text)
				return fs, err
			},
			"file": func() (*flag.FlagSet, error) {
				path := writeConfig(t, t.TempDir(), "lapse.yaml", name+": '"+text+"'\n")
				fs, _, err := load(serveSettings, "--config", path)
				return fs, err
			},
			"variable": func() (*flag.FlagSet, error) {
				t.Setenv(envName(name), text)
				defer os.Unsetenv(envName(name))
				fs, _, err := load(serveSettings)
				return fs, err
			},
		}
	}
	for _, tc := range []struct{ name, text string }{
		{"workers", "0x0"}, {"batch", "-0x1"}, {"sweep-batch", "0x7fffffff"}, {"approval-amount", "-0b1"},
		{"approval-count", "1_000"}, {"batch", "0o10"},
	} {
		for source, load := range sources(t, tc.name, tc.text) {
			_, err := load()
			named := tc.name
			if source == "variable" {
				named = envName(tc.name)
			}
			if err == nil || !strings.Contains(err.Error(), named) || !strings.Contains(err.Error(), "decimal") {
				t.Errorf("%s %s %q: error %v, want it refused as no decimal number", source, tc.name, tc.text, err)
			}
		}
	}
	for _, tc := range []struct{ name, text, want string }{
		{"approval-amount", "050000", "50000"}, {"batch", "0100", "100"}, {"workers", "+8", "8"},
	} {
		for source, load := range sources(t, tc.name, tc.text) {
			fs, err := load()
			if err != nil {
				t.Errorf("%s %s %q: %v", source, tc.name, tc.text, err)
				continue
			}
			if got := value(fs, tc.name); got != tc.want {
				t.Errorf("%s %s %q: %s, want %s", source, tc.name, tc.text, got, tc.want)
			}
		}
	}
}

// TestConfigWatcherSnapshotKeepsTheReload: a reload that lands before the
// service says it serves writes the newer file's snapshot; the start's
// snapshot, written after, must not put the older file back.
func TestConfigWatcherSnapshotKeepsTheReload(t *testing.T) {
	a := &applied{}
	settings := testSettings(t, a)
	path := writeConfig(t, t.TempDir(), "lapse.yaml", "sweep-interval: 5s\n")
	_, cfg, err := load(settings, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	w := newConfigWatcher(cfg, nil, slog.New(slog.DiscardHandler), nil)
	writeConfig(t, filepath.Dir(path), "lapse.yaml", "sweep-interval: 7s\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	w.Serving()
	if b, err := os.ReadFile(path + snapshotSuffix); err != nil || string(b) != "sweep-interval: 7s\n" {
		t.Errorf("snapshot %q, %v; want the reloaded file", b, err)
	}

	// Without a reload, Serving writes the start's file, once.
	path = writeConfig(t, t.TempDir(), "lapse.yaml", "sweep-interval: 5s\n")
	if _, cfg, err = load(settings, "--config", path); err != nil {
		t.Fatal(err)
	}
	w = newConfigWatcher(cfg, nil, slog.New(slog.DiscardHandler), nil)
	if _, err := os.Stat(path + snapshotSuffix); !os.IsNotExist(err) {
		t.Fatalf("a snapshot before serving: %v", err)
	}
	w.Serving()
	if b, err := os.ReadFile(path + snapshotSuffix); err != nil || string(b) != "sweep-interval: 5s\n" {
		t.Errorf("snapshot %q, %v; want the start's file", b, err)
	}
}
