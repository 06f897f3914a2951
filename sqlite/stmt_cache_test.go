package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// TestStmtCache: the writer connection keeps the statements of one
// transaction prepared for the next, at most MaxCachedStmts of them, and
// batches of every size, past the bound too, close their orders.
func TestStmtCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	deadline := base.Add(time.Minute)
	sizes := sqlite.MaxCachedStmts + 6 // more batch sizes, so more statements, than the cache holds
	n := sizes * (sizes + 1) / 2
	creates := make([]*lapse.OrderCreateParams, n)
	for i := range creates {
		creates[i] = newOrder(fmt.Sprintf("SC-%05d", i), deadline)
	}
	if err := s.OrderCreateMany(ctx, creates); err != nil {
		t.Fatal(err)
	}
	if s.CachedStmts() == 0 {
		t.Errorf("no statement cached after a transaction")
	}
	next := 0
	for size := 1; size <= sizes; size++ {
		var ps []*lapse.OrderTransitionParams
		for range size {
			o, err := s.OrderGet(ctx, fmt.Sprintf("SC-%05d", next))
			if err != nil {
				t.Fatal(err)
			}
			next++
			p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: deadline, FiredBy: lapse.FiredByTimer, Deadline: true})
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		var moved []int64
		err := s.Tx(ctx, func(tx lapse.Store) error {
			var err error
			moved, err = tx.OrderTransitionMany(ctx, ps)
			return err
		})
		if err != nil || len(moved) != size {
			t.Fatalf("batch of %d: moved %d, %v", size, len(moved), err)
		}
	}
	if got := s.CachedStmts(); got > sqlite.MaxCachedStmts {
		t.Errorf("%d statements cached, want at most %d", got, sqlite.MaxCachedStmts)
	}
	var closed int
	if err := s.ReaderDB().QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE state = ?`, string(flows.Closed)).Scan(&closed); err != nil {
		t.Fatal(err)
	}
	if closed != n {
		t.Errorf("%d orders closed, want %d", closed, n)
	}
}
