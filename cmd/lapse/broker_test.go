package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/faultproxy"
	"github.com/lapsehq/lapse/internal/testenv"
)

// TestBrokerOutage runs traffic through `lapse serve` publishing to NATS
// JetStream and RabbitMQ, takes both brokers away for OutageLength (a minute
// in CI) in the middle, and checks afterwards that every event arrived: once
// per message id on NATS (the broker deduplicates), at least once and exactly
// once per message id after deduplication on RabbitMQ.
func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	natsURL := testenv.Require(t, testenv.EnvNATS, "NATS")
	rabbitURL := testenv.Require(t, testenv.EnvRabbitMQ, "RabbitMQ")
	js, stream, subject := natsTestStream(t, natsURL, "e2e")
	suffix := randomSuffix()
	exchange, queue := "lapse.e2e."+suffix, "lapse.e2e."+suffix

	conn, err := amqp.Dial(rabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.ExchangeDelete(exchange, false, false)
		}
		conn.Close()
	})

	natsProxy := proxyFor(t, natsURL)
	rabbitProxy := proxyFor(t, rabbitURL)
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	p := startServe(t, dir, "--db", db, "--delivery-poll", "100ms",
		"--nats", viaProxy(t, natsURL, natsProxy.Addr()), "--nats-stream", stream, "--nats-subject", subject, "--nats-retry", "exp:200ms,2s,100000",
		"--rabbitmq", viaProxy(t, rabbitURL, rabbitProxy.Addr()), "--rabbitmq-exchange", exchange, "--rabbitmq-queue", queue,
		"--rabbitmq-retry", "exp:200ms,2s,100000")

	// Traffic: an order every 50 ms that closes 300 ms later.
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			body := map[string]any{"order_no": fmt.Sprintf("BO-%05d", i), "flow": "checkout", "user_id": "u1",
				"amount": 100, "currency": "CNY", "ttl": "300ms"}
			if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
				t.Errorf("POST = %d", code)
				return
			}
			sent.Add(1)
		}
	})
	time.Sleep(3 * time.Second)
	outage := faultproxy.OutageLength()
	natsProxy.Down()
	rabbitProxy.Down()
	t.Logf("brokers down for %v with %d orders sent", outage, sent.Load())
	time.Sleep(outage)
	natsProxy.Up()
	rabbitProxy.Up()
	t.Logf("brokers back with %d orders sent", sent.Load())
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	q := sqliteQuery(t, db)
	waitFor(t, 2*time.Minute, func() bool {
		return q("SELECT count(*) FROM orders WHERE state != 'CLOSED'") == 0 &&
			q("SELECT count(*) FROM deliveries WHERE status = 'pending'") == 0
	})
	if dead := q("SELECT count(*) FROM deliveries WHERE status = 'dead'"); dead != 0 {
		t.Errorf("%d deliveries died", dead)
	}
	events := sqliteStrings(t, db, "SELECT id FROM outbox ORDER BY seq")
	if want := 2 * sent.Load(); int64(len(events)) != want {
		t.Errorf("%d events in the outbox, want %d (created and closed)", len(events), want)
	}
	failedDuringOutage := q("SELECT count(*) FROM delivery_attempts WHERE outcome != 'ok'")
	t.Logf("%d orders, %d events, %d failed attempts", sent.Load(), len(events), failedDuringOutage)
	if failedDuringOutage == 0 {
		t.Error("no attempt failed: the outage did not reach Lapse")
	}

	// NATS: exactly once per message id.
	seen := map[string]int{}
	for _, id := range readStreamIDs(t, js, stream) {
		seen[id]++
	}
	for _, id := range events {
		if seen[id] != 1 {
			t.Errorf("NATS has event %s %d times, want once", id, seen[id])
		}
	}
	if len(seen) != len(events) {
		t.Errorf("NATS has %d distinct ids, want %d", len(seen), len(events))
	}

	// RabbitMQ: at least once, exactly once per message id after dedup.
	got := map[string]int{}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got[m.MessageId]++
	}
	dups := 0
	for _, id := range events {
		if got[id] == 0 {
			t.Errorf("RabbitMQ never received event %s", id)
		}
		dups += max(0, got[id]-1)
	}
	if len(got) != len(events) {
		t.Errorf("RabbitMQ has %d distinct ids, want %d", len(got), len(events))
	}
	t.Logf("RabbitMQ delivered %d redundant copies (consumers drop them by message id)", dups)
}

func proxyFor(t *testing.T, rawURL string) *faultproxy.Proxy {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func viaProxy(t *testing.T, rawURL, addr string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// natsTestStream connects to the NATS server at url and names a stream and
// subject of the test's own (prefix and a random suffix), which it deletes
// when t ends; it returns a JetStream handle to read it.
func natsTestStream(t *testing.T, url, prefix string) (js jetstream.JetStream, stream, subject string) {
	t.Helper()
	suffix := randomSuffix()
	stream, subject = "LAPSE_"+strings.ToUpper(prefix+"_"+suffix), "lapse_"+prefix+"_"+suffix
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	if js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
		nc.Close()
	})
	return js, stream, subject
}

func randomSuffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// readStreamIDs returns the Nats-Msg-Id of every message in stream.
func readStreamIDs(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for uint64(len(ids)) < info.State.Msgs {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
			n++
		}
		if n == 0 {
			t.Fatalf("read %d of %d messages from %s", len(ids), info.State.Msgs, stream)
		}
	}
	return ids
}

// sqliteStrings runs a query of one text column.
func sqliteStrings(t *testing.T, path, query string) []string {
	t.Helper()
	db := openSQLiteRO(t, path)
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}
