package main_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/testenv"
)

// TestNATSRelay runs lapse serve on PostgreSQL with --nats-relay, takes
// NATS away for a few seconds while orders close, and checks that every
// event reached the stream once (by message id), that the events published
// while NATS was there got no delivery row and read as relayed and done
// through the API, and that those published during the outage went
// through delivery rows with their failed attempts, all done in the end.
func TestNATSRelay(t *testing.T) {
	t.Parallel()
	natsURL := testenv.Require(t, testenv.EnvNATS, "NATS")
	dsn := testenv.PostgresSchema(t)
	js, stream, subject := natsTestStream(t, natsURL, "relay")
	proxy := proxyFor(t, natsURL)
	p := startServe(t, t.TempDir(), "--db", dsn, "--delivery-poll", "100ms",
		"--nats", viaProxy(t, natsURL, proxy.Addr()), "--nats-stream", stream, "--nats-subject", subject,
		"--nats-retry", "exp:200ms,1s,100000", "--nats-relay")

	send := func(prefix string, n int) {
		for i := range n {
			body := map[string]any{"order_no": fmt.Sprintf("%s-%03d", prefix, i), "flow": "checkout", "user_id": "u1",
				"amount": 100, "currency": "CNY", "ttl": "300ms"}
			if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
				t.Fatalf("POST = %d", code)
			}
		}
	}
	db := serverDB(t, dsn)
	q := func(query string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	send("NR-UP", 30)
	waitFor(t, time.Minute, func() bool {
		return q(`SELECT count(*) FROM orders WHERE order_no LIKE 'NR-UP-%' AND state = 'CLOSED'`) == 30 &&
			q(`SELECT count(*) FROM relay_cursors WHERE subscriber = 'nats' AND lo::text = hi::text AND relayed >= 60`) == 1
	})
	proxy.Down()
	send("NR-DOWN", 30)
	time.Sleep(2 * time.Second)
	proxy.Up()
	waitFor(t, 2*time.Minute, func() bool {
		return q(`SELECT count(*) FROM orders WHERE state <> 'CLOSED'`) == 0 &&
			q(`SELECT count(*) FROM deliveries WHERE status = 'pending'`) == 0 &&
			q(`SELECT count(*) FROM outbox`) == 120 && q(`SELECT count(*) FROM relay_cursors WHERE lo::text = hi::text`) == 1
	})
	if dead := q(`SELECT count(*) FROM deliveries WHERE status = 'dead'`); dead != 0 {
		t.Errorf("%d deliveries died", dead)
	}
	if n := q(`SELECT count(*) FROM deliveries d JOIN orders o ON o.id = d.order_id WHERE o.order_no LIKE 'NR-UP-%'`); n != 0 {
		t.Errorf("the orders closed while NATS was up have %d delivery rows, want none", n)
	}
	failed := q(`SELECT count(*) FROM delivery_attempts WHERE outcome <> 'ok'`)
	rows := q(`SELECT count(*) FROM deliveries`)
	if failed == 0 || rows == 0 {
		t.Errorf("%d delivery rows and %d failed attempts: the outage did not reach the relay", rows, failed)
	}
	t.Logf("%d events, %d delivery rows, %d failed attempts", q(`SELECT count(*) FROM outbox`), rows, failed)

	var got struct {
		Deliveries []struct {
			ID        int64  `json:"id"`
			Relayed   bool   `json:"relayed"`
			EventType string `json:"event_type"`
			Status    string `json:"status"`
		} `json:"deliveries"`
	}
	if code := call(t, "GET", p.URL+"/v1/orders/NR-UP-000/deliveries", nil, &got); code != 200 {
		t.Fatalf("GET deliveries = %d", code)
	}
	if len(got.Deliveries) != 2 {
		t.Fatalf("NR-UP-000's deliveries: %+v, want its two events relayed", got.Deliveries)
	}
	for _, d := range got.Deliveries {
		if !d.Relayed || d.ID != 0 || d.Status != "done" {
			t.Errorf("NR-UP-000's delivery of %s: %+v, want relayed and done", d.EventType, d)
		}
	}

	seen := map[string]int{}
	for _, id := range readStreamIDs(t, js, stream) {
		seen[id]++
	}
	r, err := db.Query(`SELECT id::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	events := 0
	for r.Next() {
		var id string
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		events++
		if seen[id] != 1 {
			t.Errorf("NATS has event %s %d times, want once", id, seen[id])
		}
	}
	if len(seen) != events {
		t.Errorf("NATS has %d distinct ids, want %d", len(seen), events)
	}
}
