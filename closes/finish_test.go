package closes_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

// flakyStore is a store whose first failures CloseItemUpdate calls find the
// database unavailable, as a failover does.
type flakyStore struct {
	accessStore
	failures atomic.Int64
}

func (s *flakyStore) CloseItemUpdate(ctx context.Context, it *lapse.CloseItem) error {
	if s.failures.Add(-1) >= 0 {
		return lapse.ErrStoreUnavailable
	}
	return s.accessStore.CloseItemUpdate(ctx, it)
}

// TestFinishOutlastsAnOutage: a batch run in the background whose Run
// stops because the database is unavailable is run again until it is done,
// not left running with no one running it.
func TestFinishOutlastsAnOutage(t *testing.T) {
	defer closes.SetFinishPause(time.Millisecond)()
	v := newEnv(t)
	ctx := ctxT(t)
	nos := v.orders("A", "u1", 5)
	flaky := &flakyStore{accessStore: v.s}
	c, err := closes.New(v.e, flaky)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Start(ctx, &closes.Selector{UserID: "u1"}, "outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	flaky.failures.Store(1)
	got, err := c.Run(ctx, b.ID, alice, nil)
	if lapse.ErrorCode(err) != lapse.EUNAVAILABLE || got.Status != lapse.CloseBatchRunning {
		t.Fatalf("Run in an outage = %+v, %v; want it stopped, running", got, err)
	}

	flaky.failures.Store(3)
	done, err := c.Finish(ctx, b.ID, alice, nil)
	if want := "done total 5 closed 5 skipped 0 failed 0 finished"; err != nil || counts(done) != want {
		t.Fatalf("Finish = %s, %v; want %s", counts(done), err, want)
	}
	v.drain()
	rows := v.closeRows(b.ID)
	for _, no := range nos {
		v.closedOnce(no, alice)
		if rs := rows["order:"+no]; len(rs) != 1 || rs[0].Result != "ok" {
			t.Errorf("audit rows of %s = %+v, want one ok", no, rs)
		}
	}

	// What is not an outage is not tried again.
	if _, err := c.Finish(ctx, 999, alice, nil); err == nil {
		t.Error("Finish of an unknown batch succeeded")
	}
}
