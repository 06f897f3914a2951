package main

// A config file (--config FILE, or LAPSE_CONFIG) gives values to the flags of
// a command: its top-level keys are flag names. A flag takes its value from
// the first of the command line, the environment (LAPSE_<FLAG>), the file,
// and its default in code. A file that validates is copied to FILE.lastgood;
// a command that starts on an unusable file runs on that copy instead, and
// says so loudly. While serve runs, a configWatcher reloads the file.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

const (
	configFlag     = "config"
	configUsage    = "YAML file of flag values, keyed by flag name (sweep-interval: 5s); LAPSE_* variables and flags override it"
	snapshotSuffix = ".lastgood"

	// The sources of a flag's value besides "file FILE:LINE" and "env LAPSE_X".
	sourceDefault = "default"
	sourceFlag    = "flag"
)

// envName is the environment variable of flag name: LAPSE_SWEEP_INTERVAL
// for sweep-interval.
func envName(name string) string {
	return "LAPSE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagConfig tells where the flags of a command got their values.
type flagConfig struct {
	// Path is the config file named by --config or LAPSE_CONFIG; empty when
	// there is none.
	Path string
	// Sources holds the source of every flag's value: "default",
	// "file FILE:LINE", "env LAPSE_X" or "flag".
	Sources map[string]string
	// FileErr is why Path was unusable when the command runs on Snapshot,
	// the copy of its last good version written at SnapshotAt; nil otherwise.
	FileErr    error
	Snapshot   string
	SnapshotAt time.Time
	// SnapshotErr is why the snapshot of a good file was not written: the
	// command runs, but the next start has no fallback.
	SnapshotErr error

	stamp fileStamp // of Path when it was read: the watcher starts from it
}

// snapshotWarning is what to say when the command runs on the snapshot.
func (c *flagConfig) snapshotWarning() string {
	return fmt.Sprintf("config %s is unreadable or invalid: %s; running on the last good snapshot %s written at %s",
		c.Path, strings.ReplaceAll(c.FileErr.Error(), "\n", "; "), c.Snapshot, c.SnapshotAt.Format(time.RFC3339))
}

// warnings returns what the operator must hear: that the command runs on
// the snapshot, or that the snapshot could not be written.
func (c *flagConfig) warnings() []string {
	var out []string
	if c.FileErr != nil {
		out = append(out, c.snapshotWarning())
	}
	if c.SnapshotErr != nil {
		out = append(out, c.SnapshotErr.Error())
	}
	return out
}

// Log logs the warnings: running on the snapshot at Error level, a snapshot
// not written at Warn.
func (c *flagConfig) Log(log *slog.Logger) {
	if c.FileErr != nil {
		log.Error(c.snapshotWarning())
	}
	if c.SnapshotErr != nil {
		log.Warn(c.SnapshotErr.Error())
	}
}

// loadFlags parses args into fs like parseFlags, and returns where every
// flag got its value. It registers the flag --config on fs. A config file
// that is unreadable or invalid stops the command unless its snapshot is
// good: then the snapshot's values are used and the result's FileErr says
// why; the caller must pass the warning on (see Log).
func loadFlags(fs *flag.FlagSet, args []string) (*flagConfig, error) {
	if fs.Lookup(configFlag) == nil {
		fs.String(configFlag, "", configUsage)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg := &flagConfig{Sources: map[string]string{}}
	fs.VisitAll(func(f *flag.Flag) { cfg.Sources[f.Name] = sourceDefault })
	fs.Visit(func(f *flag.Flag) { cfg.Sources[f.Name] = sourceFlag })

	// Variables are checked even where a flag overrides them, as before
	// config files; they are set after the file, which they override.
	type envValue struct{ name, value string }
	var envs []envValue
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		v := os.Getenv(env)
		if v == "" {
			return
		}
		if err := cloneValue(f.Value).Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", env, v, err))
			return
		}
		if cfg.Sources[f.Name] != sourceFlag {
			envs = append(envs, envValue{f.Name, v})
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Sources[configFlag] == sourceDefault {
		cfg.Path = os.Getenv(envName(configFlag))
	} else {
		cfg.Path = fs.Lookup(configFlag).Value.String()
	}
	if cfg.Path != "" {
		file, err := cfg.read(fs)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		for _, e := range file.entries {
			if cfg.Sources[e.key] == sourceFlag {
				continue
			}
			if err := file.set(fs, e); err != nil {
				return nil, fmt.Errorf("--config: %w", err)
			}
			cfg.Sources[e.key] = "file " + file.where(e)
		}
	}
	for _, e := range envs {
		if err := fs.Set(e.name, e.value); err != nil {
			return nil, fmt.Errorf("%s=%q: %v", envName(e.name), e.value, err)
		}
		cfg.Sources[e.name] = "env " + envName(e.name)
	}
	return cfg, nil
}

// read reads and checks the config file against the flags of fs, which it
// leaves alone, and writes its snapshot. When the file is no good and its
// snapshot is, it returns the snapshot and records why.
func (c *flagConfig) read(fs *flag.FlagSet) (*configFile, error) {
	c.stamp = stampOf(c.Path)
	file, err := readConfig(c.Path)
	if err == nil {
		err = file.check(cloneFlags(fs))
	}
	if err == nil {
		c.SnapshotErr = writeSnapshot(c.Path+snapshotSuffix, file)
		return file, nil
	}
	snap := c.Path + snapshotSuffix
	info, serr := os.Stat(snap)
	if serr != nil {
		return nil, err
	}
	good, serr := readConfig(snap)
	if serr == nil {
		serr = good.check(cloneFlags(fs))
	}
	if serr != nil {
		return nil, fmt.Errorf("%w\n(the last good snapshot is no good either: %v)", err, serr)
	}
	c.FileErr, c.Snapshot, c.SnapshotAt = err, snap, info.ModTime()
	return good, nil
}

// configEntry is one key of a config file, its value as a flag takes it
// (a YAML list joined with commas), and the key's line.
type configEntry struct {
	key, value string
	line       int
}

// configFile is a config file as read: its entries in file order.
type configFile struct {
	path    string
	raw     []byte
	mode    os.FileMode
	entries []configEntry
}

func (c *configFile) where(e configEntry) string { return fmt.Sprintf("%s:%d", c.path, e.line) }

// readConfig reads the config file at path and checks its shape: a mapping
// of keys to scalars or lists of scalars, each key once. Errors name the
// file and the line.
func readConfig(path string) (*configFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	c, err := parseConfig(path, raw)
	if err != nil {
		return nil, err
	}
	c.mode = info.Mode().Perm()
	return c, nil
}

func parseConfig(path string, raw []byte) (*configFile, error) {
	c := &configFile{path: path, raw: raw, mode: 0o600}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return c, nil
	} else if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document; a config file holds one", path, next.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind == yaml.DocumentNode || root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return c, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want flag names and their values (sweep-interval: 5s)", path, root.Line)
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("%s:%d: a key must be a flag name", path, k.Line))
			continue
		}
		if line, ok := seen[k.Value]; ok {
			errs = append(errs, fmt.Errorf("%s:%d: %s: given twice (first on line %d)", path, k.Line, k.Value, line))
			continue
		}
		seen[k.Value] = k.Line
		value, err := flagText(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %v", path, k.Line, k.Value, err))
			continue
		}
		c.entries = append(c.entries, configEntry{key: k.Value, value: value, line: k.Line})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// flagText returns a YAML value as a flag takes it: a scalar as written
// (null is empty), a list of scalars joined with commas.
func flagText(n *yaml.Node) (string, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, len(n.Content))
		for i, item := range n.Content {
			if item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("a list may hold plain values only")
			}
			parts[i] = item.Value
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("want a value or a list of values")
	}
}

// check sets every entry on fs, a clone of the command's flags, and returns
// every unknown key and refused value.
func (c *configFile) check(fs *flag.FlagSet) error {
	var errs []error
	for _, e := range c.entries {
		if err := c.set(fs, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// set sets the flag of entry e on fs. Its errors name the file, the line and
// the key.
func (c *configFile) set(fs *flag.FlagSet, e configEntry) error {
	f := fs.Lookup(e.key)
	if e.key == configFlag {
		return fmt.Errorf("%s: config: a config file cannot name a config file", c.where(e))
	}
	if f == nil {
		hint := ""
		guess := strings.ToLower(strings.ReplaceAll(strings.TrimLeft(e.key, "-"), "_", "-"))
		if fs.Lookup(guess) != nil && guess != configFlag {
			hint = fmt.Sprintf(" (did you mean %s?)", guess)
		}
		return fmt.Errorf("%s: unknown key %q: %s has no flag --%s%s", c.where(e), e.key, fs.Name(), e.key, hint)
	}
	if err := fs.Set(e.key, e.value); err != nil {
		kind, _ := flag.UnquoteUsage(f)
		if kind == "" {
			kind = "boolean"
		}
		return fmt.Errorf("%s: %s: invalid %s %q: %v", c.where(e), e.key, kind, e.value, err)
	}
	return nil
}

// cloneFlags returns a flag set with the flags of fs, each with a value of
// its own: setting it validates a value without touching fs.
func cloneFlags(fs *flag.FlagSet) *flag.FlagSet {
	c := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	c.SetOutput(io.Discard)
	fs.VisitAll(func(f *flag.Flag) { c.Var(cloneValue(f.Value), f.Name, f.Usage) })
	return c
}

// cloneValue returns a fresh zero value of the type of v, for the flag
// package's own values (bool, int, string, duration, …). Other values
// (flag.Func, flag.TextVar, custom types) cannot be copied without their side
// effects: their clone takes any text, so the file checks them only when the
// real flag is set.
func cloneValue(v flag.Value) flag.Value {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		switch rv.Elem().Kind() {
		case reflect.Bool, reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.String, reflect.Float64:
			if c, ok := reflect.New(rv.Elem().Type()).Interface().(flag.Value); ok {
				return c
			}
		}
	}
	return new(anyText)
}

// anyText is a flag value that takes any text.
type anyText string

func (t *anyText) String() string     { return string(*t) }
func (t *anyText) Set(s string) error { *t = anyText(s); return nil }

// writeSnapshot writes the contents of good config file c to path, through a
// temporary file renamed over it, unless path holds them already.
func writeSnapshot(path string, c *configFile) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, c.raw) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("config snapshot not written: %w", err)
	}
	_, err = tmp.Write(c.raw)
	if err == nil {
		err = tmp.Chmod(c.mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("config snapshot %s not written: %w", path, err)
	}
	return nil
}

// fileStamp is what tells that a file changed: its modification time and
// size, or that it was missing.
type fileStamp struct {
	mod    time.Time
	size   int64
	exists bool
}

func stampOf(path string) fileStamp {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: info.ModTime(), size: info.Size(), exists: true}
}

func (s fileStamp) same(o fileStamp) bool {
	return s.exists == o.exists && s.size == o.size && s.mod.Equal(o.mod)
}

var (
	urlPassword = regexp.MustCompile(`(://[^:/?#@\s]*):[^@/\s]*@`)
	dsnPassword = regexp.MustCompile(`(?i)(password=)[^&\s]*`)
)

// redactFlag returns value for showing: the whole value of a flag whose name
// says secret, key or password, and the passwords of URLs and DSNs in others,
// are replaced by xxxxx.
func redactFlag(name, value string) string {
	if value == "" {
		return value
	}
	lower := strings.ToLower(name)
	for _, word := range []string{"secret", "key", "password"} {
		if strings.Contains(lower, word) {
			return "xxxxx"
		}
	}
	value = urlPassword.ReplaceAllString(value, "${1}:xxxxx@")
	return dsnPassword.ReplaceAllString(value, "${1}xxxxx")
}

// configWatcher reloads a command's config file while the command runs: on
// SIGHUP, and when the file's modification time or size changes (and then
// holds still for one poll, so that a file being written is not read half
// done). A reload checks the whole file against the command's flags first;
// an invalid file changes nothing and is counted. Of a valid file, every
// changed flag that is reloadable is handed to its apply func, unless the
// environment or the command line set that flag (they outrank the file);
// every other changed flag is logged as needing a restart; the snapshot is
// written.
type configWatcher struct {
	// Interval is how often the file is looked at. Default 2s.
	Interval time.Duration

	path       string
	defs       *flag.FlagSet // definitions and defaults; never set here
	reloadable map[string]func(value string) error
	pinned     map[string]string // flags set by env or command line → source
	log        *slog.Logger
	now        func() time.Time

	mu      sync.Mutex // one reload at a time; guards the fields below
	running map[string]string
	stamp   fileStamp
	errs    int
	lastErr error
	lastOK  time.Time

	errCount prometheus.Counter
	okTime   prometheus.Gauge
}

// newConfigWatcher returns a watcher of the config file of cfg, which
// loadFlags returned for fs. reloadable maps flag names to the funcs that
// put a new value into force (value as the flag prints it: "5s" for a
// duration); they run on the watcher's goroutine, one at a time, and an
// error leaves the flag's running value in place. The metrics
// lapse_config_reload_errors_total and
// lapse_config_last_reload_success_timestamp_seconds go to reg unless it is
// nil. When cfg has no file, there is nothing to reload. A reloadable name
// that is not a flag of fs is a programming error: it panics.
func newConfigWatcher(cfg *flagConfig, fs *flag.FlagSet, reloadable map[string]func(value string) error, log *slog.Logger, reg prometheus.Registerer) *configWatcher {
	w := &configWatcher{
		Interval:   2 * time.Second,
		path:       cfg.Path,
		defs:       fs,
		reloadable: reloadable,
		pinned:     map[string]string{},
		log:        log,
		now:        time.Now,
		running:    map[string]string{},
		stamp:      cfg.stamp,
		errCount: prometheus.NewCounter(prometheus.CounterOpts{Name: "lapse_config_reload_errors_total",
			Help: "Config reloads that failed (the file unreadable or invalid, or a value refused), and starts on the last good snapshot."}),
		okTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lapse_config_last_reload_success_timestamp_seconds",
			Help: "When the config file last loaded and applied cleanly, at start or on a reload."}),
	}
	for name := range reloadable {
		if fs.Lookup(name) == nil {
			panic(fmt.Sprintf("config: reloadable flag --%s is not a flag of %s", name, fs.Name()))
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		w.running[f.Name] = f.Value.String()
		if src := cfg.Sources[f.Name]; src == sourceFlag || strings.HasPrefix(src, "env ") {
			w.pinned[f.Name] = src
		}
	})
	if reg != nil {
		reg.MustRegister(w.errCount, w.okTime)
	}
	if cfg.FileErr != nil {
		w.fail(cfg.FileErr)
	} else if cfg.Path != "" {
		w.succeed()
	}
	return w
}

// Run watches the file until ctx is done. Without a file, it logs and
// otherwise ignores SIGHUP, which would end the process.
func (w *configWatcher) Run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if w.path == "" {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.log.Warn("config: SIGHUP, but there is no config file (--config, LAPSE_CONFIG) to reload")
			}
		}
	}
	every := w.Interval
	if every <= 0 {
		every = 2 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var pending *fileStamp // a change seen, waiting to hold still
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			w.log.Info("config: SIGHUP, reloading", "file", w.path)
			pending = nil
			_ = w.Reload()
		case <-tick.C:
			s := stampOf(w.path)
			w.mu.Lock()
			changed := !s.same(w.stamp)
			w.mu.Unlock()
			switch {
			case !changed:
				pending = nil
			case pending == nil || !pending.same(s):
				pending = &s
			default:
				pending = nil
				_ = w.Reload()
			}
		}
	}
}

// Reload reads the file once and applies what changed, as Run does. It
// returns the file's errors, when nothing was applied, or the errors of the
// apply funcs that refused their value.
func (w *configWatcher) Reload() error {
	if w.path == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stamp = stampOf(w.path)
	next := cloneFlags(w.defs)
	file, err := readConfig(w.path)
	if err == nil {
		err = file.check(next)
	}
	if err != nil {
		w.fail(err)
		w.log.Error("config reload failed; the running configuration stays", "file", w.path, "err", err)
		return err
	}
	lines := map[string]int{}
	for _, e := range file.entries {
		lines[e.key] = e.line
	}
	var errs []error
	w.defs.VisitAll(func(f *flag.Flag) {
		value, source := f.DefValue, sourceDefault
		line, inFile := lines[f.Name]
		if inFile {
			value, source = next.Lookup(f.Name).Value.String(), "file "+file.where(configEntry{line: line})
		}
		old := w.running[f.Name]
		if value == old || f.Name == configFlag {
			return
		}
		shown, was := redactFlag(f.Name, value), redactFlag(f.Name, old)
		if by, ok := w.pinned[f.Name]; ok {
			if inFile {
				w.log.Info("config: the file's value is not used: the flag is set by "+by, "flag", f.Name, "value", shown, "source", source)
			}
			return
		}
		apply, ok := w.reloadable[f.Name]
		if !ok {
			w.log.Warn("config: changed value needs a restart", "flag", f.Name, "value", shown, "running", was, "source", source)
			return
		}
		if err := apply(value); err != nil {
			err = fmt.Errorf("--%s %s: %w", f.Name, shown, err)
			errs = append(errs, err)
			w.log.Error("config: reloaded value refused; the running value stays", "flag", f.Name, "value", shown, "running", was, "err", err)
			return
		}
		w.running[f.Name] = value
		w.log.Info("config: reloaded", "flag", f.Name, "value", shown, "was", was, "source", source)
	})
	if err := writeSnapshot(w.path+snapshotSuffix, file); err != nil {
		w.log.Warn(err.Error())
	}
	if err := errors.Join(errs...); err != nil {
		w.fail(err)
		return err
	}
	w.succeed()
	return nil
}

func (w *configWatcher) fail(err error) {
	w.errs++
	w.lastErr = err
	w.errCount.Inc()
}

func (w *configWatcher) succeed() {
	w.lastErr = nil
	w.lastOK = w.now()
	w.okTime.Set(float64(w.lastOK.UnixNano()) / 1e9)
}

// Errors returns how many reloads failed, counting a start on the snapshot.
func (w *configWatcher) Errors() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

// LastError returns the error of the last reload (or of the start, when it
// ran on the snapshot), nil once a reload succeeded.
func (w *configWatcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// LastSuccess returns when the file last loaded and applied cleanly; zero
// when it never did.
func (w *configWatcher) LastSuccess() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastOK
}
