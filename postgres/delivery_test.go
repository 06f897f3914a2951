package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestDeliveryDueIndex checks that the delivery workers' claim reads the
// partial due index in due order and probes each candidate's predecessor by
// primary key, both on a table never analyzed (a burst into a new table,
// with autovacuum late or off) and on one shaped like production: most
// deliveries done, few pending. It checks too that DeliveryCount and
// DeliveryCountBySubscriber read only the partial indexes.
func TestDeliveryDueIndex(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 20000 {
		p := createParams(fmt.Sprintf("DX-%06d", i), nil, now.Add(time.Duration(i)*time.Millisecond))
		p.Outbox[0].Subscribers = []string{"webhook"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	// explain, whose arguments pgx binds, shows the custom plan; a
	// prepared statement under force_generic_plan shows the generic one,
	// which PostgreSQL switches to after five runs when it looks cheaper.
	for _, q := range []string{
		"PREPARE claim_one (timestamptz, text, int, text, timestamptz) AS " + postgres.DeliveryClaimOneSQL,
		"PREPARE claim_many (timestamptz, text[], int, text, timestamptz) AS " + postgres.DeliveryClaimManySQL,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		due, until := now.Add(time.Hour), now.Add(time.Minute)
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = auto"); err != nil {
			t.Fatal(err)
		}
		custom := map[string]string{
			"one, custom":  explain(t, conn, postgres.DeliveryClaimOneSQL, due, "webhook", 100, "w", until),
			"many, custom": explain(t, conn, postgres.DeliveryClaimManySQL, due, []string{"webhook", "other"}, 100, "w", until),
		}
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		plans := map[string]string{
			"one, generic":  explain(t, conn, "EXECUTE claim_one ('2026-11-29 13:00:00+00', 'webhook', 100, 'w', '2026-11-29 12:01:00+00')"),
			"many, generic": explain(t, conn, "EXECUTE claim_many ('2026-11-29 13:00:00+00', '{webhook,other}', 100, 'w', '2026-11-29 12:01:00+00')"),
		}
		maps.Copy(plans, custom)
		for mode, plan := range plans {
			if !strings.Contains(plan, "Index Scan using deliveries_due_idx on deliveries d") || strings.Contains(plan, "Seq Scan on deliveries") {
				t.Errorf("%s: claim, %s plan does not scan deliveries_due_idx:\n%s", when, mode, plan)
			}
			// One subscriber's rows come in due order, each predecessor
			// probed by primary key: the claim stops at its limit instead
			// of reading the backlog. (Several subscribers' rows are sorted
			// together, so that claim reads every due row anyway.)
			if strings.HasPrefix(mode, "one") && (strings.Contains(plan, "Sort Key: d.next_attempt_at") ||
				!strings.Contains(plan, "Index Scan using deliveries_pkey on deliveries e")) {
				t.Errorf("%s: claim, %s plan reads the backlog:\n%s", when, mode, plan)
			}
		}
		if !strings.Contains(plans["one, generic"], "$1") {
			t.Errorf("the generic plan is not generic:\n%s", plans["one, generic"])
		}
		if plan := explain(t, conn, postgres.DeliveryCountSQL); strings.Contains(plan, "Seq Scan on deliveries") {
			t.Errorf("%s: count reads every delivery:\n%s", when, plan)
		}
		if plan := explain(t, conn, postgres.DeliveryCountBySubscriberSQL); strings.Contains(plan, "Seq Scan on deliveries") {
			t.Errorf("%s: count by subscriber reads every delivery:\n%s", when, plan)
		}
	}
	check("never analyzed")

	for _, q := range []string{
		"UPDATE deliveries SET status = 'done', done_at = updated_at WHERE id % 50 <> 0",
		"UPDATE deliveries SET status = 'dead' WHERE id % 1000 = 1",
		"VACUUM ANALYZE deliveries",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	check("analyzed")
}

// TestDeliveryLeasesProbed checks that DeliveryDoneMany and DeliveryRenew
// find each lease they name by its primary key, on a deliveries table whose
// statistics say it is empty while it holds a flash sale's backlog (it was
// analyzed before the burst): planned from the statistics as a join, they
// scanned the pending index or the whole table instead, for every batch.
func TestDeliveryLeasesProbed(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE deliveries"); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 20000 {
		p := createParams(fmt.Sprintf("DP-%06d", i), nil, now)
		p.Outbox[0].Subscribers = []string{"nats"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	until := now.Add(time.Minute)
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: until, Subscribers: []string{"nats"}, Limit: 500})
	if err != nil || len(ds) != 500 {
		t.Fatalf("claim: %d deliveries, %v", len(ds), err)
	}
	ids, attempts, durations := make([]int64, len(ds)), make([]int64, len(ds)), make([]int64, len(ds))
	workers, outcomes, started := make([]string, len(ds)), make([]string, len(ds)), make([]time.Time, len(ds))
	for i, d := range ds {
		ids[i], attempts[i], workers[i], outcomes[i], started[i] = d.ID, int64(d.Attempts), "w", lapse.OutcomeOK, now
	}
	plans := map[string]string{
		"done many": explain(t, conn, postgres.DeliveryDoneManySQL, "w", ids, attempts, workers, started, durations, outcomes, until),
		"renew":     explain(t, conn, postgres.DeliveryRenewSQL, "w", ids, attempts, until.Add(time.Minute)),
	}
	for name, plan := range plans {
		if strings.Contains(plan, "Seq Scan on deliveries") || strings.Contains(plan, "deliveries_due_idx") ||
			!strings.Contains(plan, "Index Scan using deliveries_pkey on deliveries d") {
			t.Errorf("%s does not probe each lease by primary key:\n%s", name, plan)
		}
	}
}

// TestDeliveryFinishLeaseLost checks that a finish whose lease is lost
// writes none of its rows: no attempt, no review, no event, no delivery.
func TestDeliveryFinishLeaseLost(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := createParams("LL-1", nil, now)
	p.Outbox[0].Subscribers = []string{"webhook"}
	o, _, err := s.OrderCreate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w1", LeaseUntil: now.Add(time.Minute), Subscribers: []string{"webhook"}, Limit: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("DeliveryClaim = %d, %v", len(ds), err)
	}
	d := ds[0]
	dead := lapse.NewOutboxEvent(lapse.EventDeliveryDead, o, nil)
	dead.Subscribers = []string{"notify"}
	for _, lost := range []struct {
		owner   string
		attempt int
	}{{"w2", d.Attempts}, {"w1", d.Attempts + 1}} {
		_, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: lost.owner, Attempt: lost.attempt, Status: lapse.DeliveryDead, At: now,
			Error: "HTTP 400", Record: lapse.DeliveryAttempt{Worker: lost.owner, StartedAt: now, Outcome: lapse.OutcomeRefused},
			Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "died", DeliveryID: d.ID, CreatedAt: now},
			Outbox: []lapse.OutboxEvent{dead}})
		if !errors.Is(err, lapse.ErrLeaseLost) {
			t.Fatalf("finish by %s of attempt %d = %v, want ErrLeaseLost", lost.owner, lost.attempt, err)
		}
	}
	atts, _ := s.DeliveryAttemptList(ctx, o.ID)
	reviews, _ := s.ReviewList(ctx, &lapse.ReviewListParams{})
	evs, _ := s.OutboxList(ctx, o.ID)
	all, _ := s.DeliveryList(ctx, o.ID)
	if len(atts) != 0 || len(reviews) != 0 || len(evs) != 1 || len(all) != 1 || all[0].Status != lapse.DeliveryPending || all[0].LeaseOwner != "w1" {
		t.Errorf("a lost-lease finish wrote: %d attempts, %d reviews, %d events, deliveries %+v", len(atts), len(reviews), len(evs), all)
	}
	if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w1", Attempt: d.Attempts, Status: "lost"}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("finish with an unknown status = %v, want EINVALID", err)
	}
}
