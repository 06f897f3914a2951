package main_test

import (
	"bufio"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// stockOf returns what the stock ledger holds of sku.
func stockOf(t *testing.T, base, sku string) (onHand, reserved int64) {
	t.Helper()
	var st struct {
		OnHand   int64 `json:"on_hand"`
		Reserved int64 `json:"reserved"`
	}
	if code := call(t, "GET", base+"/v1/stock/"+sku, nil, &st); code != http.StatusOK {
		t.Fatalf("GET /v1/stock/%s = %d", sku, code)
	}
	return st.OnHand, st.Reserved
}

// createOrders creates n unpaid checkout orders of user, numbered
// prefix-00001 …, each holding one tea, with a deadline an hour away, from
// 8 clients at once.
func createOrders(t *testing.T, base, prefix, user string, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || t.Failed() {
					return
				}
				body := map[string]any{"order_no": fmt.Sprintf("%s-%05d", prefix, i), "flow": "checkout", "user_id": user,
					"amount": 1000, "currency": "CNY", "items": []map[string]any{{"sku": "tea", "qty": 1}}, "ttl": "1h"}
				if code := call(t, "POST", base+"/v1/orders", body, nil); code != http.StatusCreated {
					t.Errorf("POST /v1/orders %s-%05d = %d", prefix, i, code)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// closeTally is what the database holds of the closes of a user's orders.
type closeTally struct {
	unpaid, closed       int64 // orders
	closes, closedOrders int64 // transitions to CLOSED, and the orders they moved
	notByOperator        int64 // of those, fired by anything but an operator
	events               int64 // order.closed outbox rows
	auditOK              int64 // order.close audit rows that ended ok
}

func tallyCloses(t *testing.T, path, user string) closeTally {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var c closeTally
	err = db.QueryRow(`WITH mine AS (SELECT id, order_no FROM orders WHERE user_id = ?1),
		closes AS (SELECT order_id, fired_by FROM transitions WHERE to_state = 'CLOSED' AND order_id IN (SELECT id FROM mine))
		SELECT
		(SELECT count(*) FROM orders WHERE user_id = ?1 AND state = 'UNPAID'),
		(SELECT count(*) FROM orders WHERE user_id = ?1 AND state = 'CLOSED'),
		(SELECT count(*) FROM closes),
		(SELECT count(DISTINCT order_id) FROM closes),
		(SELECT count(*) FROM closes WHERE fired_by != 'operator'),
		(SELECT count(*) FROM outbox WHERE type = 'order.closed' AND order_id IN (SELECT id FROM mine)),
		(SELECT count(*) FROM audit_log WHERE action = 'order.close' AND result = 'ok' AND target IN (SELECT 'order:' || order_no FROM mine))`,
		user).Scan(&c.unpaid, &c.closed, &c.closes, &c.closedOrders, &c.notByOperator, &c.events, &c.auditOK)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCloseByUser: lapse close --user --dry-run counts and changes
// nothing; without --dry-run it closes them all, with progress, each once,
// by an operator (the OS user), and the stock they held comes back once;
// the same command again finds nothing to close, and refuses a reason with
// control characters all the same.
func TestCloseByUser(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	p := startServe(t, dir, "--delivery-poll", "100ms")
	if code := call(t, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 1000}, nil); code != http.StatusOK {
		t.Fatalf("PUT /v1/stock/tea = %d", code)
	}
	createOrders(t, p.URL, "U", "u-close", 150)
	createOrders(t, p.URL, "V", "u-other", 5)

	out, errOut, code := tool(t, dir, "", "close", "--user", "u-close", "--dry-run")
	if code != 0 || !strings.Contains(out, "150 orders to close") || !strings.Contains(out, "U-00150") || !strings.Contains(out, "dry run") {
		t.Fatalf("lapse close --dry-run = %d:\n%s%s", code, out, errOut)
	}
	if c := tallyCloses(t, db, "u-close"); c.unpaid != 150 || c.closes != 0 {
		t.Fatalf("after the dry run: %+v, want 150 orders unpaid", c)
	}
	if _, _, code := tool(t, dir, "", "close", "--user", "u-close"); code == 0 {
		t.Errorf("lapse close without --reason succeeded")
	}

	out, errOut, code = tool(t, dir, "", "close", "--user", "u-close", "--reason", "the provider's outage of 29 November")
	if code != 0 || !strings.Contains(out, "batch 1 done: 150 orders, 150 closed, 0 skipped") {
		t.Fatalf("lapse close = %d:\n%s%s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^batch 1: 1\d\d/150 \(\d\d%\): `).MatchString(errOut) || !strings.Contains(errOut, "batch 1: 150/150 (100%): 150 closed, 0 skipped, 0 failed") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
	c := tallyCloses(t, db, "u-close")
	if want := (closeTally{closed: 150, closes: 150, closedOrders: 150, events: 150, auditOK: 150}); c != want {
		t.Errorf("after lapse close: %+v, want %+v", c, want)
	}
	if o := tallyCloses(t, db, "u-other"); o.unpaid != 5 || o.closes != 0 {
		t.Errorf("the other user's orders: %+v, want untouched", o)
	}
	var o order
	call(t, "GET", p.URL+"/v1/orders/U-00007", nil, &o)
	if o.State != "CLOSED" || o.FiredBy != "operator" || o.CloseReason != "TIMEOUT" {
		t.Errorf("U-00007 after lapse close: %+v", o)
	}

	// The stock comes back once, by serve's delivery of each close.
	waitFor(t, time.Minute, func() bool {
		_, reserved := stockOf(t, p.URL, "tea")
		return reserved == 5
	})
	time.Sleep(time.Second)
	if onHand, reserved := stockOf(t, p.URL, "tea"); onHand != 1000 || reserved != 5 {
		t.Errorf("stock after the closes: on hand %d, reserved %d; want 1000 and the other user's 5", onHand, reserved)
	}

	out, _, code = tool(t, dir, "", "close", "--user", "u-close", "--reason", "again")
	if code != 0 || !strings.Contains(out, "nothing to close") {
		t.Errorf("lapse close again = %d:\n%s", code, out)
	}
	if c := tallyCloses(t, db, "u-close"); c.closes != 150 {
		t.Errorf("the second run closed again: %+v", c)
	}
	// A reason the books could not keep as given is refused, though there
	// is nothing left to close.
	if out, errOut, code := tool(t, dir, "", "close", "--user", "u-close", "--reason", "again\x1b[2J"); code != 2 ||
		!strings.Contains(errOut, "--reason: must be one line of text") {
		t.Errorf("lapse close with an escape in --reason = %d, %q %q; want it refused", code, out, errOut)
	}
	var batches struct {
		Batches []struct {
			ID        int64  `json:"id"`
			Status    string `json:"status"`
			CreatedBy string `json:"created_by"`
			Closed    int64  `json:"closed"`
		} `json:"batches"`
	}
	if code := call(t, "GET", p.URL+"/v1/closes", nil, &batches); code != http.StatusOK || len(batches.Batches) != 1 ||
		batches.Batches[0].Status != "done" || batches.Batches[0].Closed != 150 || !strings.HasPrefix(batches.Batches[0].CreatedBy, "cli:") {
		t.Errorf("GET /v1/closes = %d %+v, want the one batch done by the command line", code, batches)
	}
}

// TestCloseKilledAndResumed: a lapse close SIGKILLed part way through a
// batch of 3,000 orders leaves the batch running; the same command again
// resumes it and finishes it, every order closed exactly once and its stock
// back exactly once.
func TestCloseKilledAndResumed(t *testing.T) {
	t.Parallel()
	const n = 3000
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	p := startServe(t, dir, "--delivery-poll", "100ms")
	if code := call(t, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": n}, nil); code != http.StatusOK {
		t.Fatalf("PUT /v1/stock/tea = %d", code)
	}
	createOrders(t, p.URL, "K", "u-kill", n)
	args := []string{"close", "--user", "u-kill", "--reason", "stuck orders"}

	cmd := exec.Command(lapseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_CONFIG=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	progress := regexp.MustCompile(`^batch (\d+): (\d+)/(\d+) `)
	var lines []string
	killedAt := -1
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if m := progress.FindStringSubmatch(sc.Text()); m != nil && killedAt < 0 {
			settled, _ := strconv.Atoi(m[2])
			if total, _ := strconv.Atoi(m[3]); settled > 0 && settled < total {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				killedAt = settled
			}
		}
	}
	err = cmd.Wait()
	if killedAt < 0 {
		t.Fatalf("lapse close ended (%v) before it showed progress part way:\n%s", err, strings.Join(lines, "\n"))
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("lapse close was not killed: %v", err)
	}
	c := tallyCloses(t, db, "u-kill")
	t.Logf("killed at %d settled; the database then had %+v", killedAt, c)
	if c.closes < int64(killedAt) || c.closes >= n {
		t.Fatalf("after the kill: %+v, want part of the batch closed", c)
	}

	// Run again with another reason: the batch keeps its own, and says so.
	out, errOut, code := tool(t, dir, "", "close", "--user", "u-kill", "--reason", "still stuck")
	if code != 0 || !strings.Contains(out, `resuming batch 1`) || !strings.Contains(out, `(reason "stuck orders")`) ||
		!strings.Contains(out, `--reason "still stuck" is not used`) ||
		!strings.Contains(out, fmt.Sprintf("batch 1 done: %d orders, %d closed, 0 skipped", n, n)) {
		t.Fatalf("lapse close again = %d:\n%s%s", code, out, errOut)
	}
	c = tallyCloses(t, db, "u-kill")
	if want := (closeTally{closed: n, closes: n, closedOrders: n, events: n, auditOK: n}); c != want {
		t.Errorf("after the resumed batch: %+v, want %+v", c, want)
	}
	waitFor(t, 2*time.Minute, func() bool {
		_, reserved := stockOf(t, p.URL, "tea")
		return reserved == 0
	})
	time.Sleep(time.Second)
	if onHand, reserved := stockOf(t, p.URL, "tea"); onHand != n || reserved != 0 {
		t.Errorf("stock after the closes: on hand %d, reserved %d; want %d and 0", onHand, reserved, n)
	}
}
