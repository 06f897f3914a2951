package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

func TestOrderCreateManyConflict(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

	// The same order_no twice in one batch.
	twice := []*lapse.OrderCreateParams{createParams("CM-1", &now, now), createParams("CM-2", &now, now), createParams("CM-1", &now, now)}
	if err := s.OrderCreateMany(ctx, twice); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("a batch with a repeated order_no = %v, want a conflict", err)
	}
	if _, err := s.OrderGet(ctx, "CM-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("a refused batch wrote CM-2: %v", err)
	}

	// A clash in a later chunk of COPY undoes the earlier ones.
	var big []*lapse.OrderCreateParams
	for i := range 10_001 {
		big = append(big, createParams(fmt.Sprintf("CB-%05d", i), &now, now))
	}
	big[len(big)-1] = createParams("CM-2", &now, now)
	if err := s.OrderCreateMany(ctx, []*lapse.OrderCreateParams{createParams("CM-2", &now, now)}); err != nil {
		t.Fatal(err)
	}
	if err := s.OrderCreateMany(ctx, big); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("a big batch ending in an existing order_no = %v, want a conflict", err)
	}
	if _, err := s.OrderGet(ctx, "CB-00000"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("a refused batch wrote its first chunk: %v", err)
	}

	// Inside Tx, the batch is part of the caller's transaction.
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if err := tx.OrderCreateMany(ctx, []*lapse.OrderCreateParams{createParams("CM-3", &now, now)}); err != nil {
			return err
		}
		_, err := tx.OrderGet(ctx, "CM-3")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := s.OrderGet(ctx, "CM-3"); err != nil || o.Version != 1 || o.State != flows.Unpaid {
		t.Errorf("CM-3 = %+v, %v", o, err)
	}
	if err := s.OrderCreateMany(ctx, nil); err != nil {
		t.Errorf("OrderCreateMany(nil) = %v", err)
	}
}
