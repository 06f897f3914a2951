package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresFailover runs lapse serve on a pg_auto_failover formation (a
// monitor, a primary and a synchronous standby) through a multi-host DSN
// with target_session_attrs=read-write, under traffic: orders created with
// a 2 s ttl, a third of them paid through the sandbox gateway at once. The
// primary dies (SIGKILL of its keeper and postmaster), the monitor promotes
// the standby, and traffic goes on. Afterwards, on the new primary: every
// create and payment that Lapse acknowledged (2xx, and for a payment no
// callback_error) is there; every order is PAID or CLOSED, and each CLOSED
// one closed exactly once, with one order.closed event; none both. It logs
// the failover time, the outage of writes as the clients saw it, and the
// longest gap in closing (a stretch with orders due and none closed).
func TestPostgresFailover(t *testing.T) {
	t.Parallel()
	c := newPGAFCluster(t)
	primary := c.addNode("node1")
	waitFor(t, 90*time.Second, func() bool {
		st := c.states()["node1"]
		return st == "single/single"
	})
	standby := c.addNode("node2")
	for stop := time.Now().Add(120 * time.Second); ; {
		st := c.states()
		if st["node1"] == "primary/primary" && st["node2"] == "secondary/secondary" {
			break
		}
		if time.Now().After(stop) {
			t.Fatalf("the formation did not reach primary + secondary within 2 minutes: %v", st)
		}
		c.checkpoint(primary) // so that the standby's base backup need not wait for a spread one
		time.Sleep(time.Second)
	}
	ctx := context.Background()
	pconn, err := pgx.Connect(ctx, c.nodeDSN(primary))
	if err != nil {
		t.Fatal(err)
	}
	var syncNames, syncState string
	if err := pconn.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'),
		coalesce((SELECT string_agg(sync_state, ',') FROM pg_stat_replication), '')`).Scan(&syncNames, &syncState); err != nil {
		t.Fatal(err)
	}
	pconn.Close(ctx)
	if syncState != "sync" && syncState != "quorum" {
		t.Fatalf("the standby replicates %q (synchronous_standby_names %q): acknowledged would not mean kept", syncState, syncNames)
	}
	t.Logf("formation up: primary %d, standby %d, synchronous_standby_names %q (%s)", primary.port, standby.port, syncNames, syncState)

	// The standby first: Lapse must pass it over for the primary now, and
	// will find it first once it is the primary.
	dsn := c.DSN(standby, primary)
	p := startServe(t, t.TempDir(), "--db", dsn, "--sandbox", "--sandbox-secret", "failover-secret",
		"--delivery-poll", "200ms", "--stock-ledger=false", "--coupon-ledger=false")

	// Traffic, until stopped: every request's outcome is kept with its time.
	type outcome struct {
		no       string
		pay      bool
		at       time.Time
		ok       bool
		code     int       // the HTTP status, 0 for no answer
		deadline time.Time // of an acknowledged create
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		seq      atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	record := func(o outcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				i := seq.Add(1)
				no := fmt.Sprintf("HA-%05d", i)
				var o order
				code, _ := post(p.URL+"/v1/orders", map[string]any{"order_no": no, "flow": "checkout", "user_id": "u",
					"amount": 700, "currency": "EUR", "ttl": "2s"}, &o)
				created := outcome{no: no, at: time.Now(), code: code, ok: code == 201 && o.DeadlineAt != nil}
				if created.ok {
					created.deadline = *o.DeadlineAt
				}
				record(created)
				if created.ok && i%3 == 0 {
					var paid struct {
						TxnID         string `json:"txn_id"`
						CallbackError string `json:"callback_error"`
					}
					code, _ := post(p.URL+"/sandbox/pay", map[string]any{"order_no": no, "amount": 700, "currency": "EUR"}, &paid)
					record(outcome{no: no, pay: true, at: time.Now(), code: code, ok: code == 200 && paid.TxnID != "" && paid.CallbackError == ""})
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	acked := func(after time.Time, pay bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			if o.ok && o.pay == pay && o.at.After(after) {
				n++
			}
		}
		return n
	}

	time.Sleep(5 * time.Second)
	if st := c.states(); st["node1"] != "primary/primary" || st["node2"] != "secondary/secondary" {
		t.Fatalf("the formation changed before the kill (a machine too loaded for the monitor's timeouts?): %v", st)
	}
	c.kill(primary)
	killedAt := time.Now()
	t.Logf("SIGKILLed the primary after %d acknowledged creates and %d payments (%d creates in its last 200 ms)",
		acked(time.Time{}, false), acked(time.Time{}, true), acked(killedAt.Add(-200*time.Millisecond), false))
	var promotedAt time.Time
	waitFor(t, 90*time.Second, func() bool {
		st := c.states()["node2"]
		if st == "wait_primary/wait_primary" || st == "primary/primary" {
			promotedAt = time.Now()
			return true
		}
		return false
	})
	waitFor(t, 60*time.Second, func() bool { return acked(promotedAt, false) > 0 })
	time.Sleep(6 * time.Second) // traffic on the new primary, and orders due through the failover close
	stop.Store(true)
	wg.Wait()

	// Every order comes to rest: PAID or CLOSED.
	db := serverDB(t, dsn)
	var open int
	waitFor(t, 60*time.Second, func() bool {
		return db.QueryRow(`SELECT count(*) FROM orders WHERE state NOT IN ('PAID', 'CLOSED')`).Scan(&open) == nil && open == 0
	})
	time.Sleep(500 * time.Millisecond) // a second close (there must be none) would show itself

	mu.Lock()
	defer mu.Unlock()
	var creates, pays []string
	deadlines := map[string]time.Time{}
	var paysAfter int
	refused := map[int]int{} // by status
	// The outage of writes as the clients saw it: the longest stretch
	// without an acknowledged create.
	var outage time.Duration
	var last, outageAt time.Time
	for _, o := range outcomes {
		switch {
		case !o.ok:
			refused[o.code]++
			if !o.pay && o.code != 503 {
				// The store's contract: a database out of reach is
				// unavailable, not an internal error or no answer.
				t.Errorf("create %s answered %d during the failover, want 201 or 503", o.no, o.code)
			}
		case o.pay:
			pays = append(pays, o.no)
			if o.at.After(promotedAt) {
				paysAfter++
			}
		default:
			creates = append(creates, o.no)
			deadlines[o.no] = o.deadline
			if !last.IsZero() && o.at.Sub(last) > outage {
				outage, outageAt = o.at.Sub(last), last
			}
			last = o.at
		}
	}
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(query, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM orders WHERE order_no = ANY($1)`, creates); n != len(creates) {
		t.Errorf("%d of %d acknowledged creates are on the new primary", n, len(creates))
	}
	if n := count(`SELECT count(DISTINCT o.order_no) FROM orders o JOIN payments p ON p.order_id = o.id
		WHERE o.order_no = ANY($1) AND p.status = 'applied' AND o.state = 'PAID'`, pays); n != len(pays) {
		t.Errorf("%d of %d acknowledged payments are applied to their PAID order on the new primary", n, len(pays))
	}
	if n := count(`SELECT count(*) FROM orders o WHERE
		(SELECT count(*) FROM transitions tr WHERE tr.order_id = o.id AND tr.to_state = 'CLOSED') <> (CASE WHEN o.state = 'CLOSED' THEN 1 ELSE 0 END)
		OR (SELECT count(*) FROM outbox e WHERE e.order_id = o.id AND e.type = 'order.closed') <> (CASE WHEN o.state = 'CLOSED' THEN 1 ELSE 0 END)
		OR (SELECT count(*) FROM transitions tr WHERE tr.order_id = o.id AND tr.to_state = 'PAID') <> (CASE WHEN o.state = 'PAID' THEN 1 ELSE 0 END)`); n != 0 {
		t.Errorf("%d orders did not close exactly once with one order.closed event, or were paid other than once", n)
	}
	if n := count(`SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id WHERE p.status = 'applied' AND o.state <> 'PAID'`); n != 0 {
		t.Errorf("%d payments applied to an order that is not PAID", n)
	}
	total := count(`SELECT count(*) FROM orders`)
	closed := count(`SELECT count(*) FROM orders WHERE state = 'CLOSED'`)

	// The closing gap: the longest stretch during which an acknowledged
	// order was due and no order closed.
	rows, err := db.Query(`SELECT order_no, closed_at FROM orders WHERE state = 'CLOSED' AND order_no = ANY($1)`, creates)
	if err != nil {
		t.Fatal(err)
	}
	var closes []closing
	var worstLag time.Duration
	for rows.Next() {
		var no string
		var at time.Time
		if err := rows.Scan(&no, &at); err != nil {
			t.Fatal(err)
		}
		closes = append(closes, closing{deadlines[no], at})
		worstLag = max(worstLag, at.Sub(deadlines[no]))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	gap, gapAt := closeGap(closes)
	var dueInOutage int
	for _, cl := range closes {
		if cl.due.After(killedAt) && cl.due.Before(promotedAt) {
			dueInOutage++
		}
	}
	t.Logf("failover: the monitor promoted the standby %v after the kill; the longest stretch without an acknowledged create was %v (from %v after the kill)",
		promotedAt.Sub(killedAt).Round(10*time.Millisecond), outage.Round(10*time.Millisecond), outageAt.Sub(killedAt).Round(10*time.Millisecond))
	t.Logf("%d orders (%d acknowledged, %d closed), %d payments acknowledged, requests not acknowledged by status %v; %d orders came due between the kill and the promotion",
		total, len(creates), closed, len(pays), refused, dueInOutage)
	t.Logf("closing: longest gap with orders due and none closed %v (from %v after the kill), worst close lag %v",
		gap.Round(10*time.Millisecond), gapAt.Sub(killedAt).Round(10*time.Millisecond), worstLag.Round(10*time.Millisecond))
	if dueInOutage == 0 || paysAfter == 0 {
		t.Errorf("no order came due during the outage, or no payment was acknowledged after it: the test proves less than it should")
	}
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Errorf("lapse serve exited with %v", err)
	}
}

// closing is when an order was due and when it closed.
type closing struct{ due, at time.Time }

// closeGap returns the longest stretch during which some order was due and
// not closed and no order closed, and when it began.
func closeGap(closes []closing) (time.Duration, time.Time) {
	cs := slices.Clone(closes)
	sort.Slice(cs, func(i, j int) bool { return cs[i].at.Before(cs[j].at) })
	// minDue[i] is the earliest deadline of the orders closed at cs[i] or
	// later: the oldest one still waiting just before cs[i].
	minDue := make([]time.Time, len(cs)+1)
	for i := len(cs) - 1; i >= 0; i-- {
		minDue[i] = cs[i].due
		if i+1 < len(cs) && minDue[i+1].Before(minDue[i]) {
			minDue[i] = minDue[i+1]
		}
	}
	var gap time.Duration
	var at time.Time
	for i := range cs {
		from := minDue[i]
		if i > 0 && cs[i-1].at.After(from) {
			from = cs[i-1].at
		}
		if d := cs[i].at.Sub(from); d > gap {
			gap, at = d, from
		}
	}
	return gap, at
}

// post sends a JSON body and decodes a JSON answer into out; its status is
// 0 when no answer came.
func post(url string, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest("POST", url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if out != nil && len(raw) > 0 {
		_ = json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}
