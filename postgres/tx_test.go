package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
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

// TestLockTimeoutBusy: a write that waits past lock_timeout for a row
// another transaction holds (55P03), the victim of a deadlock (40P01) and
// a statement past statement_timeout (57014) are lapse.ErrStoreBusy (which
// is lapse.ErrStoreUnavailable: the API answers 503 with Retry-After), on
// their own and inside a Tx, and leave nothing written.
func TestLockTimeoutBusy(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 3, LockTimeout: 300 * time.Millisecond, StatementTimeout: 2 * time.Second})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	wantBusy := func(what string, err error, code string) {
		t.Helper()
		if !errors.Is(err, lapse.ErrStoreBusy) || !errors.Is(err, lapse.ErrStoreUnavailable) || lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
			t.Errorf("%s: %v (code %s), want lapse.ErrStoreBusy", what, err, lapse.ErrorCode(err))
		}
		if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || pe.Code != code {
			t.Errorf("%s: %v, want SQLSTATE %s inside", what, err, code)
		}
	}
	var orders [2]*lapse.Order
	for i, no := range []string{"LB-A", "LB-B"} {
		o, _, err := s.OrderCreate(ctx, createParams(no, &now, now))
		if err != nil {
			t.Fatal(err)
		}
		orders[i] = o
	}
	set := func(o *lapse.Order, id string) *lapse.OrderDeadlineSetParams {
		return &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: now.Add(time.Hour), At: now,
			Outbox: []lapse.OutboxEvent{{ID: id, Type: "order.deadline_set", Payload: []byte(`{}`), CreatedAt: now}}}
	}

	locked, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- s.Tx(ctx, func(tx lapse.Store) error {
			_, err := tx.OrderLock(ctx, "LB-A")
			close(locked)
			<-release
			return err
		})
	}()
	<-locked
	_, err := s.OrderDeadlineSet(ctx, set(orders[0], "7b0f0a9e-5d1c-4c55-9a51-0c8f1a6c0001"))
	wantBusy("OrderDeadlineSet of a row another transaction holds", err, "55P03")
	err = s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctx, createParams("LB-C", &now, now)); err != nil {
			return err
		}
		_, err := tx.OrderDeadlineSet(ctx, set(orders[0], "7b0f0a9e-5d1c-4c55-9a51-0c8f1a6c0002"))
		return err
	})
	wantBusy("Tx whose OrderDeadlineSet waits for a row another transaction holds", err, "55P03")
	close(release)
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	if got, err := s.OrderGet(ctx, "LB-A"); err != nil || got.Version != 1 {
		t.Errorf("LB-A after the timed-out writes: %+v, %v; want it at version 1", got, err)
	}
	if _, err := s.OrderGet(ctx, "LB-C"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("LB-C, created in the Tx that timed out: %v, want lapse.ErrOrderNotFound", err)
	}

	wantBusy("a statement past the statement timeout", s.Sleep(ctx, 5*time.Second), "57014")

	// A deadlock, on a store without a lock timeout, so that the server's
	// deadlock check (deadlock_timeout, 1 s by default) ends the wait.
	d := openStore(t, dsn, postgres.Config{MaxConns: 2, LockTimeout: -1, StatementTimeout: 20 * time.Second})
	var both sync.WaitGroup
	both.Add(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, pair := range [][2]string{{"LB-A", "LB-B"}, {"LB-B", "LB-A"}} {
		wg.Go(func() {
			errs[i] = d.Tx(ctx, func(tx lapse.Store) error {
				_, err := tx.OrderLock(ctx, pair[0])
				both.Done()
				if err != nil {
					return err
				}
				both.Wait()
				_, err = tx.OrderLock(ctx, pair[1])
				return err
			})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("Tx results %v and %v, want one deadlock victim", errs[0], errs[1])
	}
	victim := errs[0]
	if victim == nil {
		victim = errs[1]
	}
	wantBusy("the deadlock's victim", victim, "40P01")
}
