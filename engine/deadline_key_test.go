package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// TestSetDeadlineKey: a deadline change under an idempotency key is made
// once. The same change again under its key changes nothing and returns
// the order as it stands, even once the deadline it moved has passed; the
// key with another change (another extension, time or reason) is refused
// with ECONFLICT and changes nothing; another key is another change.
func TestSetDeadlineKey(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		api := engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}
		create(t, e, checkout("K-1", 15*time.Minute))
		extend := engine.DeadlineChange{ExtendBy: 10 * time.Minute, Reason: "support", By: api, Key: "k-1"}
		want := t0.Add(25 * time.Minute)
		check := func(what string, o *lapse.Order, version int64, moved, wantMoved bool, err error) {
			t.Helper()
			if err != nil || moved != wantMoved || o.Version != version || !o.DeadlineAt.Equal(want) {
				t.Fatalf("%s = %+v, moved %v, %v; want deadline %s, version %d, moved %v", what, o, moved, err, want, version, wantMoved)
			}
		}
		o, moved, err := e.SetDeadline(ctxT(t), "K-1", extend)
		check("extend under k-1", o, 2, moved, true, err)
		for range 2 {
			o, moved, err = e.SetDeadline(ctxT(t), "K-1", extend)
			check("the same extension under k-1 again", o, 2, moved, false, err)
		}
		sameAgain := extend
		sameAgain.ExtendBy = 600 * time.Second // the same duration, spelt otherwise
		o, moved, err = e.SetDeadline(ctxT(t), "K-1", sameAgain)
		check("600s under k-1", o, 2, moved, false, err)
		if n, err := e.DeadlineStake(ctxT(t), "K-1", extend); n != 0 || err != nil {
			t.Errorf("DeadlineStake of the extension made = %d, %v; want 0", n, err)
		}

		other := extend
		other.ExtendBy = 20 * time.Minute
		soon := t0.Add(time.Minute)
		for _, c := range []engine.DeadlineChange{other, {At: &soon, Reason: "support", By: api, Key: "k-1"},
			{ExtendBy: 10 * time.Minute, Reason: "another", By: api, Key: "k-1"}} {
			if _, _, err := e.SetDeadline(ctxT(t), "K-1", c); !errors.Is(err, engine.ErrDeadlineKeyUsed) || lapse.ErrorCode(err) != lapse.ECONFLICT {
				t.Errorf("another change under k-1 (%+v) = %v, want ErrDeadlineKeyUsed", c, err)
			}
			if _, err := e.DeadlineStake(ctxT(t), "K-1", c); !errors.Is(err, engine.ErrDeadlineKeyUsed) {
				t.Errorf("DeadlineStake of another change under k-1 = %v, want ErrDeadlineKeyUsed", err)
			}
		}
		if _, _, err := e.SetDeadline(ctxT(t), "K-1", engine.DeadlineChange{ExtendBy: time.Minute, By: api, Key: "bad key"}); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("a key with a space = %v, want invalid", err)
		}
		o, _ = e.Order(ctxT(t), "K-1")
		check("K-1 after the refusals", o, 2, false, false, nil)
		if _, events, _ := history(t, e, "K-1"); events[lapse.EventOrderDeadlineChanged] != 1 {
			t.Errorf("K-1 has %d order.deadline_changed events, want 1", events[lapse.EventOrderDeadlineChanged])
		}

		// Another key is another change; so is a change without one.
		k2 := extend
		k2.Key = "k-2"
		want = want.Add(10 * time.Minute)
		o, moved, err = e.SetDeadline(ctxT(t), "K-1", k2)
		check("extend under k-2", o, 3, moved, true, err)
		noKey := extend
		noKey.Key = ""
		want = want.Add(10 * time.Minute)
		o, moved, err = e.SetDeadline(ctxT(t), "K-1", noKey)
		check("extend without a key", o, 4, moved, true, err)

		// A time, under a key: the same instant in another zone is the
		// same change.
		at := t0.Add(2 * time.Hour)
		atElsewhere := at.In(time.FixedZone("CST", 8*3600))
		want = at
		o, moved, err = e.SetDeadline(ctxT(t), "K-1", engine.DeadlineChange{At: &at, By: api, Key: "k-3"})
		check("deadline_at under k-3", o, 5, moved, true, err)
		o, moved, err = e.SetDeadline(ctxT(t), "K-1", engine.DeadlineChange{At: &atElsewhere, By: api, Key: "k-3"})
		check("the same deadline_at under k-3 again", o, 5, moved, false, err)

		// Once the deadline has passed, a retry still finds its change;
		// a new change is refused as passed.
		clk.Set(at.Add(time.Second))
		o, moved, err = e.SetDeadline(ctxT(t), "K-1", extend)
		check("k-1 again after the deadline passed", o, 5, moved, false, err)
		if _, _, err := e.SetDeadline(ctxT(t), "K-1", engine.DeadlineChange{ExtendBy: time.Minute, By: api, Key: "k-4"}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("a new change after the deadline passed = %v, want conflict", err)
		}
	})
}

// TestSetDeadlineKeyConcurrent: retries of one keyed extension that race
// (a client that gave up waiting and sent it again while the first was
// still running) extend once between them: each takes the order's lock
// before it looks for the key.
func TestSetDeadlineKeyConcurrent(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		create(t, e, checkout("KC-1", 15*time.Minute))
		c := engine.DeadlineChange{ExtendBy: 10 * time.Minute, By: engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}, Key: "race"}
		const n = 8
		errs := make(chan error, n)
		moves := make(chan bool, n)
		for range n {
			go func() {
				_, moved, err := e.SetDeadline(ctxT(t), "KC-1", c)
				errs <- err
				moves <- moved
			}()
		}
		movedOnce := 0
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("SetDeadline under the raced key: %v", err)
			}
			if <-moves {
				movedOnce++
			}
		}
		o, err := e.Order(ctxT(t), "KC-1")
		if err != nil || movedOnce != 1 || o.Version != 2 || !o.DeadlineAt.Equal(t0.Add(25*time.Minute)) {
			t.Fatalf("%d raced retries of one extension: moved %d times, order %+v, %v; want it extended once", n, movedOnce, o, err)
		}
	})
}
