package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/lapsehq/lapse"
)

// A nested Tx that fails undoes its own writes only, and a method that fails
// inside Tx leaves nothing behind even when the caller commits.
func TestTxNestedSavepoint(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	ctx := context.Background()
	boom := errors.New("boom")
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, newOrder("N-1", base)); err != nil {
			return err
		}
		err := tx.Tx(ctx, func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctx, newOrder("N-2", base)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("nested Tx = %v, want boom", err)
		}
		clash := newOrder("N-3", base)
		clash.Outbox = append(clash.Outbox, clash.Outbox[0]) // the second insert fails
		if _, _, err := tx.OrderCreate(ctx, clash); err == nil {
			t.Error("OrderCreate with a repeated event id succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.OrderGet(ctx, "N-1"); err != nil {
		t.Errorf("N-1: %v", err)
	}
	for _, no := range []string{"N-2", "N-3"} {
		if _, err := s.OrderGet(ctx, no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s: %v, want not found", no, err)
		}
	}
}
