package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// TestClaimFloor pins where a burn's claims start: from the start first,
// then from the latest deadline claimed, from the start again once every
// MaxSleep or twenty times what such a claim cost, whichever is longer, and
// then on from where that claim stopped.
func TestClaimFloor(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	f := &claimFloor{every: time.Hour}

	from, began := f.next()
	if !from.IsZero() || began.IsZero() {
		t.Fatalf("first claim from %v (began %v); want from the start", from, began)
	}
	f.claimed(began, at(5))
	if from, began := f.next(); !from.Equal(at(5)) || !began.IsZero() {
		t.Fatalf("after a claim up to +5s: from %v (began %v); want +5s", from, began)
	}
	f.claimed(time.Time{}, at(3)) // a parallel claim that began earlier
	f.claimed(time.Time{}, at(7))
	if from, _ := f.next(); !from.Equal(at(7)) {
		t.Fatalf("after claims up to +3s and +7s: from %v; want +7s, the latest", from)
	}

	f.mu.Lock()
	f.full = time.Now().Add(-2 * time.Hour) // MaxSleep has passed
	f.mu.Unlock()
	from, began = f.next()
	if !from.IsZero() || began.IsZero() {
		t.Fatalf("MaxSleep after the last claim from the start: from %v; want from the start", from)
	}
	if from, began := f.next(); !from.Equal(at(7)) || !began.IsZero() {
		t.Fatalf("beside a claim from the start still running: from %v (began %v); want +7s", from, began)
	}
	f.claimed(began, at(2)) // it found orders the floor had passed over
	if from, _ := f.next(); !from.Equal(at(2)) {
		t.Fatalf("after a claim from the start up to +2s: from %v; want +2s, to walk on from there", from)
	}

	// A claim from the start that costs more than a twentieth of MaxSleep
	// spaces those claims out to twenty times its cost.
	f = &claimFloor{every: time.Second, at: at(9), cost: time.Minute}
	f.full = time.Now().Add(-10 * time.Minute)
	if from, _ := f.next(); !from.Equal(at(9)) {
		t.Fatalf("10 minutes after a claim from the start that took a minute: from %v; want +9s", from)
	}
	f.full = time.Now().Add(-21 * time.Minute)
	if from, _ := f.next(); !from.IsZero() {
		t.Fatalf("21 minutes after a claim from the start that took a minute: from %v; want from the start", from)
	}
}

// fromRecording records the From of every claim made in its transactions,
// and runs after, if set, once the first transaction ended.
type fromRecording struct {
	lapse.Store
	mu    sync.Mutex
	froms []time.Time
	after func()
}

func (s *fromRecording) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	err := s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(&fromRecordingTx{Store: tx, rec: s}) })
	if s.after != nil {
		s.after()
		s.after = nil
	}
	return err
}

type fromRecordingTx struct {
	lapse.Store
	rec *fromRecording
}

func (s *fromRecordingTx) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	s.rec.mu.Lock()
	s.rec.froms = append(s.rec.froms, p.From)
	s.rec.mu.Unlock()
	return s.Store.OrderClaimDue(ctx, p)
}

// TestBurnWalksOn pins a burn of a backlog: each claim after the first reads
// from the deadline of the latest order claimed, every due order closes,
// and an order given a deadline before the walk's floor during the burn is
// closed by the next pass.
func TestBurnWalksOn(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, _, _ := lookEngines(t, clk)
	rec := &fromRecording{Store: e.work}
	e.work = rec
	ctx := context.Background()
	var deadlines []time.Time
	for i := range 25 {
		o := lookCreate(t, e, fmt.Sprintf("W-%02d", i), time.Duration(10+i)*time.Second)
		deadlines = append(deadlines, *o.DeadlineAt)
	}
	clk.Set(t0.Add(time.Minute))
	c := NewClaimer(e, ClaimerConfig{Batch: 10, Workers: 1})
	// After the first claim, an order whose deadline (t0+1s) is before the
	// floor: the walk passes over it, the next pass closes it.
	var early *lapse.Order
	rec.after = func() {
		clk.Set(t0.Add(-9 * time.Second))
		early = lookCreate(t, e, "W-EARLY", 10*time.Second)
		clk.Set(t0.Add(time.Minute))
	}
	n, err := c.RunOnce(ctx)
	if err != nil || n != 25 {
		t.Fatalf("RunOnce = %d, %v; want 25 closed", n, err)
	}
	// Claims of 10: from the start; from the 10th deadline (that order is
	// closed: its entry is gone); from the 20th, which comes back short.
	want := []time.Time{{}, deadlines[9], deadlines[19]}
	if len(rec.froms) != len(want) {
		t.Fatalf("claims from %v; want %v", rec.froms, want)
	}
	for i := range want {
		if !rec.froms[i].Equal(want[i]) {
			t.Fatalf("claim %d from %v; want %v (all: %v)", i, rec.froms[i], want[i], rec.froms)
		}
	}
	for i := range 25 {
		if o, err := e.Order(ctx, fmt.Sprintf("W-%02d", i)); err != nil || o.State != flows.Closed {
			t.Fatalf("W-%02d after the burn: %+v, %v; want CLOSED", i, o, err)
		}
	}
	if o, err := e.Order(ctx, early.OrderNo); err != nil || o.State != flows.Unpaid {
		t.Fatalf("the early order after the burn: %+v, %v; want still UNPAID (the walk was past it)", o, err)
	}
	if n, err := c.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("the next pass: %d, %v; want the early order closed", n, err)
	}
	if !rec.froms[len(rec.froms)-1].IsZero() {
		t.Errorf("the next pass claimed from %v; want from the start", rec.froms[len(rec.froms)-1])
	}
}

// transitionHook runs hook in each transaction when it writes its
// transitions, after its claim, and fails the transaction if hook returns an
// error.
type transitionHook struct {
	lapse.Store
	hook func() error
}

func (s *transitionHook) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(&transitionHookTx{Store: tx, hook: s.hook}) })
}

type transitionHookTx struct {
	lapse.Store
	hook func() error
}

func (s *transitionHookTx) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	if err := s.hook(); err != nil {
		return nil, err
	}
	return s.Store.OrderTransitionMany(ctx, ps)
}

// TestClaimFloorMovesBeforeCommit pins that a claim moves the floor as soon
// as it returns, while its transaction still holds what it claimed, so that
// the claims of other workers read on past those orders instead of stepping
// over each of them locked; and that a batch that rolls back sends the next
// claim to the start, where the orders it held are due again.
func TestClaimFloorMovesBeforeCommit(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, _, _ := lookEngines(t, clk)
	ctx := context.Background()
	var deadlines []time.Time
	for i := range 6 {
		o := lookCreate(t, e, fmt.Sprintf("F-%02d", i), time.Duration(10+i)*time.Second)
		deadlines = append(deadlines, *o.DeadlineAt)
	}
	clk.Set(t0.Add(time.Minute))
	c := NewClaimer(e, ClaimerConfig{Batch: 3, Workers: 1})
	floor := &claimFloor{every: time.Hour}
	var during time.Time
	hook := &transitionHook{Store: e.work, hook: func() error {
		during, _ = floor.next()
		return nil
	}}
	e.work = hook
	if claimed, fired, err := c.fireBatch(ctx, lapse.FiredBySweep, 0, 3, floor); err != nil || claimed != 3 || fired != 3 {
		t.Fatalf("first batch: claimed %d, fired %d, %v; want 3 and 3", claimed, fired, err)
	}
	if !during.Equal(deadlines[2]) {
		t.Fatalf("inside the first batch's transaction the floor was %v; want %v, its latest deadline", during, deadlines[2])
	}

	failed := errors.New("the database went away")
	hook.hook = func() error { return failed }
	if _, _, err := c.fireBatch(ctx, lapse.FiredBySweep, 0, 3, floor); !errors.Is(err, failed) {
		t.Fatalf("second batch: %v; want it to fail", err)
	}
	if from, _ := floor.next(); !from.IsZero() {
		t.Fatalf("after a batch rolled back the next claim starts at %v; want the start", from)
	}
	hook.hook = func() error { return nil }
	if claimed, fired, err := c.fireBatch(ctx, lapse.FiredBySweep, 0, 3, floor); err != nil || claimed != 3 || fired != 3 {
		t.Fatalf("after the rollback: claimed %d, fired %d, %v; want the 3 it held", claimed, fired, err)
	}
	for i := range 6 {
		if o, err := e.Order(ctx, fmt.Sprintf("F-%02d", i)); err != nil || o.State != flows.Closed {
			t.Fatalf("F-%02d: %+v, %v; want CLOSED", i, o, err)
		}
	}
}
