package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestDeliveryClaimPredecessorProbe checks that a delivery claim tests each
// candidate's predecessor (after_id) with one primary-key probe, whatever the
// table's statistics say, so that a claim costs the rows it claims and not
// the backlog. Given `e.id = d.after_id AND e.status = 'pending'`, the
// planner could read the partial index of pending deliveries, whose
// predicate the second condition matches, for each candidate: in a flash
// sale, a young table never analyzed, every claim of 500 read the whole
// backlog 500 times (26,014 buffers, 170 ms of a claim, measured).
//
// The history (20,000 deliveries done, then analyzed) and the backlog
// (5,000 pending, a quarter of the orders with a second event chained after
// the first) are written by OrderCreateMany; the statements run, in
// transactions rolled back, before and after a second ANALYZE. It checks
// the buffers each read per delivery, and that no chained delivery was
// claimed while its predecessor was pending.
func TestDeliveryClaimPredecessorProbe(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	conn := connect(t, dsn)
	// Statistics taken while no delivery was pending, as in a database
	// whose sale has not begun: 20,000 deliveries done, then analyzed.
	var early []*lapse.OrderCreateParams
	for i := range 20000 {
		p := createParams(fmt.Sprintf("DP-early-%05d", i), nil, now)
		p.Outbox[0].Subscribers = []string{"nats"}
		early = append(early, p)
	}
	if err := s.OrderCreateMany(ctx, early); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE deliveries SET status = 'done'; ANALYZE deliveries"); err != nil {
		t.Fatal(err)
	}
	const orders = 4000
	var ps []*lapse.OrderCreateParams
	for i := range orders {
		p := createParams(fmt.Sprintf("DP-%06d", i), nil, now)
		if i%4 == 0 {
			p.Outbox = append(p.Outbox, lapse.NewOutboxEvent(lapse.EventOrderCreated, p.Order, nil))
		}
		for j := range p.Outbox {
			p.Outbox[j].Subscribers = []string{"nats"}
		}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	var chained int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM deliveries WHERE after_id IS NOT NULL").Scan(&chained); err != nil || chained != orders/4 {
		t.Fatalf("%d chained deliveries, %v; want %d", chained, err, orders/4)
	}
	claim := func(when string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		read, plan := explainBuffers(t, tx, postgres.DeliveryClaimOneSQL, now, "nats", 500, "w", now.Add(time.Minute))
		var claimed, early int
		err = tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE EXISTS (
				SELECT 1 FROM deliveries p WHERE p.id = d.after_id AND p.status = 'pending'))
			FROM deliveries d WHERE d.lease_owner = 'w'`).Scan(&claimed, &early)
		if err != nil {
			t.Fatal(err)
		}
		if claimed != 500 {
			t.Fatalf("%s: claimed %d deliveries; want 500", when, claimed)
		}
		if early != 0 {
			t.Errorf("%s: claimed %d deliveries whose predecessor is pending", when, early)
		}
		// About ten buffers a delivery: the due index, the row, its
		// predecessor's and its event's (explainBuffers leaves out what
		// writing the lease costs). Reading the backlog for each was two
		// hundred.
		if per := float64(read) / float64(claimed); per > 25 {
			t.Errorf("%s: the claim read %d buffers, %.1f a delivery claimed; want at most 25:\n%s", when, read, per, plan)
		}
	}
	claim("statistics from before the backlog")

	// The statements that finish and renew leases find each delivery by its
	// id and test that it is still pending: a probe each, too.
	until := now.Add(time.Minute)
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: until, Subscribers: []string{"nats"}, Limit: 500})
	if err != nil || len(ds) != 500 {
		t.Fatalf("claim: %d deliveries, %v", len(ds), err)
	}
	var ids, attempts, durations []int64
	var workers, outcomes []string
	var started []time.Time
	for _, d := range ds {
		ids, attempts, durations = append(ids, d.ID), append(attempts, int64(d.Attempts)), append(durations, 1000)
		workers, outcomes, started = append(workers, "w"), append(outcomes, "ok"), append(started, now)
	}
	finish, err := postgres.DeliveryFinishArgs(&lapse.DeliveryFinishParams{ID: ds[0].ID, Attempt: ds[0].Attempts, Owner: "w",
		Status: lapse.DeliveryDone, At: now, Record: lapse.DeliveryAttempt{Worker: "w", StartedAt: now, Outcome: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		rows int
		sql  string
		args []any
	}{
		{"finish many", len(ds), postgres.DeliveryDoneManySQL, []any{"w", ids, attempts, workers, started, durations, outcomes, now}},
		{"renew", len(ds), postgres.DeliveryRenewSQL, []any{"w", ids, attempts, until.Add(time.Minute)}},
		{"finish one", 1, postgres.DeliveryFinishSQL, finish},
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		read, plan := explainBuffers(t, tx, c.sql, c.args...)
		var left int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM deliveries WHERE lease_owner = 'w' AND lease_until = $1", until).Scan(&left); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		if left != len(ds)-c.rows {
			t.Errorf("%s: %d leases left as the claim made them; want %d", c.name, left, len(ds)-c.rows)
		}
		// A finish finds each delivery through its primary key: about ten
		// buffers a delivery, not counting what writing its new version
		// and its attempt row costs.
		if per := float64(read) / float64(c.rows); per > 25 {
			t.Errorf("%s: read %d buffers, %.1f a delivery; want at most 25:\n%s", c.name, read, per, plan)
		}
	}

	// A retry finds its dead delivery by id, with statistics from before
	// any died.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE deliveries SET status = 'dead', lease_owner = '', lease_until = NULL WHERE status = 'pending'"); err != nil {
		t.Fatal(err)
	}
	read, plan := explainBuffers(t, tx, postgres.DeliveryRetrySQL, ds[0].ID, now)
	var status string
	if err := tx.QueryRow(ctx, "SELECT status FROM deliveries WHERE id = $1", ds[0].ID).Scan(&status); err != nil || status != "pending" {
		t.Errorf("retry: delivery %d is %q, %v; want pending", ds[0].ID, status, err)
	}
	_ = tx.Rollback(ctx)
	if read > 20 {
		t.Errorf("retry: read %d buffers for one delivery; want at most 20:\n%s", read, plan)
	}

	if _, err := conn.Exec(ctx, "ANALYZE deliveries"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE deliveries SET lease_owner = '', lease_until = NULL WHERE lease_owner = 'w'"); err != nil {
		t.Fatal(err)
	}
	claim("after ANALYZE")
}
