package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// testTxNested checks that a nested Tx is a savepoint: an error from its fn
// undoes its writes and only those, even when a statement inside it failed,
// and the outer transaction goes on to commit the rest. Engine code relies
// on it to try a change inside a caller's transaction and go on without it.
func testTxNested(t *testing.T, s lapse.Store) {
	boom := errors.New("boom")
	first := newOrder("TN-1", base.Add(time.Minute), base)
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctxT(t), first); err != nil {
			return err
		}
		err := tx.Tx(ctxT(t), func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-2", base.Add(time.Minute), base)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("nested Tx = %v, want fn's error", err)
		}
		// A failed statement inside the nested Tx (the event id is taken)
		// is undone with it, and leaves the outer transaction usable.
		clash := newOrder("TN-3", base.Add(time.Minute), base)
		clash.Outbox[0].ID = first.Outbox[0].ID
		err = tx.Tx(ctxT(t), func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-4", base.Add(time.Minute), base)); err != nil {
				return err
			}
			_, _, err := tx.OrderCreate(ctxT(t), clash)
			return err
		})
		if err == nil {
			t.Error("nested Tx with a clashing event id succeeded")
		}
		if _, err := tx.OrderGet(ctxT(t), "TN-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("inside the outer Tx, TN-2 of a failed nested Tx = %v, want not found", err)
		}
		// A nested Tx that succeeds keeps its writes.
		return tx.Tx(ctxT(t), func(tx lapse.Store) error {
			_, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-5", base.Add(time.Minute), base))
			return err
		})
	})
	if err != nil {
		t.Fatalf("outer Tx = %v, want it to commit", err)
	}
	for _, no := range []string{"TN-1", "TN-5"} {
		mustGet(t, s, no)
	}
	for _, no := range []string{"TN-2", "TN-3", "TN-4"} {
		if _, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s of a failed nested Tx = %v, want not found", no, err)
		}
	}
}
