// Command bench runs three burn-downs one after the other against the same
// PostgreSQL and prints them side by side: River's own benchmark of no-op
// jobs, Lapse's deadline engine closing due orders, and pgbench running
// the Lapse store's close statement. From the root of a clone, with no
// build step:
//
//	go -C bench run . [--db URL] [--orders N] [--not-due 4] [--subscribers 0|2] [--batch 500] [--workers 2] [--rounds 1]
//
// --db defaults to $LAPSE_TEST_POSTGRES; its user must be allowed to create
// schemas. Each run works in a scratch schema of its own, dropped at the
// end (also on Ctrl-C):
//
//  1. River (its pinned version, v0.51.2): riverbench's burn-down mode
//     (`river bench --num-total-jobs N`), driven through River's public API
//     the way riverbench does, since riverbench is in River's cmd/river
//     module, which is not served here. See runRiver.
//  2. Lapse: internal/burndown, as `lapse bench` runs it: N due orders and
//     not-due × N others with their history, closed by Claimer.RunOnce.
//  3. pgbench, when it and psql are on PATH: ../postgres/testdata/pgbench
//     (--pgbench-dir) setup.sql loads N orders, then close.sql (or
//     close_subscribers.sql) closes them batch by batch from --workers
//     clients. The files are run as they are, not copied.
//
// It prints jobs or closes per second of each, WAL bytes per job or close,
// and the ratios Lapse ÷ River and Lapse ÷ pgbench. The figures are as good
// as the machine is quiet: the WAL is the whole server's.
//
// --rounds runs the three that many times, each round in an order of its
// own (the first run of round r is the r-th of river, lapse, pgbench, the
// others after it in turn), and ends with the median of each run's rate
// and of each ratio, the ratios taken within a round. On a shared or
// virtual machine a run's rate can move by a third from one minute to the
// next; one round's ratio is then luck, the median of several is not.
//
// This is a module of its own so that River never enters Lapse's go.mod; it
// imports Lapse's internal packages, which Go allows since its path is
// under github.com/lapsehq/lapse.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/lapsehq/lapse/internal/burndown"
)

func main() {
	// As the lapse binary runs (cmd/lapse/gc.go), unless GOGC is set; River
	// runs in this process under it too.
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	db, pgbenchDir              string
	orders, notDue, subscribers int
	batch, workers, rounds      int
	verbose                     bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.db, "db", os.Getenv("LAPSE_TEST_POSTGRES"), "PostgreSQL URL (default $LAPSE_TEST_POSTGRES); its user must be allowed to create schemas")
	fs.IntVar(&o.orders, "orders", 100_000, "N: River's jobs, Lapse's due orders, pgbench's orders")
	fs.IntVar(&o.notDue, "not-due", burndown.DefaultNotDue, "orders not due Lapse loads per due order")
	fs.IntVar(&o.subscribers, "subscribers", 0, "subscribers of order.closed: deliveries per close (0 or 2, which pgbench has a script for)")
	fs.IntVar(&o.batch, "batch", burndown.DefaultBatch, "Lapse's claimer batch")
	fs.IntVar(&o.workers, "workers", burndown.DefaultWorkers, "Lapse's claimer workers, and pgbench's clients")
	fs.StringVar(&o.pgbenchDir, "pgbench-dir", "../postgres/testdata/pgbench", "the directory of the store's pgbench scripts (setup.sql, close.sql)")
	fs.IntVar(&o.rounds, "rounds", 1, "how many times to run the three, each round in another order; more than one ends with the medians")
	fs.BoolVar(&o.verbose, "v", false, "log River's and the engine's info messages")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.db == "":
		return errors.New("give --db postgres://… or set LAPSE_TEST_POSTGRES")
	case !strings.HasPrefix(o.db, "postgres://") && !strings.HasPrefix(o.db, "postgresql://"):
		return errors.New("--db: want a postgres:// URL")
	case o.orders <= 0 || o.notDue < 0 || o.batch <= 0 || o.workers <= 0:
		return errors.New("--orders, --batch and --workers must be positive, --not-due 0 or more")
	case o.rounds < 1 || o.rounds > 100:
		return errors.New("--rounds must be from 1 to 100")
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	say := func(s string) { fmt.Fprintf(stderr, "%s %s\n", time.Now().Format("15:04:05"), s) }

	var reps []*report
	for r := range o.rounds {
		if o.rounds > 1 {
			say(fmt.Sprintf("round %d of %d", r+1, o.rounds))
		}
		rep, err := runRound(ctx, o, r, log, say)
		if err != nil {
			return err
		}
		rep.round, rep.rounds = r+1, o.rounds
		rep.print(stdout)
		reps = append(reps, rep)
		if err := rep.err(); err != nil {
			printFooter(stdout, reps)
			return err
		}
	}
	printFooter(stdout, reps)
	return nil
}

// runs are the three burn-downs, in the order of the first round.
var runs = []string{"river", "lapse", "pgbench"}

// runRound runs the three burn-downs once, starting with runs[round % 3].
// It returns an error only when ctx ended; a run that failed is in the
// report.
func runRound(ctx context.Context, o options, round int, log *slog.Logger, say func(string)) (*report, error) {
	rep := &report{n: o.orders, db: o.db}
	for k := range runs {
		switch name := runs[(round+k)%len(runs)]; name {
		case "river":
			rep.river, rep.riverErr = runRiver(ctx, o.db, o.orders, log, throttled(say))
			if err := stopped(ctx, rep.riverErr); err != nil {
				return nil, err
			}
			rep.order = append(rep.order, name)
		case "lapse":
			cfg := burndown.Config{Orders: o.orders, NotDue: o.notDue, Subscribers: o.subscribers, Batch: o.batch, Workers: o.workers}
			if o.notDue == 0 {
				cfg.NotDue = -1 // none, where Config's zero is its default
			}
			sayLapse := throttled(say)
			cfg.Progress = func(p burndown.Progress) {
				what := "orders loaded"
				if p.Phase == burndown.PhaseClose {
					what = "due orders closed"
				}
				sayLapse(fmt.Sprintf("lapse: %d/%d %s", p.Done, p.Total, what))
			}
			rep.lapse, rep.lapseErr = runLapse(ctx, o.db, cfg, log, say)
			if err := stopped(ctx, rep.lapseErr); err != nil {
				return nil, err
			}
			rep.order = append(rep.order, name)
		case "pgbench":
			rep.pgbench, rep.pgbenchSkip, rep.pgbenchErr = runPgbench(ctx, o.db, o.pgbenchDir, o.orders, o.subscribers, o.workers, say)
			if err := stopped(ctx, rep.pgbenchErr); err != nil {
				return nil, err
			}
			if rep.pgbenchSkip == "" {
				rep.order = append(rep.order, name)
			}
		}
	}
	return rep, nil
}

// stopped returns err when ctx ended (Ctrl-C): then nothing more runs.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	return nil
}

// throttled returns say, saying a line at most every second but the first.
func throttled(say func(string)) func(string) {
	var last time.Time
	return func(s string) {
		if time.Since(last) >= time.Second {
			last = time.Now()
			say(s)
		}
	}
}
