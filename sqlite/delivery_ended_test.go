package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestUpgradeDeliveryEnded undoes migration 0032 on a migrated file (its
// column dropped, its record deleted) under a pending delivery whose three
// attempts all ended in recorded failures, and migrates again: the
// delivery's attempts count as ended, so its next claim has Unfinished 1,
// not 4, which would read as three attempts that never ended.
func TestUpgradeDeliveryEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	p := newOrder("UE-1", base.Add(time.Hour))
	p.Outbox[0].Subscribers = []string{"hook"}
	if _, _, err := s.OrderCreate(ctx, p); err != nil {
		t.Fatal(err)
	}
	now := base
	claim := func() *lapse.Delivery {
		t.Helper()
		now = now.Add(time.Minute)
		ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: now.Add(time.Second),
			Subscribers: []string{"hook"}, Limit: 1})
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim = %v, %v", ds, err)
		}
		return ds[0]
	}
	for range 3 {
		d := claim()
		if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: d.Attempts,
			Status: lapse.DeliveryPending, NextAttemptAt: now, At: now, Error: "HTTP 503",
			Record: lapse.DeliveryAttempt{Worker: "w", StartedAt: now, Outcome: lapse.OutcomeError, Error: "HTTP 503"}}); err != nil {
			t.Fatal(err)
		}
	}
	db := openRaw(t, path)
	for _, q := range []string{`ALTER TABLE deliveries DROP COLUMN ended`, `DELETE FROM lapse_migrations WHERE version = 32`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if d := claim(); d.Attempts != 4 || d.Unfinished != 1 {
		t.Errorf("the claim after the upgrade: attempts %d, unfinished %d; want 4 and 1", d.Attempts, d.Unfinished)
	}
}
