package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// TestClaimFloor pins where claims start: from the start first, then from
// the latest deadline claimed, from the start again once every MaxSleep or
// twenty times what such a claim cost, whichever is longer, and then on
// from where that claim stopped.
func TestClaimFloor(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	key := func(s int) floorKey { return floorKey{at: at(s)} }
	f := &claimFloor{every: time.Hour}

	first := f.next()
	if !first.from.isZero() || first.began.IsZero() {
		t.Fatalf("first claim %+v; want from the start", first)
	}
	f.claimed(first, key(5))
	if turn := f.next(); turn.from != key(5) || !turn.began.IsZero() {
		t.Fatalf("after a claim up to +5s: %+v; want from +5s", turn)
	}
	f.claimed(f.next(), key(3)) // a parallel claim that began earlier
	f.claimed(f.next(), key(7))
	if turn := f.next(); turn.from != key(7) {
		t.Fatalf("after claims up to +3s and +7s: from %v; want +7s, the latest", turn.from)
	}

	f.mu.Lock()
	f.full = time.Now().Add(-2 * time.Hour) // MaxSleep has passed
	f.mu.Unlock()
	full := f.next()
	if !full.from.isZero() || full.began.IsZero() {
		t.Fatalf("MaxSleep after the last claim from the start: %+v; want from the start", full)
	}
	if turn := f.next(); turn.from != key(7) || !turn.began.IsZero() {
		t.Fatalf("beside a claim from the start still running: %+v; want from +7s", turn)
	}
	f.claimed(full, key(2)) // it found orders the floor had passed over
	if turn := f.next(); turn.from != key(2) {
		t.Fatalf("after a claim from the start up to +2s: from %v; want +2s, to walk on from there", turn.from)
	}

	// A claim from the start that costs more than a twentieth of MaxSleep
	// spaces those claims out to twenty times its cost.
	f = &claimFloor{every: time.Second, at: key(9), cost: time.Minute}
	f.full = time.Now().Add(-10 * time.Minute)
	if turn := f.next(); turn.from != key(9) {
		t.Fatalf("10 minutes after a claim from the start that took a minute: from %v; want +9s", turn.from)
	}
	f.full = time.Now().Add(-21 * time.Minute)
	if turn := f.next(); !turn.from.isZero() {
		t.Fatalf("21 minutes after a claim from the start that took a minute: from %v; want from the start", turn.from)
	}
}

// TestClaimFloorLooksAndLowers pins the floor the precise path keeps: a
// look from the start sets it at what it found, or at the look's time when
// that is earlier, and never moves it on; a deadline this process sets
// before the floor moves it back, and a claim or look that began before
// that may not move it on again; a deadline set while there is no floor
// holds back the floor that the next read from the start sets.
func TestClaimFloorLooksAndLowers(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	key := func(s int) floorKey { return floorKey{at: at(s)} }
	f := &claimFloor{every: time.Hour}

	look := f.next()
	f.looked(look, at(0), at(30), true) // nothing due before +30s
	if turn := f.next(); turn.from != key(0) {
		t.Fatalf("after a look at +0s from the start that found +30s: from %v; want +0s, the look's time", turn.from)
	}
	f.claimed(f.next(), key(31))
	f.looked(f.next(), at(40), at(50), true) // a look from the floor
	if turn := f.next(); turn.from != key(31) {
		t.Fatalf("a look from the floor moved it to %v; want it left at +31s", turn.from)
	}
	f.mu.Lock()
	f.full = time.Now().Add(-2 * time.Hour)
	f.mu.Unlock()
	f.looked(f.next(), at(40), at(20), true) // from the start: a deadline at +20s waits
	if turn := f.next(); turn.from != key(20) {
		t.Fatalf("after a look from the start that found +20s: from %v; want +20s", turn.from)
	}

	// A deadline set before the floor moves it back; a claim that began
	// before that does not move it on.
	before := f.next()
	f.lower(at(10))
	f.claimed(before, key(25))
	if turn := f.next(); turn.from != key(10) {
		t.Fatalf("after a deadline at +10s and a claim that began before it: from %v; want +10s", turn.from)
	}
	f.lower(at(15)) // after the floor: nothing to do
	f.claimed(f.next(), key(25))
	if turn := f.next(); turn.from != key(25) {
		t.Fatalf("after a claim that began after the deadline: from %v; want +25s", turn.from)
	}

	// No floor: a deadline set while the read from the start runs holds
	// back the floor it sets.
	f.restart()
	full := f.next()
	if !full.from.isZero() {
		t.Fatalf("after a restart: from %v; want the start", full.from)
	}
	f.lower(at(12))
	f.looked(full, at(40), at(45), true)
	if turn := f.next(); turn.from != key(12) {
		t.Fatalf("a look from the start with a deadline at +12s set meanwhile: from %v; want +12s", turn.from)
	}
	// A claim that began before a restart does not set a floor past the
	// orders the rolled-back claim held.
	old := f.next()
	f.restart()
	f.claimed(old, key(60))
	if turn := f.next(); !turn.from.isZero() {
		t.Fatalf("a claim that began before the restart set the floor at %v; want none", turn.from)
	}
}

// fromRecording records the From of every claim made in its transactions,
// and runs after, if set, once the first transaction ended.
type fromRecording struct {
	lapse.Store
	mu      sync.Mutex
	froms   []time.Time
	fromIDs []int64
	after   func()
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
	s.rec.fromIDs = append(s.rec.fromIDs, p.FromID)
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

// TestBurnWalksOnAmongTies pins a burn of orders that share one deadline
// (a flash sale): each claim after the first reads on from the id of the
// last order claimed, at that deadline, and every order closes.
func TestBurnWalksOnAmongTies(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, _, _ := lookEngines(t, clk)
	rec := &fromRecording{Store: e.work}
	e.work = rec
	ctx := context.Background()
	var orders []*lapse.Order
	for i := range 25 {
		orders = append(orders, lookCreate(t, e, fmt.Sprintf("T-%02d", i), 10*time.Second))
	}
	deadline := *orders[0].DeadlineAt
	clk.Set(t0.Add(time.Minute))
	c := NewClaimer(e, ClaimerConfig{Batch: 10, Workers: 1})
	if n, err := c.RunOnce(ctx); err != nil || n != 25 {
		t.Fatalf("RunOnce = %d, %v; want 25 closed", n, err)
	}
	// Claims of 10 by id: from the start; after the 10th; after the 20th.
	wantIDs := []int64{0, orders[9].ID, orders[19].ID}
	if !slices.Equal(rec.fromIDs, wantIDs) {
		t.Fatalf("claims from ids %v; want %v", rec.fromIDs, wantIDs)
	}
	for i, from := range rec.froms[1:] {
		if !from.Equal(deadline) {
			t.Fatalf("claim %d from %v; want the shared deadline %v", i+1, from, deadline)
		}
	}
}

// TestClaimFloorTies pins the floor among orders that share a deadline: it
// moves on by id, and a deadline lowered to that time passes over none of
// them again.
func TestClaimFloorTies(t *testing.T) {
	d := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	f := &claimFloor{every: time.Hour}
	f.claimed(f.next(), floorKey{d, 500})
	f.claimed(f.next(), floorKey{d, 1000})
	f.claimed(f.next(), floorKey{d, 700}) // a parallel claim that began earlier
	if turn := f.next(); turn.from != (floorKey{d, 1000}) {
		t.Fatalf("after claims up to ids 500, 1000 and 700 at one deadline: from %+v; want id 1000", turn.from)
	}
	f.claimed(f.next(), floorKey{d.Add(time.Second), 3})
	if turn := f.next(); turn.from != (floorKey{d.Add(time.Second), 3}) {
		t.Fatalf("after a claim up to a later deadline and a lower id: from %+v; want it", turn.from)
	}
	f.lower(d)
	if turn := f.next(); turn.from != (floorKey{at: d}) {
		t.Fatalf("after a deadline set at the shared one: from %+v; want every order due then", turn.from)
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
		during = floor.next().from.at
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
	if from := floor.next().from; !from.isZero() {
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

// floorRecording records where every look at the next deadline, and every
// claim made in its transactions, started.
type floorRecording struct {
	fromRecording
	looks []time.Time
}

func (s *floorRecording) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	s.mu.Lock()
	s.looks = append(s.looks, from)
	s.mu.Unlock()
	return s.Store.OrderNextDeadline(ctx, flows, from)
}

// starts returns the looks' and the claims' starts so far.
func (s *floorRecording) starts() (looks, claims []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.looks), slices.Clone(s.froms)
}

// pastOrder writes an unpaid checkout order due at deadline, an hour ago,
// straight to s, as another process would: no engine is told of it.
func pastOrder(t *testing.T, s lapse.Store, orderNo string, deadline time.Time) *lapse.Order {
	t.Helper()
	now := time.Now().UTC()
	o, _, err := s.OrderCreate(context.Background(), &lapse.OrderCreateParams{
		Order: &lapse.Order{OrderNo: orderNo, Flow: "checkout", State: flows.Unpaid, DeadlineAt: &deadline, Amount: 100,
			Currency: "CNY", UserID: "u", Version: 1, CreatedAt: now, UpdatedAt: now, FiredBy: lapse.FiredByApp},
		Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, CreatedAt: now}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// waitClosed waits up to 10 s for each order to close, by the timer path.
func waitClosed(t *testing.T, e *Engine, orderNos ...string) {
	t.Helper()
	for _, no := range orderNos {
		for give := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			o, err := e.Order(context.Background(), no)
			if err != nil {
				t.Fatal(err)
			}
			if o.State == flows.Closed {
				if o.FiredBy != lapse.FiredByTimer {
					t.Fatalf("%s closed by %s; want the precise path", no, o.FiredBy)
				}
				break
			}
			if time.Now().After(give) {
				t.Fatalf("%s still %s after 10 s", no, o.State)
			}
		}
	}
}

// TestPreciseReadsOnFromFloor pins the floor the precise path keeps across
// its passes: once its first look has read the due index from the start,
// its looks and claims read from the latest order closed, not over the
// index entries of every order closed since the last vacuum, whatever the
// pace of deadlines; a deadline this process sets before that floor moves
// it back, so the order is closed at once; and one another process sets
// there is found by the look from the start made every MaxSleep.
func TestPreciseReadsOnFromFloor(t *testing.T) {
	e, _, _ := lookEngines(t, lapse.SystemClock{})
	rec := &floorRecording{fromRecording: fromRecording{Store: e.work}}
	e.work = rec
	ctx := context.Background()
	// MaxSleep an hour: no look from the start but the first.
	c := NewClaimer(e, ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour})
	for i, ttl := range []time.Duration{300, 450, 600} {
		lookCreate(t, e, fmt.Sprintf("PF-%d", i), ttl*time.Millisecond)
	}
	c.Start(ctx)
	waitClosed(t, e, "PF-0", "PF-1", "PF-2")
	// The sweep's first pass looks from the start, and so does the precise
	// path's first look, if it did not take the sweep's; no other.
	looks, claims := rec.starts()
	first := 0
	for first < len(looks) && looks[first].IsZero() {
		first++
	}
	if first == 0 || first > 2 || len(looks) < first+2 || len(claims) < 2 {
		t.Fatalf("looks from %v, claims from %v; want one or two looks from the start, then more looks and claims", looks, claims)
	}
	for i, from := range looks[first:] {
		if from.IsZero() {
			t.Errorf("look %d read from the start: %v", first+i, looks)
		}
	}
	for i, from := range claims {
		if from.IsZero() {
			t.Errorf("claim %d read from the start: %v", i, claims)
		}
	}

	// Due an hour ago, before the floor, and told as this process tells
	// the deadlines it sets: closed at once.
	early := pastOrder(t, e.store, "PF-TOLD", time.Now().UTC().Add(-time.Hour))
	e.deadlineSet(early.ID, *early.DeadlineAt)
	waitClosed(t, e, "PF-TOLD")
	c.Stop()

	// Another process's deadline before the floor: a look from the start,
	// once every MaxSleep, finds it.
	c = NewClaimer(e, ClaimerConfig{MaxSleep: 200 * time.Millisecond, SweepInterval: time.Hour})
	c.Start(ctx)
	defer c.Stop()
	lookCreate(t, e, "PF-3", 300*time.Millisecond)
	waitClosed(t, e, "PF-3")
	pastOrder(t, e.store, "PF-OTHER", time.Now().UTC().Add(-time.Hour))
	waitClosed(t, e, "PF-OTHER")
}
