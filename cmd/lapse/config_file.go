package main

// A config file (--config FILE, or LAPSE_CONFIG) gives values to the flags of
// a command: its top-level keys are flag names. A flag takes its value from
// the first of the command line, the environment (LAPSE_<FLAG>), the file,
// and its default in code. One file serves every command: each checks every
// key against the settings of all the commands (allSettings) and takes the
// keys of its own flags, so that lapse migrate and lapse flows run on the
// file of lapse serve. lapse serve copies a file that validates to
// FILE.lastgood; a command that starts on an unusable file runs on that copy
// instead, and says so loudly. While serve runs, a configWatcher reloads the
// file.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

const (
	snapshotSuffix = ".lastgood"
	maxConfigSize  = 1 << 20 // bytes

	// The sources of a flag's value besides "file FILE:LINE" and "env LAPSE_X".
	sourceDefault = "default"
	sourceFlag    = "flag"
)

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
	// Exposed, when not empty, says that the file it ran on gives secrets
	// to every user of the machine (see configFile.exposure).
	Exposed string
	// Misspelt says which LAPSE_ variables are set that no command
	// reads, each a typo away from one that a command does: the variable
	// meant is then not set, and nothing else would say so.
	Misspelt []string

	fs       *flag.FlagSet       // the command's flags, holding their values
	settings map[string]*setting // the settings of those flags, by name
	known    map[string]*setting // the keys a file may have: settings, and those of the other commands
	good     *configFile         // Path as read, when it was good: what WriteSnapshot writes
	stamp    fileStamp           // of Path when it was read: the watcher starts from it
}

// WriteSnapshot copies the config file, which was read and found good, to
// FILE.lastgood for a later start to fall back on, unless it holds that
// already; SnapshotErr says why it could not. Only lapse serve, which keeps
// running on the file, calls it, through configWatcher.Serving once it
// serves: the other commands read the file and write nothing beside it.
func (c *flagConfig) WriteSnapshot() {
	if c.good != nil {
		c.SnapshotErr = writeSnapshot(c.Path+snapshotSuffix, c.good)
	}
}

// knownSettings returns, by name, the settings whose keys a config file may
// have: those of every command, with the command's own taking the place of
// another's of the same name.
func knownSettings(own map[string]*setting) map[string]*setting {
	out := settingsByName(allSettings())
	maps.Copy(out, own)
	return out
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
	if c.Exposed != "" {
		out = append(out, c.Exposed)
	}
	return append(out, c.Misspelt...)
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
	if c.Exposed != "" {
		log.Warn(c.Exposed)
	}
	for _, m := range c.Misspelt {
		log.Warn(m)
	}
}

// loadFlags defines the flags of settings, and --config, on fs, holding
// their values in o; parses args into them like parseFlags (see parseArgs);
// and returns where every flag got its value. Every value, from wherever it
// comes, passes the checks of its setting's kind; a config file's keys of
// the other commands' flags are checked too, and otherwise left alone. A
// config file that is unreadable or invalid stops the command unless its
// snapshot is good: then the snapshot's values are used and the result's
// FileErr says why; the caller must pass the warning on (see Log).
func loadFlags(fs *flag.FlagSet, settings []*setting, o *options, args []string) (*flagConfig, error) {
	settings = append(slices.Clip(settings), configSetting)
	defineFlags(fs, settings, o)
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	cfg := &flagConfig{Sources: map[string]string{}, fs: fs, settings: settingsByName(settings)}
	cfg.known = knownSettings(cfg.settings)
	cfg.Misspelt = misspeltVariables(os.Environ(), cfg.known)
	var errs []error
	fs.VisitAll(func(f *flag.Flag) { cfg.Sources[f.Name] = sourceDefault })
	fs.Visit(func(f *flag.Flag) {
		cfg.Sources[f.Name] = sourceFlag
		if s := cfg.settings[f.Name]; s != nil {
			if err := s.check(f.Value.String()); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for flag -%s: %v", s.shown(f.Value.String()), f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	// Variables are checked even where a flag overrides them, as before
	// config files; they are set after the file, which they override.
	type envValue struct {
		s     *setting
		value string
	}
	var envs []envValue
	check := scratchFlags(fs.Name(), cfg.settings)
	fs.VisitAll(func(f *flag.Flag) {
		s, env := cfg.settings[f.Name], envName(f.Name)
		v := os.Getenv(env)
		if v == "" || s.Argument {
			return
		}
		if err := s.set(check, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", env, s.shown(v), err))
			return
		}
		if cfg.Sources[f.Name] != sourceFlag {
			envs = append(envs, envValue{s, v})
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Sources[configSetting.Name] == sourceDefault {
		cfg.Path = os.Getenv(envName(configSetting.Name))
	} else {
		cfg.Path = o.config
	}
	if cfg.Path != "" {
		file, err := cfg.read()
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		for _, e := range file.entries {
			if cfg.settings[e.key] == nil || cfg.Sources[e.key] == sourceFlag {
				continue // another command's, checked by read
			}
			if err := file.set(fs, cfg.settings, e); err != nil {
				return nil, fmt.Errorf("--config: %w", err)
			}
			cfg.Sources[e.key] = "file " + file.where(e)
		}
	}
	for _, e := range envs {
		env := envName(e.s.Name)
		if err := e.s.set(fs, e.value); err != nil {
			return nil, fmt.Errorf("%s=%q: %v", env, e.s.shown(e.value), err)
		}
		cfg.Sources[e.s.Name] = "env " + env
	}
	return cfg, nil
}

// misspeltVariables returns a warning for each LAPSE_ variable of environ
// (KEY=VALUE) that is no setting's, but one typo (a letter added, left
// out, changed, or two swapped) from the variable of a setting of known:
// LAPSE_SWEEP_INTERAVL for LAPSE_SWEEP_INTERVAL. A
// config file refuses an unknown key; an unknown variable cannot be
// refused, for other programs (test harnesses, scripts) have LAPSE_
// variables of their own, but one this close was meant for lapse. The
// warning names the variables, never their values.
func misspeltVariables(environ []string, known map[string]*setting) []string {
	vars := make(map[string]string, len(known))
	for name := range known {
		vars[envName(name)] = name
	}
	var out []string
	for _, kv := range environ {
		key, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, "LAPSE_") || value == "" || vars[key] != "" {
			continue
		}
		var near []string
		for env := range vars {
			if editDistance(strings.TrimPrefix(key, "LAPSE_"), strings.TrimPrefix(env, "LAPSE_")) == 1 {
				near = append(near, env)
			}
		}
		if len(near) > 0 {
			slices.Sort(near)
			out = append(out, fmt.Sprintf("%s is set, and no command of lapse reads it: did you mean %s?", key, strings.Join(near, " or ")))
		}
	}
	slices.Sort(out)
	return out
}

// editDistance returns how many typos, in bytes, turn a into b: a byte
// added, left out or changed, or two next to each other swapped (the
// optimal string alignment distance).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// scratchFlags returns a flag set named name with the flags of settings,
// holding their values in an options of its own: setting them checks
// values without touching a command's.
func scratchFlags(name string, settings map[string]*setting) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &options{}
	for s := range maps.Values(settings) {
		s.define(fs, o)
	}
	return fs
}

// read reads the config file and checks it against the settings of every
// command. When the file is no good and its snapshot is, it returns the
// snapshot and records why.
func (c *flagConfig) read() (*configFile, error) {
	c.stamp = stampOf(c.Path)
	file, err := readConfig(c.Path)
	if err == nil {
		err = file.check(scratchFlags(c.fs.Name(), c.known), c.known)
	}
	if err == nil {
		c.good, c.Exposed = file, file.exposure(c.known)
		return file, nil
	}
	snap := c.Path + snapshotSuffix
	info, serr := os.Stat(snap)
	if serr != nil {
		return nil, err
	}
	good, serr := readConfig(snap)
	if serr == nil {
		serr = good.check(scratchFlags(c.fs.Name(), c.known), c.known)
	}
	if serr != nil {
		return nil, fmt.Errorf("%w\n(the last good snapshot is no good either: %v)", err, serr)
	}
	c.FileErr, c.Snapshot, c.SnapshotAt = err, snap, info.ModTime()
	c.Exposed = good.exposure(c.known)
	return good, nil
}

// configEntry is one key of a config file, its value as a flag takes it
// (a YAML list joined with commas), whether it was a list, and the key's
// line.
type configEntry struct {
	key, value string
	list       bool
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
	f, err := openSetFile(path)
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
	// A config file is a few hundred bytes; /dev/zero, or a log named by
	// mistake, would be read until memory ran out.
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxConfigSize {
		return nil, fmt.Errorf("%s is larger than %d KiB: no config file is", path, maxConfigSize>>10)
	}
	c, err := parseConfig(path, raw)
	if err != nil {
		return nil, err
	}
	c.mode = info.Mode().Perm()
	return c, nil
}

// openSetFile opens the file at path, which a setting names, for reading;
// not a named pipe or a socket, whose opening waits for a writer, and
// nothing ends the wait: lapse takes Ctrl-C and SIGTERM for itself. A
// device (/dev/null) is opened.
func openSetFile(path string) (*os.File, error) {
	if info, err := os.Stat(path); err == nil && info.Mode()&(os.ModeNamedPipe|os.ModeSocket) != 0 {
		return nil, fmt.Errorf("%s is not a regular file: a named pipe or a socket", path)
	}
	return os.Open(path)
}

// readSetFile reads the file at path, which a setting names (a provider's
// public key), as openSetFile opens it, up to maxConfigSize bytes.
func readSetFile(path string) ([]byte, error) {
	f, err := openSetFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%s is larger than %d KiB", path, maxConfigSize>>10)
	}
	return data, nil
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
		value, list, err := flagText(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %v", path, k.Line, k.Value, err))
			continue
		}
		c.entries = append(c.entries, configEntry{key: k.Value, value: value, list: list, line: k.Line})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// flagText returns a YAML value as a flag takes it: a scalar as written
// (null is empty), a list of scalars joined with commas; and whether it was
// a list.
func flagText(n *yaml.Node) (string, bool, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "", false, nil
		}
		return n.Value, false, nil
	case yaml.SequenceNode:
		parts := make([]string, len(n.Content))
		for i, item := range n.Content {
			if item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode {
				return "", true, fmt.Errorf("a list may hold plain values only")
			}
			parts[i] = item.Value
		}
		return strings.Join(parts, ","), true, nil
	default:
		return "", false, fmt.Errorf("want a value or a list of values")
	}
}

// check sets every entry on fs, a scratch flag set of settings (the known
// settings of a flagConfig), and returns every unknown key and refused
// value.
func (c *configFile) check(fs *flag.FlagSet, settings map[string]*setting) error {
	var errs []error
	for _, e := range c.entries {
		if err := c.set(fs, settings, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// set sets the flag of entry e on fs, whose flags are those of settings.
// Its errors name the file, the line and the key.
func (c *configFile) set(fs *flag.FlagSet, settings map[string]*setting, e configEntry) error {
	if e.key == configSetting.Name {
		return fmt.Errorf("%s: %s: a config file cannot name a config file", c.where(e), e.key)
	}
	s := settings[e.key]
	if s != nil && s.Argument {
		return fmt.Errorf("%s: %s: --%s is given on the command line only", c.where(e), e.key, e.key)
	}
	if s == nil {
		hint := ""
		guess := strings.ToLower(strings.ReplaceAll(strings.TrimLeft(e.key, "-"), "_", "-"))
		if settings[guess] != nil && guess != configSetting.Name {
			hint = fmt.Sprintf(" (did you mean %s?)", guess)
		}
		return fmt.Errorf("%s: unknown key %q: no command of lapse has a flag --%s%s", c.where(e), e.key, e.key, hint)
	}
	if e.list && !s.Kind.list() {
		// Joined with commas, [K1, K2] would be one admin key "K1,K2"
		// and two webhooks one URL: neither what was meant.
		return fmt.Errorf("%s: %s: a list, but --%s takes one %s", c.where(e), e.key, e.key, s.Kind)
	}
	if err := s.set(fs, e.value); err != nil {
		return fmt.Errorf("%s: %s: invalid %s %q: %v", c.where(e), e.key, s.Kind, s.shown(e.value), err)
	}
	return nil
}

// exposure returns a warning when the file, readable by every user of the
// machine, holds a secret: the value of a secret setting, or a password or
// token in a URL (a value that lapse shows otherwise than it is). Empty
// when it holds none or is not readable by all.
func (c *configFile) exposure(known map[string]*setting) string {
	if c.mode&0o004 == 0 {
		return ""
	}
	var keys []string
	for _, e := range c.entries {
		if s := known[e.key]; s != nil && s.shown(e.value) != e.value {
			keys = append(keys, e.key)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return fmt.Sprintf("config %s holds secrets (%s) and is readable by every user of this machine (mode %04o): chmod o-r it, or give them in the environment",
		c.path, strings.Join(keys, ", "), c.mode)
}

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
