package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// configWatcher reloads a command's config file while the command runs: on
// SIGHUP, and when the file's modification time or size changes (and then
// holds still for one poll, so that a file being written is not read half
// done). A reload checks the whole file against the settings of every
// command first, as loadFlags does; an invalid file changes nothing and is counted. Of a valid file,
// the new value of every changed setting that has a Reload is handed to it,
// unless the environment or the command line set that setting (they
// outrank the file); every other changed setting is logged as needing a
// restart; the snapshot is written once every value was taken.
type configWatcher struct {
	// Interval is how often the file is looked at. Default 2s.
	Interval time.Duration

	path     string
	defs     *flag.FlagSet       // definitions and defaults; never set here
	settings map[string]*setting // of the flags of defs
	known    map[string]*setting // the keys a file may have (flagConfig.known)
	proc     *process            // what the settings' Reload change
	pinned   map[string]string   // flags set by env or command line → source
	log      *slog.Logger
	now      func() time.Time

	mu      sync.Mutex  // one reload at a time; guards the fields below
	start   *flagConfig // the start's file until Serving wrote its snapshot or a reload wrote a newer one
	running map[string]string
	stamp   fileStamp
	errs    int
	lastErr error
	lastOK  time.Time

	errCount prometheus.Counter
	okTime   prometheus.Gauge

	// flowsDir is the --flows directory of the process, flowsAt the
	// digest of its files as they were loaded (flowsDigest), flowsSaid
	// the digest last said to differ: the flows are read only at start,
	// and a SIGHUP after they changed says so (checkFlows).
	flowsDir, flowsAt, flowsSaid string
}

// WatchFlows has a SIGHUP check whether the flow files in dir still sum
// to digest, what the process loaded at start, and say when not: a SIGHUP
// reloads the config file's switches, never the flows.
func (w *configWatcher) WatchFlows(dir, digest string) {
	w.flowsDir, w.flowsAt, w.flowsSaid = dir, digest, digest
}

// checkFlows warns, once for each change, that the flow files changed
// since the start, which a SIGHUP does not load: their check against the
// open orders (Engine.CheckOpenOrders) is a start's.
func (w *configWatcher) checkFlows() {
	if w.flowsDir == "" {
		return
	}
	now := flowsDigest(w.flowsDir)
	switch {
	case now == w.flowsAt:
		w.flowsSaid = now
	case now != w.flowsSaid:
		w.flowsSaid = now
		w.log.Warn("flows: the flow files changed since lapse serve started; a SIGHUP does not load them: "+
			"restart lapse serve to run them (the start checks them against the open orders first)", "flows", w.flowsDir)
	}
}

// newConfigWatcher returns a watcher of the config file of cfg, as
// loadFlags returned it. The settings' Reload funcs change p; they run on
// the watcher's goroutine, one at a time. The metrics
// lapse_config_reload_errors_total and
// lapse_config_last_reload_success_timestamp_seconds go to reg unless it is
// nil. When cfg has no file, there is nothing to reload.
func newConfigWatcher(cfg *flagConfig, p *process, log *slog.Logger, reg prometheus.Registerer) *configWatcher {
	w := &configWatcher{
		Interval: 2 * time.Second,
		path:     cfg.Path,
		defs:     cfg.fs,
		settings: cfg.settings,
		known:    cfg.known,
		proc:     p,
		start:    cfg,
		pinned:   map[string]string{},
		log:      log,
		now:      time.Now,
		running:  map[string]string{},
		stamp:    cfg.stamp,
		errCount: prometheus.NewCounter(prometheus.CounterOpts{Name: "lapse_config_reload_errors_total",
			Help: "Config reloads that failed (the file unreadable or invalid, or a value refused), and starts on the last good snapshot."}),
		okTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lapse_config_last_reload_success_timestamp_seconds",
			Help: "When the config file last loaded and applied cleanly, at start or on a reload."}),
	}
	cfg.fs.VisitAll(func(f *flag.Flag) {
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

// Start listens for SIGHUP before it returns, so that a SIGHUP sent once
// the command says it serves reloads the file rather than ends the
// process, and watches the file on its own goroutine until ctx is done or
// stop is called. Without a file, it logs and otherwise ignores SIGHUP.
// stop waits for the watcher to end, a reload under way included; until
// then a SIGHUP, even one after ctx is done, cannot end the process.
func (w *configWatcher) Start(ctx context.Context) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, hup)
	}()
	return func() {
		cancel()
		<-done
		signal.Stop(hup)
	}
}

func (w *configWatcher) run(ctx context.Context, hup <-chan os.Signal) {
	if w.path == "" {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				w.log.Warn("config: SIGHUP, but there is no config file (--config, LAPSE_CONFIG) to reload")
				w.checkFlows()
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
			w.checkFlows()
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

// Reload reads the file once and applies what changed, as the watcher
// started by Start does. It
// returns the file's errors, when nothing was applied, or the errors of the
// apply funcs that refused their value.
func (w *configWatcher) Reload() error {
	if w.path == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stamp = stampOf(w.path)
	next := scratchFlags(w.defs.Name(), w.known)
	file, err := readConfig(w.path)
	if err == nil {
		err = file.check(next, w.known)
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
		s, old := w.settings[f.Name], w.running[f.Name]
		if value == old || s == configSetting {
			return
		}
		shown, was := s.shown(value), s.shown(old)
		if by, ok := w.pinned[f.Name]; ok {
			if inFile {
				w.log.Info("config: the file's value is not used: the flag is set by "+by, "flag", f.Name, "value", shown, "source", source)
			}
			return
		}
		if s.Reload == nil {
			w.log.Warn("config: changed value needs a restart", "flag", f.Name, "value", shown, "running", was, "source", source)
			return
		}
		if err := s.Reload(w.proc, value); err != nil {
			err = fmt.Errorf("--%s %s: %w", f.Name, shown, err)
			errs = append(errs, err)
			w.log.Error("config: reloaded value refused; the running value stays", "flag", f.Name, "value", shown, "running", was, "err", err)
			return
		}
		w.running[f.Name] = value
		w.log.Info("config: reloaded", "flag", f.Name, "value", shown, "was", was, "source", source)
	})
	if err := errors.Join(errs...); err != nil {
		// The file is not good: the last good snapshot stays the
		// fallback of the next start.
		w.fail(err)
		return err
	}
	if err := writeSnapshot(w.path+snapshotSuffix, file); err != nil {
		w.log.Warn(err.Error())
	}
	w.start = nil // the start's file is no longer the last good one
	w.succeed()
	return nil
}

// Serving writes the snapshot of the file the command started on, once the
// command serves on it, unless a reload took a newer file meanwhile: then
// that file's snapshot stands. The two writes take the same lock, so the
// start's can never overwrite a reload's.
func (w *configWatcher) Serving() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.start == nil {
		return
	}
	w.start.WriteSnapshot()
	if err := w.start.SnapshotErr; err != nil {
		w.log.Warn(err.Error())
	}
	w.start = nil
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
