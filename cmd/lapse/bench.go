package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse/internal/burndown"
)

const benchUsage = `Usage: lapse bench [--db DSN] [--orders N] [--not-due F] [--subscribers 0-8] [--batch 500] [--workers 2] [--keep]

Measures how fast the deadline engine closes a backlog on your database: it
loads N due unpaid checkout orders and F×N that are not due, each with its
creation log row and outbox event, as the engine writes them (not timed);
then the engine closes the due ones, batch after batch, each with its log
row, its order.closed event and one delivery per subscriber, and it reports
closes per second and the close lag (closed_at - deadline_at, the whole
backlog due at once). On PostgreSQL it also reports the WAL written per
close and the server settings that bear on the figures.

It works in a scratch database that it makes and drops, also when stopped
with Ctrl-C or by an error: a schema lapse_bench_<hex> on PostgreSQL (the
user needs CREATE on the database), a database of that name on MySQL
(CREATE and DROP), a directory beside the --db file on SQLite. Nothing of
the --db database itself is read or changed. --keep keeps the scratch one
and prints its DSN.

`

// maxBenchOrders bounds the orders lapse bench loads, due and not: 100
// million orders with their log rows and events take some 100 GB.
const maxBenchOrders = 100_000_000

// benchArgs are the arguments of lapse bench.
type benchArgs struct {
	orders, notDue, subscribers int
	keep                        bool
}

// benchSettings are the settings of lapse bench: the database, the
// workload, and serve's claimer batch and workers, so that it measures the
// engine as serve would run it.
var benchSettings = []*setting{dbSetting,
	{Name: "orders", Kind: kindInt, Argument: true, Default: "100000", Range: between("1", strconv.Itoa(maxBenchOrders)),
		Doc:   "due orders the engine closes",
		field: func(o *options) any { return &o.bench.orders }},
	{Name: "not-due", Kind: kindInt, Argument: true, Default: "4", Range: between("0", "100"),
		Doc:   "orders not due (their deadline a day away) loaded per due order",
		field: func(o *options) any { return &o.bench.notDue }},
	{Name: "subscribers", Kind: kindInt, Argument: true, Range: between("0", strconv.Itoa(burndown.MaxSubscribers)),
		Doc:   "subscribers of order.closed: each close writes a pending delivery for each (no deliverer runs)",
		field: func(o *options) any { return &o.bench.subscribers }},
	serveSetting("batch"), serveSetting("workers"),
	{Name: "keep", Kind: kindBool, Argument: true,
		Doc:   "keep the scratch schema, database or file, and print its DSN",
		field: func(o *options) any { return &o.bench.keep }},
}

// serveSetting returns the setting of lapse serve called name.
func serveSetting(name string) *setting {
	for _, s := range serveSettings {
		if s.Name == name {
			return s
		}
	}
	panic("lapse serve has no setting " + name)
}

// bench is lapse bench.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var o options
	if err := parseFlags(fs, benchSettings, &o, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	a := o.bench
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	case a.orders*(1+a.notDue) > maxBenchOrders:
		// Each value is in its setting's range; together they load at
		// most maxBenchOrders.
		return fmt.Errorf("bench: --orders %d with --not-due %d would load %d orders: at most %d", a.orders, a.notDue,
			a.orders*(1+a.notDue), maxBenchOrders)
	}

	sc, err := burndown.NewScratch(ctx, o.db)
	if err != nil {
		return err
	}
	where := scratchNoun(sc) + " " + sc.Name
	defer func() {
		if a.keep {
			fmt.Fprintf(stderr, "kept the %s: --db %s\n", where, hidePasswords(sc.DSN))
			return
		}
		// Also after Ctrl-C, which has cancelled ctx.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := sc.Drop(dctx); err != nil {
			fmt.Fprintf(stderr, "lapse: could not drop the %s: %v\n", where, err)
			return
		}
		fmt.Fprintf(stderr, "dropped the %s\n", where)
	}()
	fmt.Fprintf(stderr, "working in the %s\n", where)
	store, err := openStore(ctx, sc.DSN)
	if err != nil {
		return err
	}
	defer store.Close() // before the drop, which waits for its sessions
	if err := store.Migrate(ctx); err != nil {
		return err
	}

	cfg := burndown.Config{Orders: a.orders, NotDue: a.notDue, Subscribers: a.subscribers,
		Batch: o.cc.Batch, Workers: o.cc.Workers}
	if a.notDue == 0 {
		cfg.NotDue = -1 // none, where Config's zero is its default
	}
	if sc.Kind == burndown.KindPostgres {
		cfg.Postgres = sc.DSN
	}
	bar := &benchProgress{w: stderr, terminal: isTerminal(stderr)}
	cfg.Progress = bar.show
	res, err := burndown.Run(ctx, store, cfg)
	bar.end()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bench: stopped: %w", ctx.Err())
		}
		return err
	}
	printBench(stdout, sc, res)
	return nil
}

// scratchNoun names what a scratch database is on its kind of database.
func scratchNoun(sc *burndown.Scratch) string {
	switch sc.Kind {
	case burndown.KindPostgres:
		return "scratch schema"
	case burndown.KindMySQL:
		return "scratch database"
	default:
		return "scratch directory"
	}
}

// printBench prints the figures of a burn-down.
func printBench(w io.Writer, sc *burndown.Scratch, r *burndown.Result) {
	fmt.Fprintf(w, "closed %d due orders in %s: %.0f closes/s\n", r.Closed, roundDuration(r.Elapsed), r.PerSecond())
	fmt.Fprintf(w, "  store        %s, %s %s\n", sc.Kind, scratchNoun(sc), sc.Name)
	fmt.Fprintf(w, "  workload     %d due + %d not due (%d per due order), each with its creation log row and outbox event; loaded in %s, not timed\n",
		r.Orders, r.Loaded-r.Orders, r.NotDue, roundDuration(r.Load))
	fmt.Fprintf(w, "  engine       Claimer.RunOnce, batch %d, %d workers, %d subscribers (deliveries per close)\n", r.Batch, r.Workers, r.Subscribers)
	fmt.Fprintf(w, "  close lag    p50 %s  p99 %s  p99.9 %s  max %s  (closed_at - deadline_at, all due at the start)\n",
		roundDuration(r.Lag.P50), roundDuration(r.Lag.P99), roundDuration(r.Lag.P999), roundDuration(r.Lag.Max))
	if r.WALBytes >= 0 {
		fmt.Fprintf(w, "  WAL          %.0f bytes/close (%.1f MB in all, written by the whole server while the engine ran)\n",
			r.WALPerClose(), float64(r.WALBytes)/1e6)
	}
	if process, server := r.CPU.Per(r.Closed); server >= 0 {
		fmt.Fprintf(w, "  CPU          %.1f µs/close in this process (the engine), %.1f µs/close in the database's sessions that served it\n", process, server)
	} else if r.Closed > 0 && sc.Kind == burndown.KindSQLite {
		fmt.Fprintf(w, "  CPU          %.1f µs/close in this process (the engine and SQLite)\n", process)
	} else if r.Closed > 0 {
		fmt.Fprintf(w, "  CPU          %.1f µs/close in this process (the engine); the database's not known (not on this host)\n", process)
	}
	fmt.Fprintf(w, "  go           %s, GOGC %d\n", runtime.Version(), gcPercent())
	if len(r.Settings) > 0 {
		var s []string
		for _, st := range r.Settings {
			s = append(s, st.Name+" "+st.Value)
		}
		fmt.Fprintf(w, "  settings     %s\n", strings.Join(s, ", "))
	}
}

// roundDuration rounds d to three or four significant digits.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// benchProgress shows how far a burn-down is: on a terminal one line per
// phase, redrawn in place with a bar; elsewhere a line at every tenth of the
// way.
type benchProgress struct {
	w        io.Writer
	terminal bool
	phase    burndown.Phase
	shown    int // tenths of the phase printed so far (not a terminal)
	drawn    bool
}

// show is burndown.Config.Progress.
func (p *benchProgress) show(pr burndown.Progress) {
	if pr.Phase != p.phase {
		p.end()
		p.phase, p.shown = pr.Phase, -1
	}
	pct := 100
	if pr.Total > 0 {
		pct = pr.Done * 100 / pr.Total
	}
	what := "orders loaded"
	if pr.Phase == burndown.PhaseClose {
		what = "due orders closed"
	}
	counts := fmt.Sprintf("%d/%d %s (%d%%)", pr.Done, pr.Total, what, pct)
	if p.terminal {
		const width = 30
		done := width * pct / 100
		fmt.Fprintf(p.w, "\r[%s%s] %s", strings.Repeat("#", done), strings.Repeat(".", width-done), counts)
		p.drawn = true
		return
	}
	if tenth := pct / 10; tenth > p.shown {
		p.shown = tenth
		fmt.Fprintln(p.w, counts)
	}
}

// end ends the line a terminal's bar is on.
func (p *benchProgress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
