package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/testenv"
)

// TestNATSWindowCoversRetries: the JetStream stream drops the copy of a
// retry whose first PubAck was lost only within its duplicate window, so a
// --nats-retry that waits longer than the default window (2 h) gets a
// stream whose window covers its longest wait, and a reload to a schedule
// that waits longer than the window set at start is refused.
func TestNATSWindowCoversRetries(t *testing.T) {
	url := testenv.Require(t, testenv.EnvNATS, "NATS")
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, subject := "LAPSE_WINDOW_"+strings.ToUpper(suffix), "lapse_window_"+suffix
	defer func() { _ = js.DeleteStream(context.Background(), stream) }()
	f := &subscriberFlags{natsURL: url, natsStream: stream, natsSubject: subject, natsEvents: "order.closed",
		natsRetry: "1m,3h", portConnect: time.Second, portRead: time.Second}
	subs, done, err := f.subscriptions(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	st, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	longest := 3 * time.Hour * 11 / 10 // 10 % jitter
	if got := st.CachedInfo().Config.Duplicates; got <= longest+subs[0].Timeout {
		t.Errorf("with --nats-retry 1m,3h the stream deduplicates over %s; a retry may come %s after the copy stored", got, longest+subs[0].Timeout)
	}

	eng := &windowEngine{subs: []*engine.Subscription{&subs[0]}}
	p := &process{engine: eng, natsWindow: f.natsWindow}
	if err := reloadNATSSchedule(p, "1m,4h"); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("a reload to 1m,4h past the window of %s: %v, want it refused", f.natsWindow, err)
	}
	if eng.set != nil {
		t.Errorf("the refused schedule was put into force: %+v", eng.set)
	}
	if err := reloadNATSSchedule(p, "1m,2h"); err != nil || eng.set == nil || eng.set.Steps[1] != 2*time.Hour {
		t.Errorf("a reload to 1m,2h within the window: %v, schedule %+v", err, eng.set)
	}
}

// windowEngine is the part of the engine that reloadNATSSchedule uses.
type windowEngine struct {
	subs []*engine.Subscription
	set  *lapse.Schedule
}

func (e *windowEngine) SetTriggerMode(engine.TriggerMode) error { return nil }
func (e *windowEngine) Subscriptions() []*engine.Subscription   { return e.subs }
func (e *windowEngine) SetSchedule(_ string, sch lapse.Schedule) error {
	e.set = &sch
	return nil
}
