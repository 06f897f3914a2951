package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

func TestTxFailedStatement(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 1})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	first := createParams("F-1", &now, now)
	if _, _, err := s.OrderCreate(ctx, first); err != nil {
		t.Fatal(err)
	}
	clash := createParams("F-2", &now, now)
	clash.Outbox[0].ID = first.Outbox[0].ID
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, createParams("F-3", &now, now)); err != nil {
			return err
		}
		_, _, err := tx.OrderCreate(ctx, clash)
		return err
	})
	if err == nil {
		t.Fatal("Tx with a clashing outbox id succeeded")
	}
	for _, no := range []string{"F-2", "F-3"} {
		if _, err := s.OrderGet(ctx, no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s exists after a failed Tx: %v", no, err)
		}
	}
	// A fn that swallows the failure cannot commit what came before it.
	err = s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, createParams("F-4", &now, now)); err != nil {
			return err
		}
		_, _, _ = tx.OrderCreate(ctx, clash)
		return nil
	})
	if err == nil {
		t.Error("Tx committed after a failed statement")
	}
	if _, err := s.OrderGet(ctx, "F-4"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("F-4 exists: %v", err)
	}
}

func TestTxCancelled(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 1})
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, createParams("K-1", &now, now)); err != nil {
			return err
		}
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Tx = %v, want context.Canceled", err)
	}
	if _, err := s.OrderGet(context.Background(), "K-1"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("K-1 exists: %v", err)
	}
}
