package nats_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestStreamLostWhileRunning: the stream deleted, or its subjects changed
// so that it no longer captures the sink's, while the sink runs: a publish
// fails (the event waits in the outbox), and the sink sets the stream up
// again (its subjects widened back to the sink's, an operator's kept), so
// that a retry is stored, by Deliver and by DeliverMany alike.
func TestStreamLostWhileRunning(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	s := newSink(t, cfg)
	ctx := t.Context()
	n := 0
	next := func() *lapse.Delivery { n++; return delivery("order.closed", n) }
	if err := s.Deliver(ctx, next()); err != nil {
		t.Fatal(err)
	}
	for _, lose := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"deleted", func(ctx context.Context) error { return js.DeleteStream(ctx, cfg.Stream) }},
		{"subjects changed", func(ctx context.Context) error {
			st, err := js.Stream(ctx, cfg.Stream)
			if err != nil {
				return err
			}
			sc := st.CachedInfo().Config
			sc.Subjects = []string{cfg.Subject + "_elsewhere.>"}
			_, err = js.UpdateStream(ctx, sc)
			return err
		}},
	} {
		for _, many := range []bool{false, true} {
			if err := lose.do(ctx); err != nil {
				t.Fatalf("%s: %v", lose.name, err)
			}
			deliver := func(d *lapse.Delivery) error {
				if many {
					return s.DeliverMany(ctx, []*lapse.Delivery{d})[0]
				}
				return s.Deliver(ctx, d)
			}
			d := next()
			first := deliver(d)
			deadline := time.Now().Add(10 * time.Second)
			err := first
			for err != nil && time.Now().Before(deadline) {
				err = deliver(d)
			}
			if err != nil {
				t.Fatalf("stream %s (DeliverMany %v): the retries of an event still fail: %v (first: %v)", lose.name, many, err, first)
			}
			st, err := js.Stream(ctx, cfg.Stream)
			if err != nil {
				t.Fatalf("stream %s: %v", lose.name, err)
			}
			if subj := st.CachedInfo().Config.Subjects; !slices.Contains(subj, cfg.Subject+".>") {
				t.Errorf("stream %s (DeliverMany %v): subjects %v after the retry, want %s.> among them", lose.name, many, subj, cfg.Subject)
			}
			if _, err := st.GetLastMsgForSubject(ctx, cfg.Subject+".order.closed"); err != nil {
				t.Errorf("stream %s (DeliverMany %v): the event is not in the stream: %v", lose.name, many, err)
			}
		}
	}
}
