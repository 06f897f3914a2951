package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/payment"
)

// demoStats is what lapse demo shows: the service as its database and
// engine see it, and what the demo's fakes (sandbox, merchant) were asked.
type demoStats struct {
	Elapsed   time.Duration               // since the traffic started
	Phase     string                      // demoRunning, demoSettling, demoStopped
	Traffic   time.Duration               // how long the traffic ran, once it stopped
	Orders    map[string]map[string]int64 // flow → state → orders
	Cut       bool                        // more orders than demoCountBound: the counts are of the newest
	Closes    int64
	P50, P99  time.Duration
	Pending   int64 // deliveries
	Dead      int64
	Reviews   int // open
	Money     map[string]moneyLine
	Unsettled int // payments neither applied, refunded nor in review
	Sandbox   payment.SandboxCalls
	Merchant  merchantCounts
	Started   map[string]int
	APIFails  int
	LastFail  string
}

// moneyLine is where the payments of one currency stand: the
// reconciliation's totals as they are, Overflow with them, so that the
// display cannot show sums that wrapped as money.
type moneyLine = engine.MoneyTotals

// demoCountBound bounds the orders counted by state at each refresh, and
// demoFullEvery is how often they and the payments are read again.
const (
	demoCountBound = 50_000
	demoFullEvery  = 2 * time.Second
)

// collect reads the stats of the demo's service. The counts of orders by
// state and the payments, which read every order and payment, are read
// again only when full is set or demoFullEvery has passed since they were
// last read; in between they are shown as they were then.
func (d *demo) collect(ctx context.Context, full bool) (*demoStats, error) {
	phase, traffic := d.phase()
	st := &demoStats{Elapsed: time.Since(d.began).Truncate(100 * time.Millisecond), Phase: phase, Traffic: traffic.Truncate(100 * time.Millisecond)}
	if full || d.last == nil || time.Since(d.lastFull) >= demoFullEvery {
		if err := d.collectFull(ctx, st); err != nil {
			return nil, err
		}
		d.lastFull = time.Now()
	} else {
		st.Orders, st.Cut, st.Money, st.Unsettled = d.last.Orders, d.last.Cut, d.last.Money, d.last.Unsettled
	}
	lag := d.svc.Engine.CloseLag(time.Hour)
	st.Closes, st.P50, st.P99 = lag.Count, lag.P50, lag.P99
	dc, err := d.svc.Store.DeliveryCount(ctx)
	if err != nil {
		return nil, err
	}
	st.Pending, st.Dead = dc.Pending, dc.Dead
	rs, err := d.svc.Engine.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 1000})
	if err != nil {
		return nil, err
	}
	st.Reviews = len(rs)
	st.Sandbox = d.svc.Sandbox.Calls()
	st.Merchant = d.merchant.Counts()
	st.Started, st.APIFails, st.LastFail = d.traffic.Started()
	d.last = st
	return st, nil
}

// collectFull reads the orders by state, at most demoCountBound of the
// newest, and where the payments stand (Engine.Reconcile) into st.
func (d *demo) collectFull(ctx context.Context, st *demoStats) error {
	st.Orders = map[string]map[string]int64{}
	p := &lapse.OrderListParams{Limit: 1000}
	for n := 0; ; {
		os, err := d.svc.Engine.Orders(ctx, p)
		if err != nil {
			return err
		}
		for _, o := range os {
			byState := st.Orders[o.Flow]
			if byState == nil {
				byState = map[string]int64{}
				st.Orders[o.Flow] = byState
			}
			byState[string(o.State)]++
		}
		n += len(os)
		if len(os) < p.Limit {
			break
		}
		if n >= demoCountBound {
			st.Cut = true
			break
		}
		last := os[len(os)-1]
		p.Before = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	rec, err := d.svc.Engine.Reconcile(ctx)
	if err != nil {
		return err
	}
	st.Money = map[string]moneyLine{}
	for cur, t := range rec.Totals {
		st.Money[cur] = *t
	}
	st.Unsettled = len(rec.Issues)
	return nil
}

// lines renders st as the display's lines, each short enough for an
// 80-column terminal.
func (st *demoStats) lines(d *demo) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch st.Phase {
	case demoRunning:
		until := ""
		if d.duration > 0 {
			until = " of " + d.duration.String()
		}
		add("lapse demo  running %s%s at %.4g arrivals/s; Ctrl-C to stop", st.Elapsed, until, d.rate)
	case demoSettling:
		add("lapse demo  traffic stopped at %s; settling the work in flight (Ctrl-C: skip)", st.Traffic)
	default:
		add("lapse demo  stopped: the traffic ran %s", st.Traffic)
	}
	add("")
	add("Orders by state")
	for _, flow := range slices.Sorted(maps.Keys(st.Orders)) {
		byState := st.Orders[flow]
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(byState)) {
			parts = append(parts, fmt.Sprintf("%s %d", s, byState[s]))
		}
		add("  %-11s %s", flow, strings.Join(parts, "  "))
	}
	if len(st.Orders) == 0 {
		add("  none yet")
	}
	if st.Cut {
		add("  (the newest %d orders)", demoCountBound)
	}
	add("Close lag      p50 %s  p99 %s  (%d closes by deadline)", lagText(st.P50, st.Closes), lagText(st.P99, st.Closes), st.Closes)
	add("Deliveries     pending %d  dead %d", st.Pending, st.Dead)
	add("Reviews        open %d", st.Reviews)
	add("Payments")
	for _, cur := range slices.Sorted(maps.Keys(st.Money)) {
		m := st.Money[cur]
		if m.Overflow {
			// As lapse reconcile: wrapped sums are not money.
			add("  %s  the totals do not fit in 64 bits, and are not shown", cur)
			continue
		}
		add("  %s  captured %s  applied %s  refunded %s  in review %s", cur,
			minor(m.Captured), minor(m.Applied), minor(m.Refunded), minor(m.Review))
	}
	if len(st.Money) == 0 {
		add("  none yet")
	}
	add("  not yet settled %d", st.Unsettled)
	add("Failures")
	c := st.Sandbox
	add("  sandbox     %d paid, %d charges, %d refunds, %d closes", c.Pay, c.Charge, c.Refund, c.Close)
	add("              %d failed, %d answers lost, %d callbacks unanswered", c.Failed, c.Lost, c.CallbackFailures)
	m := st.Merchant
	add("  stock port  %d calls: %d failed, %d too slow, %d asked back", m.Calls, m.Failed, m.Slow, m.Queries)
	add("  card port   %d calls: %d failed", m.CardCalls, m.CardFailed)
	if st.APIFails > 0 {
		add("  API         %d requests failed; last: %s", st.APIFails, clip(st.LastFail, 50))
	}
	return out
}

// line renders st as one line, for output that is not a terminal.
func (st *demoStats) line() string {
	var orders []string
	for _, flow := range slices.Sorted(maps.Keys(st.Orders)) {
		var n int64
		for _, c := range st.Orders[flow] {
			n += c
		}
		orders = append(orders, fmt.Sprintf("%s %d", flow, n))
	}
	return fmt.Sprintf("demo %s %s: orders %s; close lag p50 %s p99 %s; deliveries pending %d dead %d; reviews %d; unsettled payments %d",
		st.Phase, st.Elapsed, strings.Join(orders, ", "), lagText(st.P50, st.Closes), lagText(st.P99, st.Closes),
		st.Pending, st.Dead, st.Reviews, st.Unsettled)
}

// lagText shows a close lag, or "-" before the first close.
func lagText(d time.Duration, closes int64) string {
	if closes == 0 {
		return "-"
	}
	return roundDuration(d).String()
}

// minor shows an amount of minor units as major units with two decimals.
func minor(v int64) string {
	// As unsigned, so that the most negative int64, which has no
	// positive twin, reads as one sign and one number too.
	sign, u := "", uint64(v)
	if v < 0 {
		sign, u = "-", -u
	}
	return fmt.Sprintf("%s%d.%02d", sign, u/100, u%100)
}

// clip shortens s to n runes.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// screen draws the display: on a terminal it redraws its lines in place
// (the cursor moved up over the last drawing, each line cleared as it is
// written); elsewhere it prints one line every plainEvery.
type screen struct {
	w          io.Writer
	terminal   bool
	drawn      int // lines of the last drawing, on a terminal
	plainEvery time.Duration
	lastPlain  time.Time
}

// ANSI escapes of the display.
const (
	ansiUp        = "\x1b[%dA" // cursor up n lines
	ansiClearLine = "\x1b[2K"  // erase the whole line
	ansiClearDown = "\x1b[J"   // erase from the cursor to the end of the screen
)

// due reports whether draw would show anything now: a terminal is redrawn
// every time, a plain line printed every plainEvery, or when forced.
func (s *screen) due(force bool) bool {
	return s.terminal || force || time.Since(s.lastPlain) >= s.plainEvery
}

// draw shows st if due; force prints a plain line even before plainEvery.
func (s *screen) draw(st *demoStats, d *demo, force bool) {
	if !s.due(force) {
		return
	}
	if !s.terminal {
		fmt.Fprintln(s.w, st.line())
		s.lastPlain = time.Now()
		return
	}
	var b strings.Builder
	if s.drawn > 0 {
		fmt.Fprintf(&b, "\r"+ansiUp, s.drawn)
	}
	lines := st.lines(d)
	for _, l := range lines {
		b.WriteString(ansiClearLine + clip(l, 79) + "\r\n")
	}
	b.WriteString(ansiClearDown)
	io.WriteString(s.w, b.String())
	s.drawn = len(lines)
}
