package engine_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestUnservedWarned: a subscriber taken out of the configuration while
// deliveries to it were pending leaves them pending, with nothing to
// deliver or end them; a Deliverer that starts without it says so in the
// log, naming it and how many wait, and Unserved lists it. One that has it
// says nothing.
func TestUnservedWarned(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		ctx := ctxT(t)
		hook := []engine.Subscription{{Name: "hook", Events: []string{lapse.EventOrderCreated}, Handler: &recorder{}}}
		start := func(subs []engine.Subscription) (*engine.Engine, string) {
			t.Helper()
			var log bytes.Buffer
			e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk, Subscriptions: subs,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			d := engine.NewDeliverer(e, engine.DelivererConfig{})
			d.Start(ctx)
			d.Stop() // waits for the check

			return e, log.String()
		}
		with, _ := start(hook)
		for _, no := range []string{"UW-1", "UW-2"} {
			create(t, with, checkout(no, time.Hour))
		}

		without, log := start(nil)
		if !strings.Contains(log, "not configured here") || !strings.Contains(log, "subscriber=hook pending=2") {
			t.Errorf("a Deliverer without hook did not warn of its 2 pending deliveries:\n%s", log)
		}
		got, err := without.Unserved(ctx)
		if err != nil || len(got) != 1 || got[0].Subscriber != "hook" || got[0].N != 2 {
			t.Errorf("Unserved = %+v, %v; want hook's 2", got, err)
		}
		if _, log := start(hook); strings.Contains(log, "not configured here") {
			t.Errorf("a Deliverer with hook warned:\n%s", log)
		}
	})
}
