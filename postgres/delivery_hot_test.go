package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestDeliveryLeaseHOT checks that the claim's lease and its renewal are
// HOT updates (migration 0023): they change no indexed column, so they
// write no index entry. It runs the store's claim in a transaction on
// deliveries written by OrderCreateMany, and reads that transaction's own
// counts, which the server keeps exactly. It checks too
// that a leased delivery still reads as due at the end of its lease, and
// that the claim skips it until then and takes it over after.
func TestDeliveryLeaseHOT(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 2000 {
		p := createParams(fmt.Sprintf("DH-%06d", i), nil, now)
		p.Outbox[0].Subscribers = []string{"nats"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}

	conn := connect(t, dsn)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	until := now.Add(time.Minute)
	rows, err := tx.Query(ctx, postgres.DeliveryClaimOneSQL, now, "nats", 1500, "w", until)
	if err != nil {
		t.Fatal(err)
	}
	var ids, attempts []int64
	for rows.Next() {
		v, err := rows.Values() // id and attempts are the first and eighth columns
		if err != nil {
			t.Fatal(err)
		}
		ids, attempts = append(ids, v[0].(int64)), append(attempts, int64(v[7].(int32)))
	}
	if rows.Err() != nil || len(ids) != 1500 {
		t.Fatalf("claimed %d deliveries, %v; want 1500", len(ids), rows.Err())
	}
	var updated, hot int64
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('deliveries'::regclass),
		pg_stat_get_xact_tuples_hot_updated('deliveries'::regclass)`).Scan(&updated, &hot); err != nil {
		t.Fatal(err)
	}
	// Fillfactor 50 leaves room on a page for a leased version of nearly
	// every row inserted there: the lease adds its owner and end to each,
	// so the last one or two of a page's rows may find it full. Before
	// migration 0023 none was HOT.
	if updated != 1500 || hot < updated*9/10 {
		t.Errorf("a claim of 1,500 deliveries updated %d rows, %d of them HOT; want 1500, at least 90 %% HOT", updated, hot)
	}
	// A renewal is HOT too when its page has room (the version the claim
	// replaced is pruned once no snapshot needs it, so not within this
	// transaction): it writes lease_until alone, which no index names,
	// as the claim writes only these.
	var indexed []string
	err = tx.QueryRow(ctx, `SELECT array_agg(DISTINCT a.attname::text ORDER BY a.attname::text)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
		WHERE i.indrelid = 'deliveries'::regclass AND (a.attnum = ANY (i.indkey)
			OR pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M')
			OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\m' || a.attname || '\M'))`).Scan(&indexed)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"attempts", "lease_owner", "lease_until", "updated_at"} {
		if slices.Contains(indexed, c) {
			t.Errorf("deliveries.%s, which a lease writes, is in an index (indexed: %v)", c, indexed)
		}
	}
	if !strings.Contains(postgres.DeliveryRenewSQL, "SET lease_until = GREATEST(d.lease_until, $4)\n") {
		t.Errorf("the renewal writes more than lease_until:\n%s", postgres.DeliveryRenewSQL)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Through the store: the lease is the next attempt, as it was when the
	// claim moved next_attempt_at.
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w1", LeaseUntil: until, Subscribers: []string{"nats"}, Limit: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %d deliveries, %v", len(ds), err)
	}
	got, err := s.DeliveryGet(ctx, ds[0].ID)
	if err != nil || !got.NextAttemptAt.Equal(until) || got.LeaseUntil == nil || !got.LeaseUntil.Equal(until) {
		t.Errorf("a leased delivery reads %+v, %v; want its next attempt and lease at %v", got, err, until)
	}
	var raw time.Time
	if err := conn.QueryRow(ctx, "SELECT next_attempt_at FROM deliveries WHERE id = $1", ds[0].ID).Scan(&raw); err != nil || !raw.Equal(now) {
		t.Errorf("the lease moved next_attempt_at to %v, %v; want it left at %v", raw, err, now)
	}
	// The other 1,999 are due now; the leased one only once its lease ends.
	if c, err := s.DeliveryCount(ctx); err != nil || c.Pending != 2000 || c.OldestPending == nil || !c.OldestPending.Equal(now) {
		t.Errorf("DeliveryCount = %+v, %v; want 2000 pending, the oldest due at %v", c, err, now)
	}
	rest, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: until.Add(-time.Second), Owner: "w2", LeaseUntil: until.Add(time.Hour),
		Subscribers: []string{"nats"}, Limit: 5000})
	if err != nil || len(rest) != 1999 {
		t.Fatalf("claim before the lease ends: %d deliveries, %v; want the 1,999 others", len(rest), err)
	}
	for _, d := range rest {
		if d.ID == ds[0].ID {
			t.Fatalf("delivery %d claimed again while its lease ran", d.ID)
		}
	}
	if c, err := s.DeliveryCount(ctx); err != nil || c.OldestPending == nil || !c.OldestPending.Equal(until) {
		t.Errorf("DeliveryCount with every delivery leased = %+v, %v; want the oldest due at the first lease's end, %v", c, err, until)
	}
	over, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: until, Owner: "w3", LeaseUntil: until.Add(time.Minute),
		Subscribers: []string{"nats"}, Limit: 5000})
	if err != nil || len(over) != 1 || over[0].ID != ds[0].ID || over[0].Attempts != 2 {
		t.Fatalf("claim at the lease's end = %+v, %v; want delivery %d taken over for its attempt 2", over, err, ds[0].ID)
	}
}
