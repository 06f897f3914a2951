package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
)

// TestOutboxPruneSmallOutbox checks that a pruner neither waits for the
// events that another pruner's open step holds nor for what hangs from
// them, on tables so small that MariaDB plans a DELETE of a step's rows by
// a list of keys as a scan, which locks every row it reads: each statement
// reads every table by key. A lock wait fails after a second here, where it
// would otherwise last until the other step commits.
func TestOutboxPruneSmallOutbox(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t)+"?innodb_lock_wait_timeout=1", mysql.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 6 {
		p := createParams(fmt.Sprintf("SP-%02d", i), nil, now)
		p.Outbox[0].Subscribers = []string{"a"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: now.Add(time.Minute), Subscribers: []string{"a"}, Limit: 10})
	if err != nil || len(ds) != len(ps) {
		t.Fatalf("DeliveryClaim = %d, %v", len(ds), err)
	}
	for _, d := range ds {
		if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryDone, At: now,
			Record: lapse.DeliveryAttempt{DeliveryID: d.ID, Attempt: 1, Worker: "w", StartedAt: now, Outcome: lapse.OutcomeOK}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EffectClaim(ctx, "a", d.EventID, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"outbox", "deliveries", "delivery_attempts", "effects", "reviews"} {
		if _, err := s.Exec(ctx, "ANALYZE TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}

	var seqs []string
	for _, d := range ds {
		seqs = append(seqs, fmt.Sprint(d.Event.Seq))
	}
	arg := "[" + strings.Join(seqs, ",") + "]"
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"read", mysql.OutboxPruneSQL, []any{now.UnixMicro(), 0, 100}},
		{"attempts", mysql.OutboxPruneAttemptsSQL, []any{arg}},
		{"effects", mysql.OutboxPruneEffectsSQL, []any{arg}},
		{"deliveries", mysql.OutboxPruneDeliveriesSQL, []any{arg}},
		{"events", mysql.OutboxPruneEventsSQL, []any{arg}},
	} {
		plan := explain(t, s, c.sql, c.args...)
		t.Logf("%s:\n%s", c.name, plan)
		for _, line := range strings.Split(plan, "\n") {
			if !strings.Contains(line, "table=k ") && (strings.Contains(line, "type=ALL ") || strings.Contains(line, "type=index ")) {
				t.Errorf("%s: scans a table:\n%s", c.name, plan)
			}
		}
	}

	before := now.Add(time.Hour)
	held, release, done := make(chan *lapse.OutboxPruned), make(chan struct{}), make(chan error)
	go func() {
		done <- s.Tx(ctx, func(tx lapse.Store) error {
			got, err := tx.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: before, Now: before, Limit: 2})
			if err != nil {
				close(held)
				return err
			}
			held <- got
			<-release
			return nil
		})
	}()
	first, ok := <-held
	if !ok {
		t.Fatalf("the first step: %v", <-done)
	}
	second, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: before, Now: before, Limit: 100})
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first step: %v", err)
	}
	if err != nil {
		t.Fatalf("a step while another holds its events: %v", err)
	}
	if first.Deleted != 2 || first.Next != ds[1].Event.Seq || second.Deleted != 4 || second.Next != 0 {
		t.Errorf("the steps returned %+v and %+v, want 2 deleted and on from %d, then 4 and the end", first, second, ds[1].Event.Seq)
	}
	for _, d := range ds {
		if first, err := s.EffectClaim(ctx, "a", d.EventID, now); err != nil || !first {
			t.Errorf("EffectClaim(a, %s) after the steps = %v, %v: its effect row stayed", d.EventID, first, err)
		}
		if evs, err := s.OutboxList(ctx, d.OrderID); err != nil || len(evs) != 0 {
			t.Errorf("%s after the steps: %d events, %v", d.OrderNo, len(evs), err)
		}
	}
	var n int
	if err := s.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM deliveries) + (SELECT COUNT(*) FROM delivery_attempts)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d deliveries and attempts left, %v", n, err)
	}
}
