package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/nats"
)

// testConfig returns a sink config with a stream and subject prefix of its
// own, and a JetStream handle on the real server (not through any proxy)
// to inspect them; the stream is deleted when tb ends.
func testConfig(tb testing.TB) (nats.Config, jetstream.JetStream) {
	tb.Helper()
	addr := testenv.Require(tb, testenv.EnvNATS, "NATS")
	nc, err := natsgo.Connect(addr)
	if err != nil {
		tb.Fatalf("connect to %s: %v", testenv.EnvNATS, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	suffix := randomHex(6)
	cfg := nats.Config{
		URL:            addr,
		Stream:         "LAPSE_TEST_" + strings.ToUpper(suffix),
		Subject:        "lapsetest_" + suffix,
		PublishTimeout: 2 * time.Second,
		Logger:         slog.New(slog.DiscardHandler),
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			tb.Errorf("delete stream %s: %v", cfg.Stream, err)
		}
		nc.Close()
	})
	return cfg, js
}

// viaProxy returns u with its host replaced by addr.
func viaProxy(tb testing.TB, u, addr string) string {
	tb.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		tb.Fatalf("parse %s: %v", u, err)
	}
	pu.Host = addr
	return pu.String()
}

func newSink(tb testing.TB, cfg nats.Config) *nats.Sink {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := nats.New(ctx, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// delivery returns a delivery of a fresh event of type typ.
func delivery(typ string, n int) *lapse.Delivery {
	id := lapse.NewEventID(time.Now())
	orderNo := fmt.Sprintf("T-%d", n)
	payload, _ := json.Marshal(map[string]any{"id": id, "type": typ, "order": map[string]any{"order_no": orderNo}})
	return &lapse.Delivery{
		ID: int64(n), EventID: id, EventType: typ, OrderNo: orderNo, Subscriber: "nats",
		Event: &lapse.OutboxEvent{ID: id, OrderNo: orderNo, Type: typ, Payload: payload},
	}
}

// readStream reads every message of the stream with a consumer, as a
// subscriber would.
func readStream(tb testing.TB, js jetstream.JetStream, stream string) []jetstream.Msg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	want := int(st.CachedInfo().State.Msgs)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatalf("consumer: %v", err)
	}
	var got []jetstream.Msg
	for len(got) < want {
		batch, err := cons.Fetch(want-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			tb.Fatalf("fetch: %v", err)
		}
		n := len(got)
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if batch.Error() != nil || len(got) == n {
			tb.Fatalf("read %d of %d messages: %v", len(got), want, batch.Error())
		}
	}
	return got
}

// streamCount returns how many messages the stream holds.
func streamCount(tb testing.TB, js jetstream.JetStream, stream string) int {
	tb.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	return int(st.CachedInfo().State.Msgs)
}

func TestDeliverPublishesEvents(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	s := newSink(t, cfg)
	ctx := context.Background()
	sent := map[string]*lapse.Delivery{}
	for i, typ := range []string{"order.created", "order.closed", "order.paid", "delivery.dead"} {
		d := delivery(typ, i)
		if err := s.Deliver(ctx, d); err != nil {
			t.Fatalf("Deliver %s: %v", typ, err)
		}
		sent[d.Event.ID] = d
	}

	msgs := readStream(t, js, cfg.Stream)
	if len(msgs) != len(sent) {
		t.Fatalf("%d messages in the stream, want %d", len(msgs), len(sent))
	}
	for _, m := range msgs {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		d, ok := sent[id]
		if !ok {
			t.Fatalf("message with unknown id %q", id)
		}
		ev := d.Event
		if want := cfg.Subject + "." + ev.Type; m.Subject() != want {
			t.Errorf("subject = %q, want %q", m.Subject(), want)
		}
		if got := m.Headers().Get(nats.HeaderEventID); got != ev.ID {
			t.Errorf("%s = %q, want %q", nats.HeaderEventID, got, ev.ID)
		}
		if got := m.Headers().Get(nats.HeaderEventType); got != ev.Type {
			t.Errorf("%s = %q, want %q", nats.HeaderEventType, got, ev.Type)
		}
		if got := m.Headers().Get(nats.HeaderOrderNo); got != ev.OrderNo {
			t.Errorf("%s = %q, want %q", nats.HeaderOrderNo, got, ev.OrderNo)
		}
		if string(m.Data()) != string(ev.Payload) {
			t.Errorf("payload = %s, want %s", m.Data(), ev.Payload)
		}
	}
}

func TestDeliverTwiceStoresOnce(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	s := newSink(t, cfg)
	d := delivery("order.closed", 1)
	for range 2 {
		if err := s.Deliver(context.Background(), d); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	if n := streamCount(t, js, cfg.Stream); n != 1 {
		t.Fatalf("%d messages after delivering one event twice, want 1 (the stream deduplicates on Nats-Msg-Id)", n)
	}
}

func TestDeliverRefusesWhatCannotBePublished(t *testing.T) {
	t.Parallel()
	cfg, _ := testConfig(t)
	s := newSink(t, cfg)
	bad := map[string]*lapse.Delivery{
		"no event":      {ID: 1},
		"wildcard type": delivery("order.*", 2),
		"empty token":   delivery("order..closed", 3),
		"space in type": delivery("order closed", 4),
	}
	for name, d := range bad {
		if err := s.Deliver(context.Background(), d); !errors.Is(err, lapse.ErrRefused) {
			t.Errorf("%s: Deliver = %v, want lapse.ErrRefused", name, err)
		}
	}
	// An event larger than the server takes (its max_payload) never will
	// be taken: retried, it would hold its order's later events back for
	// the whole schedule before it dies.
	huge := func(n int) *lapse.Delivery {
		d := delivery("order.closed", n)
		d.Event.Payload = []byte(`{"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
		return d
	}
	if err := s.Deliver(context.Background(), huge(5)); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("an event of 2 MiB: Deliver = %v, want lapse.ErrRefused", err)
	}
	ok := delivery("order.closed", 7)
	errs := s.DeliverMany(context.Background(), []*lapse.Delivery{huge(6), ok})
	if len(errs) != 2 || !errors.Is(errs[0], lapse.ErrRefused) || errs[1] != nil {
		t.Errorf("an event of 2 MiB beside one that fits: DeliverMany = %v, want the first refused and the second delivered", errs)
	}

	// Nor one larger than the stream takes (MaxMsgSize, an operator's).
	cfg, js := testConfig(t)
	err := nats.CreateStream(context.Background(), js, jetstream.StreamConfig{
		Name: cfg.Stream, Subjects: []string{cfg.Subject + ".>"}, Storage: jetstream.FileStorage, MaxMsgSize: 1 << 10,
	})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	s = newSink(t, cfg)
	d := delivery("order.closed", 8)
	d.Event.Payload = []byte(`{"pad":"` + strings.Repeat("x", 2<<10) + `"}`)
	if err := s.Deliver(context.Background(), d); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("an event of 2 KiB to a stream of messages up to 1 KiB: Deliver = %v, want lapse.ErrRefused", err)
	}
}

func TestNewKeepsOperatorSettings(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	ctx := context.Background()
	err := nats.CreateStream(ctx, js, jetstream.StreamConfig{
		Name: cfg.Stream, Subjects: []string{"elsewhere_" + randomHex(4) + ".>"},
		Storage: jetstream.FileStorage, Duplicates: time.Minute, MaxAge: 48 * time.Hour,
	})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	cfg.DuplicateWindow = 90 * time.Minute
	newSink(t, cfg)

	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	sc := st.CachedInfo().Config
	if sc.Duplicates != cfg.DuplicateWindow || sc.MaxAge != 48*time.Hour || len(sc.Subjects) != 2 || sc.Subjects[1] != cfg.Subject+".>" {
		t.Fatalf("stream after New: duplicates %v, max age %v, subjects %v; want %v, 48h and the sink's subjects added",
			sc.Duplicates, sc.MaxAge, sc.Subjects, cfg.DuplicateWindow)
	}
}

// TestNewKeepsAWiderWindow: a stream that already drops duplicates over a
// longer window than the sink's (an operator's choice, or another process
// whose retry schedule waits longer: nats.WindowFor) keeps it, so that a
// process starting with a shorter one does not cut the dedup of the others'
// retries short.
func TestNewKeepsAWiderWindow(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	ctx := context.Background()
	err := nats.CreateStream(ctx, js, jetstream.StreamConfig{
		Name: cfg.Stream, Subjects: []string{cfg.Subject + ".>"}, Storage: jetstream.FileStorage, Duplicates: 4 * time.Hour,
	})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	cfg.DuplicateWindow = 2 * time.Hour
	newSink(t, cfg)
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if got := st.CachedInfo().Config.Duplicates; got != 4*time.Hour {
		t.Errorf("a stream with a window of 4h, after New with 2h: %v, want 4h", got)
	}
}

func TestNewRefusesMemoryStream(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	err := nats.CreateStream(context.Background(), js, jetstream.StreamConfig{
		Name: cfg.Stream, Subjects: []string{cfg.Subject + ".>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if s, err := nats.New(context.Background(), cfg); err == nil {
		_ = s.Close()
		t.Fatalf("New accepted a stream in memory storage")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]nats.Config{
		"no URL":          {},
		"dotted stream":   {URL: "nats://127.0.0.1:1", Stream: "A.B"},
		"wildcard prefix": {URL: "nats://127.0.0.1:1", Subject: "lapse.*"},
		"negative window": {URL: "nats://127.0.0.1:1", DuplicateWindow: -time.Second},
	} {
		if s, err := nats.New(context.Background(), cfg); err == nil {
			_ = s.Close()
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}
