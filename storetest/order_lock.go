package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testOrderLock: an order read with OrderLock inside Tx does not change under
// the transaction. A transition sent meanwhile from outside waits for the
// transaction and then finds the order moved on (ErrStale), and a claim
// inside another transaction does not return it.
func testOrderLock(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "LK-1", base.Add(time.Minute), base)
	if got, err := s.OrderLock(ctxT(t), "LK-1"); err != nil || got.ID != o.ID {
		t.Fatalf("OrderLock outside Tx = %+v, %v", got, err)
	}
	if _, err := s.OrderLock(ctxT(t), "LK-none"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Fatalf("OrderLock of a missing order = %v, want ErrOrderNotFound", err)
	}
	started := make(chan struct{})
	outside := make(chan error, 1)
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		locked, err := tx.OrderLock(ctxT(t), "LK-1")
		if err != nil {
			return err
		}
		go func() {
			close(started)
			_, err := s.OrderTransition(context.WithoutCancel(ctxT(t)), plan(t, locked, flows.Cancel, base.Add(time.Second)))
			outside <- err
		}()
		<-started
		// Time for the transition to reach the database and wait there; it
		// must not get through however long this is.
		time.Sleep(200 * time.Millisecond)
		select {
		case err := <-outside:
			return errors.New("a transition went through while the order was locked: " + errorText(err))
		default:
		}
		_, err = tx.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: locked.ID, FromState: locked.State,
			FromVersion: locked.Version, DeadlineAt: base.Add(time.Hour), At: base.Add(time.Second)})
		return err
	})
	if err != nil {
		t.Fatalf("Tx with OrderLock: %v", err)
	}
	if err := <-outside; !errors.Is(err, lapse.ErrStale) {
		t.Errorf("the transition that waited for the lock = %v, want ErrStale", err)
	}
	if got := mustGet(t, s, "LK-1"); got.State != flows.Unpaid || got.Version != 2 {
		t.Errorf("after the locked change: %+v", got)
	}
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
