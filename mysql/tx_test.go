package mysql_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
)

// TestTxFailedMethod: a method that fails inside Tx (its outbox insert
// meets a taken event id after its order insert went in) writes nothing,
// and leaves the transaction usable: MySQL undoes a failed statement alone,
// and the method's savepoint undoes the statements before it.
func TestTxFailedMethod(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 1})
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
		if _, _, err := tx.OrderCreate(ctx, clash); err == nil {
			t.Error("OrderCreate with a taken event id succeeded")
		}
		if _, err := tx.OrderGet(ctx, "F-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("the failed create left F-2 in the transaction: %v", err)
		}
		_, _, err := tx.OrderCreate(ctx, createParams("F-4", &now, now))
		return err
	})
	if err != nil {
		t.Fatalf("Tx after a failed method: %v", err)
	}
	for no, want := range map[string]bool{"F-2": false, "F-3": true, "F-4": true} {
		_, err := s.OrderGet(ctx, no)
		if got := err == nil; got != want || (err != nil && !errors.Is(err, lapse.ErrOrderNotFound)) {
			t.Errorf("%s exists = %v (%v), want %v", no, got, err, want)
		}
	}
}

// TestTxDeadlock: two transactions lock two orders in opposite orders, the
// second lock in a nested Tx, and InnoDB rolls one of them back, savepoint
// and all. That one is broken: what its fn writes after the deadlock fails,
// and so does its commit, even when fn swallows the error, so that nothing
// it wrote commits without what came before.
func TestTxDeadlock(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, no := range []string{"DL-A", "DL-B"} {
		if _, _, err := s.OrderCreate(ctx, createParams(no, &now, now)); err != nil {
			t.Fatal(err)
		}
	}
	var locked sync.WaitGroup
	locked.Add(2)
	errs := make([]error, 2)
	afterDeadlock := make([]error, 2)
	var wg sync.WaitGroup
	for i, pair := range [][2]string{{"DL-A", "DL-B"}, {"DL-B", "DL-A"}} {
		wg.Go(func() {
			errs[i] = s.Tx(ctx, func(tx lapse.Store) error {
				o, err := tx.OrderLock(ctx, pair[0])
				locked.Done()
				if err != nil {
					return err
				}
				locked.Wait()
				// In a nested Tx, whose savepoint the deadlock takes with the
				// whole transaction.
				if err := tx.Tx(ctx, func(tx lapse.Store) error {
					_, err := tx.OrderLock(ctx, pair[1])
					return err
				}); err != nil {
					// The victim swallows the deadlock and writes on.
					_, afterDeadlock[i] = tx.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID,
						FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: now.Add(time.Hour), At: now})
					return nil
				}
				_, err = tx.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid,
					FromVersion: 1, DeadlineAt: now.Add(2 * time.Hour), At: now})
				return err
			})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("Tx results %v and %v, want one deadlock victim", errs[0], errs[1])
	}
	victim := 0
	if errs[0] == nil {
		victim = 1
	}
	if afterDeadlock[victim] == nil {
		t.Error("a write after the deadlock, in the rolled-back transaction, succeeded")
	}
	// Rolled back whole, it may be run again: 503 with Retry-After.
	if !errors.Is(errs[victim], lapse.ErrStoreBusy) || lapse.ErrorCode(errs[victim]) != lapse.EUNAVAILABLE {
		t.Errorf("the deadlock's victim: %v (code %s), want lapse.ErrStoreBusy", errs[victim], lapse.ErrorCode(errs[victim]))
	}
	for i, no := range []string{"DL-A", "DL-B"} {
		o, err := s.OrderGet(ctx, no)
		if err != nil {
			t.Fatal(err)
		}
		if moved := o.Version == 2; moved == (i == victim) {
			t.Errorf("%s at version %d: the victim's change must not commit, the survivor's must", no, o.Version)
		}
	}
}

// TestTxLockTimeoutNested: a lock wait timeout inside a nested Tx undoes
// that Tx alone, as InnoDB undoes the statement alone by default: the outer
// transaction goes on and commits.
func TestTxLockTimeoutNested(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2, LockTimeout: time.Second})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("LT-1", &now, now)); err != nil {
		t.Fatal(err)
	}
	locked, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- s.Tx(ctx, func(tx lapse.Store) error {
			_, err := tx.OrderLock(ctx, "LT-1")
			close(locked)
			<-release
			return err
		})
	}()
	<-locked
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, createParams("LT-2", &now, now)); err != nil {
			return err
		}
		err := tx.Tx(ctx, func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctx, createParams("LT-3", &now, now)); err != nil {
				return err
			}
			_, err := tx.OrderLock(ctx, "LT-1")
			return err
		})
		if err == nil {
			t.Error("OrderLock of a row another transaction holds did not time out")
		}
		_, _, err = tx.OrderCreate(ctx, createParams("LT-4", &now, now))
		return err
	})
	close(release)
	if err != nil {
		t.Fatalf("Tx after a lock wait timeout in a nested Tx: %v", err)
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	for no, want := range map[string]bool{"LT-2": true, "LT-3": false, "LT-4": true} {
		_, err := s.OrderGet(ctx, no)
		if got := err == nil; got != want || (err != nil && !errors.Is(err, lapse.ErrOrderNotFound)) {
			t.Errorf("%s exists = %v (%v), want %v", no, got, err, want)
		}
	}
}

func TestTxCancelled(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 1})
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

// TestTxInsertThenTransition: transactions that each add a member to one
// group and then move the group's order, as joins do, take turns on the
// order rather than deadlock: a stale one, and only that, tries again.
func TestTxInsertThenTransition(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 8})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("GJ-1", &now, now)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for {
				err := s.Tx(ctx, func(tx lapse.Store) error {
					o, err := tx.OrderGet(ctx, "GJ-1")
					if err != nil {
						return err
					}
					user := string(rune('a' + i))
					if _, _, err := tx.GroupMemberAdd(ctx, &lapse.GroupMember{OrderID: o.ID, GroupID: o.OrderNo, UserID: user,
						Provider: "sandbox", Method: "tok", Amount: 1, Currency: "CNY", Key: "GJ-1/" + user, JoinedAt: now}); err != nil {
						return err
					}
					_, err = tx.OrderTransition(ctx, &lapse.OrderTransitionParams{OrderID: o.ID, FromState: o.State,
						FromVersion: o.Version, ToState: o.State, Event: "JOIN", At: now})
					return err
				})
				if !errors.Is(err, lapse.ErrStale) {
					if err != nil {
						t.Errorf("join %d: %v", i, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	o, err := s.OrderGet(ctx, "GJ-1")
	ms, _ := s.GroupMemberList(ctx, o.ID)
	if err != nil || o.Version != 9 || len(ms) != 8 {
		t.Errorf("after 8 joins: version %d, %d members, %v; want 9 and 8", o.Version, len(ms), err)
	}
}

// TestLockTimeoutBusy: a write that waits past innodb_lock_wait_timeout
// for a row another transaction holds is lapse.ErrStoreBusy (which is
// lapse.ErrStoreUnavailable: the API answers 503 with Retry-After), on its
// own and inside a Tx, and leaves nothing written; so is a statement past
// the statement timeout.
func TestLockTimeoutBusy(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	s := openStore(t, dsn, mysql.Config{MaxConns: 3, LockTimeout: time.Second, StatementTimeout: 10 * time.Second})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	o, _, err := s.OrderCreate(ctx, createParams("LB-1", &now, now))
	if err != nil {
		t.Fatal(err)
	}
	wantBusy := func(what string, err error, number uint16) {
		t.Helper()
		if !errors.Is(err, lapse.ErrStoreBusy) || !errors.Is(err, lapse.ErrStoreUnavailable) || lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
			t.Errorf("%s: %v (code %s), want lapse.ErrStoreBusy", what, err, lapse.ErrorCode(err))
		}
		if me, ok := errors.AsType[*gomysql.MySQLError](err); !ok || me.Number != number {
			t.Errorf("%s: %v, want the server's error %d inside", what, err, number)
		}
	}
	locked, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- s.Tx(ctx, func(tx lapse.Store) error {
			_, err := tx.OrderLock(ctx, "LB-1")
			close(locked)
			<-release
			return err
		})
	}()
	<-locked
	set := &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: now.Add(time.Hour), At: now,
		Outbox: []lapse.OutboxEvent{{ID: "7b0f0a9e-5d1c-4c55-9a51-0c8f1a6c0001", Type: "order.deadline_set", Payload: []byte(`{}`), CreatedAt: now}}}
	_, err = s.OrderDeadlineSet(ctx, set)
	wantBusy("OrderDeadlineSet of a row another transaction holds", err, 1205)
	err = s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, createParams("LB-2", &now, now)); err != nil {
			return err
		}
		_, err := tx.OrderDeadlineSet(ctx, set)
		return err
	})
	wantBusy("Tx whose OrderDeadlineSet waits for a row another transaction holds", err, 1205)
	close(release)
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	if got, err := s.OrderGet(ctx, "LB-1"); err != nil || got.Version != 1 {
		t.Errorf("LB-1 after the timed-out writes: %+v, %v; want it at version 1", got, err)
	}
	if _, err := s.OrderGet(ctx, "LB-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("LB-2, created in the Tx that timed out: %v, want lapse.ErrOrderNotFound", err)
	}
	// Once the row is free the same write goes through.
	if _, err := s.OrderDeadlineSet(ctx, set); err != nil {
		t.Errorf("OrderDeadlineSet once the row is free: %v", err)
	}

	short := openStore(t, dsn, mysql.Config{MaxConns: 1, StatementTimeout: 500 * time.Millisecond})
	timeout := uint16(1969) // ER_STATEMENT_TIMEOUT, MariaDB's max_statement_time
	if !short.MariaDB() {
		timeout = 3024 // ER_QUERY_TIMEOUT, MySQL's max_execution_time
	}
	wantBusy("a statement past the statement timeout", short.Sleep(ctx, 3*time.Second), timeout)
}
