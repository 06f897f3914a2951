package closes_test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

// TestRunKilled runs a batch in a child process, kills it (SIGKILL) part
// way, and runs the batch again here: every order is closed once, its
// stock given back once, and the counts are right.
func TestRunKilled(t *testing.T) {
	if path := os.Getenv("LAPSE_CLOSES_CHILD"); path != "" {
		runChild(t, path)
		return
	}
	if testing.Short() {
		t.Skip("starts a process")
	}
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	nos := v.orders("Z", "u1", 300)
	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "provider outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^TestRunKilled$", "-test.count=1")
	child.Env = append(os.Environ(), "LAPSE_CLOSES_CHILD="+v.path, "LAPSE_CLOSES_BATCH="+strconv.FormatInt(b.ID, 10))
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once it has closed some, and before it has closed them all.
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := v.s.CloseItemCount(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n[lapse.CloseItemClosed] >= 20 {
			break
		}
		if time.Now().After(deadline) {
			child.Process.Kill()
			t.Fatalf("the child closed %d in a minute", n[lapse.CloseItemClosed])
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	n, _ := v.s.CloseItemCount(ctx, b.ID)
	if n[lapse.CloseItemPending] == 0 {
		t.Logf("the child finished before it was killed: %v", n)
	}

	w := v.reopen()
	done, err := w.c.Run(ctx, b.ID, cli, nil)
	if want := "done total 300 closed 300 skipped 0 failed 0 finished"; err != nil || counts(done) != want {
		t.Fatalf("Run after the kill = %s, %v; want %s", counts(done), err, want)
	}
	w.drain()
	rows := w.closeRows(b.ID)
	for _, no := range nos {
		o, _ := w.e.Order(ctx, no)
		trs, _ := w.e.Transitions(ctx, no)
		if o.State != "CLOSED" || len(trs) != 2 || w.moves(o, lapse.StockRelease) != 1 {
			t.Errorf("%s = %s with %d transitions, %d releases", no, o.State, len(trs), w.moves(o, lapse.StockRelease))
		}
		if rs := rows["order:"+no]; len(rs) != 1 || rs[0].Result != "ok" {
			t.Errorf("audit rows of %s = %+v, want one ok", no, rs)
		}
	}
	if got := w.reserved(); got != 0 {
		t.Errorf("reserved %d, want 0", got)
	}
	w.verifyAudit()
}

// runChild runs the batch until it is killed.
func runChild(t *testing.T, path string) {
	id, err := strconv.ParseInt(os.Getenv("LAPSE_CLOSES_BATCH"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	v := openEnv(t, path, lapse.NewManualClock(t0))
	if _, err := v.c.Run(ctxT(t), id, alice, nil); err != nil {
		t.Fatal(err)
	}
}
