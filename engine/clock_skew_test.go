package engine_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestCheckClock: a process whose clock is ahead of its database's closes
// orders before their deadline by the other processes' clocks, and one
// behind takes what they refuse; CheckClock, which lapse serve runs at
// start, refuses either past MaxClockSkew, saying which way and by how
// much, and lapse_clock_skew_seconds shows the difference at each scrape.
// The databases of the tests run on the test's machine: the system clock
// is theirs.
func TestCheckClock(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		if err := newEngine(t, s, lapse.SystemClock{}).CheckClock(ctxT(t)); err != nil {
			t.Fatalf("the machine's own clock: %v", err)
		}
		clk := lapse.NewManualClock(lapse.SystemClock{}.Now())
		reg := prometheus.NewRegistry()
		e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			by  time.Duration
			way string
		}{{10 * time.Second, "ahead of"}, {-10 * time.Second, "behind"}} {
			// Set again before each reading: the manual clock stands
			// still while the database's moves.
			off := func() { clk.Set(lapse.SystemClock{}.Now().Add(c.by)) }
			off()
			err := e.CheckClock(ctxT(t))
			if !errors.Is(err, engine.ErrClockSkew) || !strings.Contains(lapse.ErrorMessage(err), c.way+" the database's") {
				t.Errorf("clock %v off: %v, want ErrClockSkew saying %q", c.by, err, c.way)
			}
			off()
			sk, err := e.ClockSkew(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if d := sk.Offset - c.by; d > time.Second || d < -5*time.Second {
				t.Errorf("clock %v off: ClockSkew offset %v", c.by, sk.Offset)
			}
			off()
			got := series(t, reg, "lapse_clock_skew_seconds")[""]
			if math.IsNaN(got) || math.Abs(got-c.by.Seconds()) > 5 {
				t.Errorf("clock %v off: lapse_clock_skew_seconds %v", c.by, got)
			}
		}
	})
}
