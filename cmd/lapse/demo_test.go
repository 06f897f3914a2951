package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/sqlite"
)

// ptyRun is lapse running on the slave side of a pty, as in a terminal.
type ptyRun struct {
	t    *testing.T
	cmd  *exec.Cmd
	tty  *os.File // the master side
	mu   sync.Mutex
	out  bytes.Buffer
	read chan struct{} // closed when the master side reads EOF or EIO
}

// startPTY runs lapse with args on a pty of 50 rows and 100 columns.
func startPTY(t *testing.T, args ...string) *ptyRun {
	t.Helper()
	cmd := exec.Command(lapseBin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_HTTP=", "LAPSE_CONFIG=", "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	r := &ptyRun{t: t, cmd: cmd, tty: tty, read: make(chan struct{})}
	go func() {
		defer close(r.read)
		buf := make([]byte, 32<<10)
		for {
			n, err := tty.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		tty.Close()
		if t.Failed() {
			t.Logf("output of lapse %v:\n%s", args, r.Output())
		}
	})
	return r
}

// Output returns what lapse wrote to its terminal so far.
func (r *ptyRun) Output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// wait waits for lapse to exit and everything it wrote to be read, and
// returns its exit status.
func (r *ptyRun) wait(timeout time.Duration) int {
	r.t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		r.t.Fatalf("lapse did not exit within %v", timeout)
	}
	select {
	case <-r.read:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the terminal's output did not end after lapse exited")
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		r.t.Fatal(err)
	}
	return 0
}

var (
	cursorUp = regexp.MustCompile(`\x1b\[\d+A`)
	ansi     = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)
	// The line of lapse reconcile that sums it up, and the one it ends
	// with when every payment is accounted for.
	reconcileTotals = regexp.MustCompile(`CNY \(minor units\): captured (\d+) = applied (\d+) \+ refunded (\d+) \+ in review (\d+) \+ not settled 0`)
)

const reconcileClean = "every payment is applied to one paid order, refunded, or in review"

// checkDemoDisplay checks that out, a demo's terminal, shows the display
// drawn and redrawn in place with its sections and counts of something.
func checkDemoDisplay(t *testing.T, out string) {
	t.Helper()
	if n := len(cursorUp.FindAllString(out, -1)); n < 5 {
		t.Errorf("the display moved the cursor up %d times: it was not redrawn in place", n)
	}
	if !strings.Contains(out, "\x1b[2K") {
		t.Error("the display cleared no line as it redrew")
	}
	plain := ansi.ReplaceAllString(out, "")
	for _, heading := range []string{"Orders by state", "Close lag", "Deliveries", "Reviews", "Payments", "Failures"} {
		if !strings.Contains(plain, heading) {
			t.Errorf("the display has no %q", heading)
		}
	}
	for _, count := range []string{`checkout .*PAID [1-9]`, `checkout .*CLOSED [1-9]`, `Close lag +p50 \d`, `stock port +[1-9]\d* calls`} {
		if !regexp.MustCompile(count).MatchString(plain) {
			t.Errorf("the display never showed %s", count)
		}
	}
}

// checkDemoReconciled checks that out ends with a clean lapse reconcile
// that saw refunds and payments in review, and returns the summary.
func checkDemoReconciled(t *testing.T, out string) string {
	t.Helper()
	plain := ansi.ReplaceAllString(out, "")
	i := strings.Index(plain, "Summary:")
	if i < 0 {
		t.Fatal("no summary")
	}
	summary := plain[i:]
	if !strings.Contains(summary, "lapse reconcile --db") || !strings.Contains(summary, reconcileClean) {
		t.Errorf("no clean lapse reconcile after the summary:\n%s", summary)
	}
	m := reconcileTotals.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("no totals of lapse reconcile:\n%s", summary)
	}
	if refunded, _ := strconv.Atoi(m[3]); refunded == 0 {
		t.Errorf("nothing was refunded: %s", m[0])
	}
	return summary
}

// checkDemoFailures reads the demo's database after it ended: failures
// happened and were handled (deliveries retried until done, deliveries
// dead, memberships in manual review, late payments refunded, group buys
// failed), and the rest went through (group buys settled).
func checkDemoFailures(t *testing.T, db string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dc, err := s.DeliveryCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dc.Dead == 0 || dc.Pending != 0 {
		t.Errorf("deliveries: %d dead, %d pending; want some dead and none pending once settled", dc.Dead, dc.Pending)
	}
	reviews, err := s.ReviewList(ctx, &lapse.ReviewListParams{Open: true, Limit: 1000})
	if err != nil || len(reviews) == 0 {
		t.Errorf("open reviews: %d, %v; want some", len(reviews), err)
	}
	states := map[string]int{}
	retried := 0
	p := &lapse.OrderListParams{Limit: 500}
	for {
		os, err := s.OrderList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range os {
			states[o.Flow+" "+string(o.State)]++
			if retried > 0 {
				continue
			}
			ds, err := s.DeliveryList(ctx, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if d.Status == lapse.DeliveryDone && d.Attempts > 1 {
					retried++
				}
			}
		}
		if len(os) < p.Limit {
			break
		}
		last := os[len(os)-1]
		p.Before = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if retried == 0 {
		t.Error("no delivery was done after a retry")
	}
	for _, want := range []string{"checkout PAID", "checkout CLOSED", "membership ISSUED", "membership MANUAL_REVIEW", "groupbuy SETTLED", "groupbuy FAILED"} {
		if states[want] == 0 {
			t.Errorf("no order is %s: %v", want, states)
		}
	}
	ps, err := s.PaymentList(ctx, &lapse.PaymentListParams{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	late := 0
	for _, p := range ps {
		if p.Status == lapse.PaymentRefunded {
			late++
		}
	}
	if late == 0 {
		t.Errorf("no payment was refunded among %d", len(ps))
	}
}

// TestDemo runs lapse demo --duration 30s in a terminal: the display is
// drawn and redrawn in place with its sections and counts, failures happen
// and are handled, and the demo ends with its summary and a clean lapse
// reconcile, exit 0.
func TestDemo(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	r := startPTY(t, "demo", "--duration", "30s", "--db", db)
	if code := r.wait(2 * time.Minute); code != 0 {
		t.Errorf("lapse demo exited %d, want 0", code)
	}
	out := r.Output()
	checkDemoDisplay(t, out)
	summary := checkDemoReconciled(t, out)
	if !strings.Contains(summary, "stopped after --duration 30s") {
		t.Errorf("the summary does not say that --duration stopped it:\n%s", summary)
	}
	plain := ansi.ReplaceAllString(out, "")
	for _, want := range []string{"console  http://127.0.0.1:", `operator "demo", password `, "TOTP secret "} {
		if !strings.Contains(plain, want) {
			t.Errorf("the start does not show %q", want)
		}
	}
	checkDemoFailures(t, db)
}

// TestDemoCtrlC: Ctrl-C typed in the demo's terminal stops the traffic; the
// demo settles, prints its summary and a clean lapse reconcile, and exits 0.
func TestDemoCtrlC(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	r := startPTY(t, "demo", "--db", db, "--rate", "20")
	paid := regexp.MustCompile(`checkout .*PAID [1-9]`)
	stop := time.Now().Add(time.Minute)
	for !paid.MatchString(ansi.ReplaceAllString(r.Output(), "")) {
		if time.Now().After(stop) {
			t.Fatal("no order was paid within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)                       // some deadlines pass, some deliveries fail
	if _, err := r.tty.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if code := r.wait(time.Minute); code != 0 {
		t.Errorf("lapse demo exited %d after Ctrl-C, want 0", code)
	}
	out := r.Output()
	summary := checkDemoReconciled(t, out)
	if !strings.Contains(summary, "stopped at Ctrl-C") {
		t.Errorf("the summary does not say that Ctrl-C stopped it:\n%s", summary)
	}
	if n := len(cursorUp.FindAllString(out, -1)); n == 0 {
		t.Error("the display was never redrawn in place")
	}
}

// TestDemoNotATerminal: with its output not a terminal, the demo prints
// plain lines, no escapes, and still ends with a clean lapse reconcile.
func TestDemoNotATerminal(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir() // where the demo makes its database
	out, errOut, code := lapseExit(t, t.TempDir(), []string{"TMPDIR=" + tmp}, "demo", "--duration", "4s")
	if code != 0 {
		t.Errorf("lapse demo exited %d, want 0:\n%s", code, errOut)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escapes in output that is not a terminal:\n%q", out)
	}
	if !regexp.MustCompile(`(?m)^demo running \d`).MatchString(out) || !regexp.MustCompile(`(?m)^demo stopped .*orders checkout [1-9]`).MatchString(out) {
		t.Errorf("no plain progress lines:\n%s", out)
	}
	checkDemoReconciled(t, out)
}

// TestDemoRefusesBadInput: a bad flag value or a database that the demo
// would not make is refused with exit 2 and a message, and changes nothing.
func TestDemoRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	existing := filepath.Join(dir, "real.db")
	if err := os.WriteFile(existing, []byte("a real service's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--rate", "-3"}, "--rate"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--db", existing}, "the file exists"},
		{[]string{"--db", "postgres://u@127.0.0.1:1/x"}, "embedded store"},
		{[]string{"--db", ""}, "-db: empty"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		_, errOut, code := lapseExit(t, dir, nil, append([]string{"demo"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.says) {
			t.Errorf("lapse demo %v: exit %d, want 2 saying %q:\n%s", c.args, code, c.says, errOut)
		}
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "a real service's data" {
		t.Errorf("the existing file was changed: %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("refused runs left files: %v", entries)
	}
	_, errOut, code := lapseExit(t, dir, nil, "demo", "-h")
	if code != 0 || !strings.Contains(errOut, "Usage: lapse demo") {
		t.Errorf("lapse demo -h: exit %d:\n%s", code, errOut)
	}
}
