package main

import (
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestSettingsTable: every setting has a name of its own, a doc, and a
// default that its kind takes and its flag prints as written; secrets have
// no default in code.
func TestSettingsTable(t *testing.T) {
	t.Parallel()
	validName := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	envs := map[string]string{}
	for _, s := range allSettings() {
		if !validName.MatchString(s.Name) {
			t.Errorf("setting %q: a name is lower case words joined by -", s.Name)
		}
		if other, ok := envs[envName(s.Name)]; ok && !s.Argument {
			t.Errorf("settings %s and %s share the variable %s", s.Name, other, envName(s.Name))
		}
		if !s.Argument {
			envs[envName(s.Name)] = s.Name
		}
		if strings.TrimSpace(s.Doc) == "" {
			t.Errorf("setting %s has no doc", s.Name)
		}
		if s.Secret && s.Default != "" {
			t.Errorf("setting %s is secret but has a default in code", s.Name)
		}
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		if err := defineOne(fs, s); err != nil {
			t.Errorf("setting %s: %v", s.Name, err)
			continue
		}
		if err := s.Kind.check(s.Default); s.Default != "" && err != nil {
			t.Errorf("setting %s: default %q: %v", s.Name, s.Default, err)
		}
		got := fs.Lookup(s.Name).DefValue
		if want := s.Default; want != got && !(want == "" && slices.Contains([]string{"", "0", "false", "0s"}, got)) {
			t.Errorf("setting %s: default written %q, shown as %q", s.Name, want, got)
		}
	}
	names := map[string]bool{}
	for _, s := range serveSettings {
		if names[s.Name] {
			t.Errorf("serve has setting %s twice", s.Name)
		}
		names[s.Name] = true
	}
}

// TestSettingsSharedNames: settings of several commands with one name are
// one key of a config file, which every command checks the same way: they
// agree on their kind and on being an argument, which a file cannot set.
func TestSettingsSharedNames(t *testing.T) {
	t.Parallel()
	byName := map[string]*setting{}
	for _, list := range [][]*setting{serveSettings, migrateSettings, reconcileSettings, flowsSettings,
		apikeyCreateSettings, operatorAddSettings, auditListSettings, dbSettings, closeSettings, benchSettings, demoSettings} {
		for _, s := range list {
			other, ok := byName[s.Name]
			if !ok {
				byName[s.Name] = s
				continue
			}
			if other.Kind != s.Kind || other.Argument != s.Argument {
				t.Errorf("two settings %s: a %s (argument %v) and a %s (argument %v)", s.Name, other.Kind, other.Argument, s.Kind, s.Argument)
			}
		}
	}
	for name := range byName {
		if !slices.ContainsFunc(allSettings(), func(s *setting) bool { return s.Name == name }) {
			t.Errorf("allSettings leaves out %s", name)
		}
	}
}

// defineOne defines the flag of s on fs, turning the panic of a mistake in
// the table into an error.
func defineOne(fs *flag.FlagSet, s *setting) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	s.define(fs, &options{})
	return nil
}

// TestSettingsNamedExist: every flag that a help, a message of the
// binary or the README names (--name) is a setting, so that none of them
// can name a flag that was renamed or removed.
func TestSettingsNamedExist(t *testing.T) {
	t.Parallel()
	known := map[string]bool{"help": true, "version": true}
	for _, s := range allSettings() {
		known[s.Name] = true
	}
	named := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	check := func(where, text string) {
		for _, m := range named.FindAllStringSubmatch(text, -1) {
			if !known[m[1]] {
				t.Errorf("%s names --%s, which is no setting", where, m[1])
			}
		}
	}
	for _, s := range allSettings() {
		check("the doc of --"+s.Name, s.Doc)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				text, err := strconv.Unquote(lit.Value)
				if err == nil {
					check(fset.Position(lit.Pos()).String(), text)
				}
			}
			return true
		})
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	check("README.md", lapseLines(string(readme)))
}

// lapseLines is the README without the command lines of other programs in
// its code blocks (pg_autoctl, curl, go test, …), whose flags are their
// own; lapse's commands (lapse …, go run ./cmd/lapse …) and the lines they
// continue stay.
func lapseLines(readme string) string {
	var out strings.Builder
	code, continued, other := false, false, false
	for line := range strings.Lines(readme) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			code, continued, other = !code, false, false
			out.WriteString(line)
			continue
		}
		if code {
			if !continued {
				word, _, _ := strings.Cut(trimmed, " ")
				other = word != "" && word != "lapse" && !strings.HasPrefix(word, "#") && !strings.HasPrefix(word, "-") &&
					!strings.HasPrefix(trimmed, "go run ./cmd/lapse")
			}
			continued = strings.HasSuffix(trimmed, `\`)
			if other {
				continue
			}
		}
		out.WriteString(line)
	}
	return out.String()
}

// How the help of a subscriber's URL ends: in the events it receives, or in
// the setting that holds them.
var (
	receivesEvents  = regexp.MustCompile(`receives ([a-z_.*]+(?:, [a-z_.*]+)*(?: and [a-z_.*]+)?)$`)
	receivesSetting = regexp.MustCompile(`receives the event types of --([a-z0-9-]+)$`)
)

// helpEvents returns the events that the help of the URL setting of
// subscriber name says it receives.
func helpEvents(t *testing.T, name string) []string {
	t.Helper()
	settings := settingsByName(serveSettings)
	s := settings[name]
	if s == nil {
		t.Fatalf("subscriber %s has no setting of its name", name)
	}
	if m := receivesSetting.FindStringSubmatch(s.Doc); m != nil {
		return splitList(settings[m[1]].Default)
	}
	m := receivesEvents.FindStringSubmatch(s.Doc)
	if m == nil {
		t.Fatalf("the help of --%s does not end in what it receives: %q", name, s.Doc)
	}
	return strings.FieldsFunc(strings.ReplaceAll(m[1], " and ", ", "), func(r rune) bool { return r == ',' || r == ' ' })
}

// parseServeFlags returns the options of lapse serve with args on the command
// line, and nothing from the environment or a file.
func parseServeFlags(t *testing.T, args ...string) *options {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defineFlags(fs, serveSettings, &o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

// everySubscriber are the flags of lapse serve that build each subscriber
// that needs no broker at start.
var everySubscriber = []string{
	"--webhook", "https://hooks.example/lapse", "--webhook-secret", "0123456789abcdef",
	"--stock-port", "https://stock.example", "--coupon-port", "https://coupons.example", "--notify-port", "https://notify.example",
	"--group-notify", "https://organisers.example", "--admin-notify", "https://admins.example",
}

// TestSubscriberHelp: the help of each subscriber's URL names exactly the
// events it is subscribed to (or the setting that holds them, by default
// exactly those).
func TestSubscriberHelp(t *testing.T) {
	t.Parallel()
	o := parseServeFlags(t, everySubscriber...)
	subs, closeSubs, err := o.sf.subscriptions(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSubs()
	var built []string
	for i := range subs {
		s := &subs[i]
		built = append(built, s.Name)
		if want := helpEvents(t, s.Name); !slices.Equal(s.Events, want) {
			t.Errorf("--%s receives %q, its help says %q", s.Name, s.Events, want)
		}
	}
	// The brokers connect at start: their subscribers are checked by value.
	for _, sub := range []subscriber{webhookSub, natsSub, rabbitmqSub, stockPortSub, couponPortSub, notifyPortSub, groupNotifySub, adminNotifySub} {
		if want := helpEvents(t, sub.Name); !slices.Equal(sub.Events, want) {
			t.Errorf("%s receives %q, the help of --%s says %q", sub.Name, sub.Events, sub.Name, want)
		}
		if !slices.Contains(built, sub.Name) && sub.Name != natsSub.Name && sub.Name != rabbitmqSub.Name {
			t.Errorf("no subscription %s was built", sub.Name)
		}
	}
}

// recordingEngine records the trigger modes and schedules that reloads set,
// and passes the schedules on to the engine.
type recordingEngine struct {
	*engine.Engine
	mode      engine.TriggerMode
	schedules map[string]lapse.Schedule
}

func (e *recordingEngine) SetTriggerMode(m engine.TriggerMode) error {
	e.mode = m
	return nil
}

func (e *recordingEngine) SetSchedule(name string, sch lapse.Schedule) error {
	e.schedules[name] = sch
	return e.Engine.SetSchedule(name, sch)
}

// timeouts records the timeouts that reloads set.
type timeouts struct{ connect, read time.Duration }

func (t *timeouts) SetTimeouts(connect, read time.Duration) {
	if connect > 0 {
		t.connect = connect
	}
	if read > 0 {
		t.read = read
	}
}

// nopProvider is a payment provider that is never called: it makes the
// engine run its settlement of group buys.
type nopProvider struct{ lapse.PaymentProvider }

// nopHandler stands for the brokers' sinks, which connect at start.
type nopHandler struct{}

func (nopHandler) Deliver(context.Context, *lapse.Delivery) error { return nil }

// reloaded is what a reload changed in the running serve of
// TestSettingsReload.
type reloaded struct {
	engine   *recordingEngine
	claimer  engine.ClaimerConfig
	timeouts *timeouts
	probe    *engine.Prober
	// startedOn names, by retry setting, the subscribers whose schedule
	// came from it at start.
	startedOn map[string][]string
}

// TestSettingsReload: every setting that has a Reload takes effect in a
// running serve when the config file changes it (a retry schedule in
// exactly the subscribers that started with it), and the README lists it.
func TestSettingsReload(t *testing.T) {
	steps := func(ds ...time.Duration) lapse.Schedule { return lapse.Schedule{Steps: ds, Jitter: 0.1} }
	type check func(t *testing.T, setting string, r reloaded)
	claimer := func(want func(c engine.ClaimerConfig) bool) check {
		return func(t *testing.T, _ string, r reloaded) {
			if !want(r.claimer) {
				t.Errorf("claimer config %+v", r.claimer)
			}
		}
	}
	schedule := func(want lapse.Schedule) check {
		return func(t *testing.T, setting string, r reloaded) {
			subscribers := r.startedOn[setting]
			if len(subscribers) == 0 {
				t.Fatalf("no subscriber started on --%s", setting)
			}
			changed := slices.Sorted(maps.Keys(r.engine.schedules))
			if !slices.Equal(changed, slices.Sorted(slices.Values(subscribers))) {
				t.Errorf("the schedules of %q changed, want those of %q", changed, subscribers)
			}
			for _, name := range subscribers {
				if got := r.engine.schedules[name]; !reflect.DeepEqual(got, want) {
					t.Errorf("schedule of %s: %+v, want %+v", name, got, want)
				}
			}
		}
	}
	cases := map[string]struct {
		value string
		check check
	}{
		"trigger-mode": {"database", func(t *testing.T, _ string, r reloaded) {
			if r.engine.mode != engine.TriggerDatabase {
				t.Errorf("trigger mode %s", r.engine.mode)
			}
		}},
		"batch":          {"7", claimer(func(c engine.ClaimerConfig) bool { return c.Batch == 7 })},
		"workers":        {"3", claimer(func(c engine.ClaimerConfig) bool { return c.Workers == 3 })},
		"sweep-batch":    {"9", claimer(func(c engine.ClaimerConfig) bool { return c.SweepBatch == 9 })},
		"max-sleep":      {"3s", claimer(func(c engine.ClaimerConfig) bool { return c.MaxSleep == 3*time.Second })},
		"claim-gather":   {"0", claimer(func(c engine.ClaimerConfig) bool { return c.Gather < 0 })}, // 0 is off, the engine's negative
		"sweep-interval": {"5s", claimer(func(c engine.ClaimerConfig) bool { return c.SweepInterval == 5*time.Second })},
		"sweep-grace":    {"2s", claimer(func(c engine.ClaimerConfig) bool { return c.SweepGrace == 2*time.Second })},
		"degraded-sweep": {"4s", claimer(func(c engine.ClaimerConfig) bool { return c.DegradedSweep == 4*time.Second })},
		"webhook-retry":  {"2m,4m", schedule(steps(2*time.Minute, 4*time.Minute))},
		"port-retry":     {"3m", schedule(steps(3 * time.Minute))},
		"nats-retry":     {"exp:2s,2m,9", schedule(lapse.Schedule{Base: 2 * time.Second, Cap: 2 * time.Minute, MaxAttempts: 9, Jitter: 0.1})},
		"rabbitmq-retry": {"exp:3s,3m,9", schedule(lapse.Schedule{Base: 3 * time.Second, Cap: 3 * time.Minute, MaxAttempts: 9, Jitter: 0.1})},
		// The settlement of group buys runs its waits without jitter, as
		// it started.
		"group-retries": {"2s,4s", schedule(lapse.Schedule{Steps: []time.Duration{2 * time.Second, 4 * time.Second}})},
		"issue-retries": {"2m,3m", schedule(steps(2*time.Minute, 3*time.Minute))},
		"port-connect-timeout": {"3s", func(t *testing.T, _ string, r reloaded) {
			if r.timeouts.connect != 3*time.Second {
				t.Errorf("connect timeout %v", r.timeouts.connect)
			}
		}},
		"probe-interval": {"5s", func(t *testing.T, _ string, r reloaded) {
			if got := r.probe.Interval(); got != 5*time.Second {
				t.Errorf("probe interval %v", got)
			}
		}},
		"port-read-timeout": {"20s", func(t *testing.T, _ string, r reloaded) {
			if r.timeouts.read != 20*time.Second {
				t.Errorf("read timeout %v", r.timeouts.read)
			}
		}},
	}
	var reloadable []string
	for _, s := range serveSettings {
		if s.Reload != nil {
			reloadable = append(reloadable, s.Name)
			if _, ok := cases[s.Name]; !ok {
				t.Errorf("--%s reloads, but this test does not try it", s.Name)
			}
		}
	}
	for name := range cases {
		if !slices.Contains(reloadable, name) {
			t.Errorf("--%s needs a restart, but this test reloads it", name)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, reloads, _ := strings.Cut(string(readme), "While `lapse serve` runs it reloads")
	reloads, _, _ = strings.Cut(reloads, "other changed keys")
	for _, name := range reloadable {
		if !strings.Contains(reloads, "`"+name+"`") {
			t.Errorf("the README does not list --%s among the settings that reload", name)
		}
	}

	// A serve as it starts, with a retry schedule of its own from each
	// retry setting in the file: the subscribers built from flags, the
	// brokers' stood in for, and the engine's own.
	for _, s := range append(slices.Clone(serveSettings), configSetting) {
		t.Setenv(envName(s.Name), "")
	}
	started := map[string]string{"webhook-retry": "11s", "port-retry": "12s", "nats-retry": "13s",
		"rabbitmq-retry": "14s", "group-retries": "15s", "issue-retries": "16s"}
	// file returns the file at start with name set to value.
	file := func(name, value string) string {
		var text strings.Builder
		for k, v := range started {
			if k != name {
				fmt.Fprintf(&text, "%s: %s\n", k, v)
			}
		}
		if name != "" {
			fmt.Fprintf(&text, "%s: %s\n", name, value)
		}
		return text.String()
	}
	dir := t.TempDir()
	path := writeConfig(t, dir, "lapse.yaml", file("", ""))
	fs := newFlagSet("serve", io.Discard)
	o := &options{}
	cfg, err := loadFlags(fs, serveSettings, o, append([]string{"--config", path}, everySubscriber...))
	if err != nil {
		t.Fatal(err)
	}
	subs, closeSubs, err := o.sf.subscriptions(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSubs()
	for _, b := range []struct {
		sub   subscriber
		retry string
	}{{natsSub, o.sf.natsRetry}, {rabbitmqSub, o.sf.rabbitRetry}} {
		sch, err := lapse.ParseSchedule(b.retry)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, engine.Subscription{Name: b.sub.Name, Handler: nopHandler{}, Events: b.sub.Events, Schedule: sch})
	}
	groups, issues, cards, err := o.sf.lifecycle()
	if err != nil {
		t.Fatal(err)
	}
	store, err := openStore(t.Context(), filepath.Join(dir, "lapse.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	eng, err := engine.New(store, flows.Builtin(), engine.Config{Logger: slog.New(slog.DiscardHandler), Subscriptions: subs,
		Payments:     engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": nopProvider{}}},
		GroupRetries: groups, IssueRetries: issues, Cards: cards})
	if err != nil {
		t.Fatal(err)
	}
	r := reloaded{engine: &recordingEngine{Engine: eng}, timeouts: &timeouts{}, startedOn: map[string][]string{}}
	for _, s := range eng.Subscriptions() {
		for name, v := range started {
			if sch, _ := lapse.ParseSchedule(v); slices.Equal(s.Schedule.Steps, sch.Steps) {
				r.startedOn[name] = append(r.startedOn[name], s.Name)
			}
		}
	}
	claim := engine.NewClaimer(eng, o.cc)
	if r.probe, err = engine.NewProber(eng, engine.ProberConfig{Interval: o.probeInterval}); err != nil {
		t.Fatal(err)
	}
	w := newConfigWatcher(cfg, &process{engine: r.engine, claimer: claim, timed: append(o.sf.timed, r.timeouts), probe: r.probe}, slog.New(slog.DiscardHandler), nil)

	for _, name := range reloadable {
		t.Run(name, func(t *testing.T) {
			r.engine.schedules = map[string]lapse.Schedule{}
			writeConfig(t, dir, "lapse.yaml", file(name, cases[name].value))
			if err := w.Reload(); err != nil {
				t.Fatalf("reload of %s: %v", name, err)
			}
			r.claimer = claim.Config()
			cases[name].check(t, name, r)

			// Back to the start, for the next.
			writeConfig(t, dir, "lapse.yaml", file("", ""))
			if err := w.Reload(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestClaimGatherRefused checks that a reload of --claim-gather outside 0 to
// 1s is refused before it reaches the claimer (nil here).
func TestClaimGatherRefused(t *testing.T) {
	for _, v := range []string{"-1ms", "2s", "soon", ""} {
		if err := reloadClaimGather(&process{}, v); err == nil {
			t.Errorf("reload of --claim-gather %q accepted", v)
		}
	}
	if got := claimGather(20 * time.Millisecond); got != 20*time.Millisecond {
		t.Errorf("claimGather(20ms) = %v", got)
	}
}
