package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSIGHUPSaysFlowsChanged: a SIGHUP reloads the config file's switches,
// never the flows; one sent after a flow file was changed says that a
// restart runs it, once for each change, and nothing while the files are as
// the start loaded them.
func TestSIGHUPSaysFlowsChanged(t *testing.T) {
	w, _, _, logs, _ := startWatcher(t, "batch: 100\n", nil)
	dir := t.TempDir()
	flow := filepath.Join(dir, "shop.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(flow, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("name: shop\n")
	w.WatchFlows(dir, flowsDigest(dir))
	said := func() int { return strings.Count(logs.String(), "the flow files changed since lapse serve started") }
	hup := func(want int) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		ch, done := make(chan os.Signal), make(chan struct{})
		go func() {
			defer close(done)
			w.run(ctx, ch)
		}()
		ch <- syscall.SIGHUP // taken when run receives it; run handles it before it looks at ctx again
		cancel()
		<-done
		if got := said(); got != want {
			t.Fatalf("after a SIGHUP the change of the flows is said %d times; want %d:\n%s", got, want, logs.String())
		}
	}
	hup(0)
	write("name: shop\ninitial: A\n")
	hup(1)
	hup(1) // the same change again: said once
	write("name: shop\n")
	hup(1) // back as loaded: nothing to say
	if err := os.WriteFile(filepath.Join(dir, "more.yml"), []byte("name: more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup(2) // a file added
}
