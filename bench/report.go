package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lapsehq/lapse/internal/burndown"
)

// report is the three runs of a round side by side.
type report struct {
	n             int
	db            string
	round, rounds int      // this round's number from 1, of rounds
	order         []string // the runs that ran, in the order they ran

	river    *riverResult
	riverErr error

	lapse    *burndown.Result
	lapseErr error

	pgbench     *pgbenchResult
	pgbenchSkip string
	pgbenchErr  error
}

func (r *report) err() error {
	return errors.Join(r.riverErr, r.lapseErr, r.pgbenchErr)
}

// print writes the round's table, its ratios and Lapse's close lag.
func (r *report) print(w io.Writer) {
	var which string
	if r.rounds > 1 {
		which = fmt.Sprintf("round %d of %d: ", r.round, r.rounds)
	}
	fmt.Fprintf(w, "\n%sburn-down of N = %d, against %s, one after the other: %s\n\n", which, r.n, hidePassword(r.db), strings.Join(r.order, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "run\twhat\trate\tWAL\tCPU (process + server)\t")
	switch {
	case r.river != nil:
		fmt.Fprintf(tw, "river\tRiver %s: %d no-op jobs, riverbench's burn-down through River's API\t%.0f jobs/s\t%s/job\t%s/job\t\n",
			riverVersion, r.river.jobs, r.river.perSecond(), bytesPer(r.river.walBytes, r.river.jobs), cpuPer(r.river.cpu, r.river.jobs))
	default:
		fmt.Fprintf(tw, "river\tfailed: %v\t\t\t\n", r.riverErr)
	}
	switch l := r.lapse; {
	case l != nil:
		fmt.Fprintf(tw, "lapse\tLapse: %d due of %d orders, Claimer.RunOnce, batch %d, %d workers, %d subscribers\t%.0f closes/s\t%s/close\t%s/close\t\n",
			l.Closed, l.Loaded, l.Batch, l.Workers, l.Subscribers, l.PerSecond(), bytesPer(l.WALBytes, l.Closed), cpuPer(l.CPU, l.Closed))
	default:
		fmt.Fprintf(tw, "lapse\tfailed: %v\t\t\t\n", r.lapseErr)
	}
	switch p := r.pgbench; {
	case p != nil:
		fmt.Fprintf(tw, "pgbench\t%s: %d orders, %d×%d transactions of %d, %d closed\t%.0f closes/s\t%s/close\t%s/close\t\n",
			filepath.Base(p.script), r.n, p.clients, p.txns, p.batch, p.closed, p.perSecond(), bytesPer(p.walBytes, p.closed), cpuPer(p.cpu, p.closed))
	case r.pgbenchSkip != "":
		fmt.Fprintf(tw, "pgbench\tnot run: %s\t\t\t\n", r.pgbenchSkip)
	default:
		fmt.Fprintf(tw, "pgbench\tfailed: %v\t\t\t\n", r.pgbenchErr)
	}
	tw.Flush()

	fmt.Fprintln(w)
	if v, ok := r.ratio(r.riverRate); ok {
		fmt.Fprintf(w, "Lapse ÷ River    %.2f\n", v)
	}
	if v, ok := r.ratio(r.pgbenchRate); ok {
		fmt.Fprintf(w, "Lapse ÷ pgbench  %.2f\n", v)
	}
	if l := r.lapse; l != nil {
		fmt.Fprintf(w, "\nLapse close lag (closed_at - deadline_at, all due at the start): p50 %s, p99 %s, p99.9 %s, max %s\n",
			round(l.Lag.P50), round(l.Lag.P99), round(l.Lag.P999), round(l.Lag.Max))
	}
}

// The rates of a round's runs; ok is false for a run that did not run.
func (r *report) riverRate() (float64, bool) {
	if r.river == nil {
		return 0, false
	}
	return r.river.perSecond(), true
}

func (r *report) lapseRate() (float64, bool) {
	if r.lapse == nil {
		return 0, false
	}
	return r.lapse.PerSecond(), true
}

func (r *report) pgbenchRate() (float64, bool) {
	if r.pgbench == nil {
		return 0, false
	}
	return r.pgbench.perSecond(), true
}

// ratio is Lapse's rate over the rate of another run of the round.
func (r *report) ratio(of func() (float64, bool)) (float64, bool) {
	l, ok := r.lapseRate()
	o, ok2 := of()
	if !ok || !ok2 || o == 0 {
		return 0, false
	}
	return l / o, true
}

// printFooter writes, for more than one round, the median of each run's
// rate and of each ratio over the rounds (with their range), then what the
// figures were measured on and how.
func printFooter(w io.Writer, reps []*report) {
	if len(reps) > 1 {
		fmt.Fprintf(w, "\nover %d rounds, each in another order: median (lowest–highest)\n\n", len(reps))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, m := range []struct {
			name, unit string
			of         func(*report) (float64, bool)
		}{
			{"river", "jobs/s", (*report).riverRate},
			{"lapse", "closes/s", (*report).lapseRate},
			{"pgbench", "closes/s", (*report).pgbenchRate},
			{"Lapse ÷ River", "", func(r *report) (float64, bool) { return r.ratio(r.riverRate) }},
			{"Lapse ÷ pgbench", "", func(r *report) (float64, bool) { return r.ratio(r.pgbenchRate) }},
		} {
			var vs []float64
			for _, r := range reps {
				if v, ok := m.of(r); ok {
					vs = append(vs, v)
				}
			}
			if len(vs) == 0 {
				continue
			}
			slices.Sort(vs)
			format := "%.2f"
			if m.unit != "" {
				format = "%.0f"
			}
			fmt.Fprintf(tw, "%s\t"+format+" %s\t("+format+"–"+format+", %d rounds)\t\n", m.name, median(vs), m.unit, vs[0], vs[len(vs)-1], len(vs))
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	for _, r := range slices.Backward(reps) {
		if l := r.lapse; l != nil {
			var s []string
			for _, st := range l.Settings {
				s = append(s, st.Name+" "+st.Value)
			}
			fmt.Fprintf(w, "server: %s\n", strings.Join(s, ", "))
			break
		}
	}
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	fmt.Fprintf(w, "go: %s, GOGC %d (this process: River and Lapse)\n", runtime.Version(), p)
	fmt.Fprintln(w, "WAL is the whole server's while each ran: other sessions' writes count too.")
	fmt.Fprintln(w, "CPU is the client's (River's, Lapse's engine: this process; pgbench) + the run's own database sessions' (from /proc, a server on this host; pgbench's sampled every 20 ms, so up to 20 ms a session short); it counts no other work on the machine.")
}

// median is the middle of sorted vs, or the mean of its two middle values.
func median(vs []float64) float64 {
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// bytesPer is bytes over n as "1234 B", or "-" when unknown.
func bytesPer(bytes int64, n int) string {
	if bytes < 0 || n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f B", float64(bytes)/float64(n))
}

// round rounds d to three or four significant digits.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// hidePassword returns dsn without its password.
func hidePassword(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "the --db database"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.Redacted()
}

// cpuPer is c over n as "12 + 35 µs", or "-" when unknown.
func cpuPer(c burndown.CPU, n int) string {
	process, server := c.Per(n)
	if n == 0 || server < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f + %.1f µs", process, server)
}
