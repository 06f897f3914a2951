package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestClaimPlansOnce checks that the claim inside a transaction runs on its
// generic plan, planned once per connection, whatever the session's
// plan_cache_mode (here force_custom_plan), and that the transaction is
// left with the session's setting once the claim has run.
func TestClaimPlansOnce(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t) + "&plan_cache_mode=force_custom_plan"
	s := openStore(t, dsn, postgres.Config{MaxConns: 1}) // one connection: its prepared claim is the one counted
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 20 {
		d := now.Add(time.Duration(i) * time.Second)
		ps = append(ps, createParams(fmt.Sprintf("CP-%03d", i), &d, now))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	rollback := errors.New("rolled back")
	const claims = 8
	for i := range claims {
		err := s.Tx(ctx, func(tx lapse.Store) error {
			due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now.Add(time.Minute), Flows: []string{"checkout"},
				Limit: 5 + i})
			if err != nil {
				return err
			}
			if len(due) != 5+i || due[0].OrderNo != "CP-000" {
				t.Errorf("claim %d: %d orders, the first %v; want %d from CP-000", i, len(due), due[0].OrderNo, 5+i)
			}
			ts := tx.(*postgres.Store)
			if mode, err := ts.Setting(ctx, "plan_cache_mode"); err != nil || mode != "force_custom_plan" {
				t.Errorf("claim %d: plan_cache_mode after the claim is %q (%v); want the session's force_custom_plan", i, mode, err)
			}
			if i == claims-1 {
				generic, custom, err := ts.ClaimPlans(ctx)
				if err != nil || generic != claims || custom != 0 {
					t.Errorf("the claim was planned generically %d times and custom %d times (%v); want %d and 0", generic, custom, err, claims)
				}
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
}
