package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// memTrigger is a SharedTrigger held in memory, with seed 000's semantics,
// that can be made to fail or to lose its data. Its member of an order is
// the order's id in decimal.
type memTrigger struct {
	mu         sync.Mutex
	due        map[string]time.Time
	processing map[string]time.Time
	attempts   map[string]int
	notify     []string
	seeded     bool
	failing    error
	adds       int
	seeds      int
	lost       int // how many times it lost its data
	begun      int // lost as the last BeginSeed found it; -1: none since MarkSeeded
	// onAdd, when set, runs after each Add, with mu held.
	onAdd func(m *memTrigger)
}

func newMemTrigger() *memTrigger {
	return &memTrigger{due: map[string]time.Time{}, processing: map[string]time.Time{}, attempts: map[string]int{}, begun: -1}
}

func (m *memTrigger) fail(err error) { m.mu.Lock(); m.failing = err; m.mu.Unlock() }

func (m *memTrigger) flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushLocked()
}

func (m *memTrigger) flushLocked() {
	m.due, m.processing, m.attempts, m.seeded = map[string]time.Time{}, map[string]time.Time{}, map[string]int{}, false
	m.lost++
}

func (m *memTrigger) Add(_ context.Context, due []engine.TriggerDue) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return m.failing
	}
	for _, d := range due {
		k := strconv.FormatInt(d.OrderID, 10)
		at := d.At
		if lease, ok := m.processing[k]; ok && lease.Before(at) {
			at = lease
		}
		if cur, ok := m.due[k]; !ok || at.Before(cur) { // never later (ZADD LT)
			m.due[k] = at
		}
		delete(m.processing, k)
		m.adds++
	}
	if m.onAdd != nil {
		m.onAdd(m)
	}
	return nil
}

func (m *memTrigger) Claim(_ context.Context, now time.Time, lease time.Duration, limit int) ([]string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return nil, false, m.failing
	}
	for k, until := range m.processing {
		if !until.After(now) {
			m.due[k] = now
			delete(m.processing, k)
		}
	}
	var out []string
	for k, at := range m.due {
		if !at.After(now) {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return m.due[out[i]].Before(m.due[out[j]]) })
	if len(out) > limit {
		out = out[:limit]
	}
	for _, k := range out {
		delete(m.due, k)
		m.processing[k] = now.Add(lease)
	}
	return out, m.seeded, nil
}

func (m *memTrigger) Done(_ context.Context, members []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return m.failing
	}
	for _, k := range members {
		delete(m.processing, k)
		delete(m.attempts, k)
	}
	return nil
}

func (m *memTrigger) Requeue(_ context.Context, due []engine.TriggerDue) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return m.failing
	}
	for _, d := range due {
		k := strconv.FormatInt(d.OrderID, 10)
		if _, ok := m.processing[k]; ok {
			delete(m.processing, k)
			m.due[k] = d.At
		}
	}
	return nil
}

func (m *memTrigger) Release(_ context.Context, members []string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return m.failing
	}
	for _, k := range members {
		if _, ok := m.processing[k]; ok {
			delete(m.processing, k)
			m.due[k] = now
		}
	}
	return nil
}

func (m *memTrigger) Retry(_ context.Context, member string, now time.Time, delays []time.Duration) (int, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return 0, false, m.failing
	}
	m.attempts[member]++
	n := m.attempts[member]
	delete(m.processing, member)
	if n <= len(delays) {
		m.due[member] = now.Add(delays[n-1])
		return n, false, nil
	}
	m.notify = append(m.notify, member)
	delete(m.attempts, member)
	return n, true, nil
}

func (m *memTrigger) Next(context.Context) (time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return time.Time{}, false, m.failing
	}
	var next time.Time
	for _, at := range m.due {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero(), nil
}

func (m *memTrigger) BeginSeed(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return m.failing
	}
	m.begun = m.lost
	return nil
}

func (m *memTrigger) MarkSeeded(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing != nil {
		return m.failing
	}
	begun := m.begun
	m.begun = -1
	if begun >= 0 && begun != m.lost {
		return errors.New("memTrigger: lost its data while it was being seeded")
	}
	m.seeded = true
	m.seeds++
	return nil
}

func (m *memTrigger) ToNotify(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.notify)), m.failing
}

func (m *memTrigger) Ping(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failing
}

// has reports whether the order with id id is due.
func (m *memTrigger) OrderID(member string) (int64, bool) {
	id, err := strconv.ParseInt(member, 10, 64)
	return id, err == nil
}

func (m *memTrigger) has(id int64) bool { return m.hasMember(strconv.FormatInt(id, 10)) }

// dueAt is the deadline the trigger holds for the order id.
func (m *memTrigger) dueAt(id int64) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.due[strconv.FormatInt(id, 10)]
	return at, ok
}

func (m *memTrigger) hasMember(k string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.due[k]
	return ok
}

// idOf is the database id of the order orderNo.
func idOf(t *testing.T, s lapse.Store, orderNo string) int64 {
	t.Helper()
	o, err := s.OrderGet(context.Background(), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	return o.ID
}

// insertDue writes orders straight into the store, due at at, as another
// process would, so that this process's in-process timer knows nothing of
// them.
func insertDue(t *testing.T, s lapse.Store, prefix string, n int, at time.Time) []string {
	t.Helper()
	var ps []*lapse.OrderCreateParams
	var nos []string
	for i := range n {
		no := orderNo(prefix, i)
		nos = append(nos, no)
		due := at
		o := &lapse.Order{OrderNo: no, Flow: "checkout", State: flows.Unpaid, DeadlineAt: &due, Amount: 100, Currency: "CNY",
			UserID: "u", Version: 1, CreatedAt: time.Now(), UpdatedAt: time.Now(), FiredBy: lapse.FiredByApp}
		ps = append(ps, &lapse.OrderCreateParams{Order: o, Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate,
			Version: 1, FiredBy: lapse.FiredByApp, CreatedAt: time.Now()}})
	}
	if err := s.OrderCreateMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	return nos
}

func triggerEngine(t *testing.T, tr engine.SharedTrigger) (*engine.Engine, lapse.Store) {
	t.Helper()
	return triggerEngineLog(t, tr, nil)
}

// triggerEngineLog is triggerEngine logging to log, unless it is nil.
func triggerEngineLog(t *testing.T, tr engine.SharedTrigger, log *slog.Logger) (*engine.Engine, lapse.Store) {
	t.Helper()
	s := openSQLite(t)
	e, err := engine.New(s, flows.Builtin(), engine.Config{Trigger: tr, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}

// TestSharedTriggerFirstSeed: a trigger that holds nothing at the start is
// seeded from the database, said at info level (it is most likely new); one
// that loses its data while the process uses it is seeded again with a
// warning.
func TestSharedTriggerFirstSeed(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger() // not seeded: a fresh Redis
	logs := &lockedBuffer{}
	e, s := triggerEngineLog(t, tr, slog.New(slog.NewTextHandler(logs, nil)))
	later := insertDue(t, s, "FS", 3, time.Now().Add(time.Hour))
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.Start(context.Background())
	t.Cleanup(c.Stop)
	seeds := func() int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.seeds
	}
	waitUntil(t, 30*time.Second, func() bool { return seeds() == 1 && tr.has(idOf(t, s, later[2])) })
	if got := logs.String(); strings.Contains(got, "level=WARN") || !strings.Contains(got, "level=INFO msg=\"shared trigger holds no deadlines yet") {
		t.Errorf("the first seed logged:\n%s", got)
	}
	tr.flush()
	waitUntil(t, 30*time.Second, func() bool { return seeds() == 2 })
	if got := logs.String(); !strings.Contains(got, "level=WARN msg=\"shared trigger lost its data") {
		t.Errorf("a trigger that lost its data logged:\n%s", got)
	}
}

func firedBy(t *testing.T, e *engine.Engine, nos []string) map[lapse.FiredBy]int {
	t.Helper()
	out := map[lapse.FiredBy]int{}
	for _, no := range nos {
		o, err := e.Order(context.Background(), no)
		if err != nil {
			t.Fatal(err)
		}
		if o.State == flows.Closed {
			out[o.FiredBy]++
		}
	}
	return out
}

// TestSharedTrigger: deadlines set by another process reach this one through
// the shared trigger, which fires them at once (path redis) although this
// process's own timer sleeps for a minute; the deadlines this process sets
// are added to the trigger.
func TestSharedTrigger(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, s := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.Start(context.Background())
	t.Cleanup(c.Stop)

	at := time.Now().Add(300 * time.Millisecond)
	nos := insertDue(t, s, "SH", 50, at)
	due := make([]engine.TriggerDue, len(nos))
	for i, no := range nos {
		due[i] = engine.TriggerDue{OrderID: idOf(t, s, no), At: at}
	}
	if err := tr.Add(context.Background(), due); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, func() bool { return firedBy(t, e, nos)[lapse.FiredByRedis] == len(nos) })
	for _, no := range nos {
		o, _ := e.Order(context.Background(), no)
		if o.ClosedAt.Before(at) {
			t.Errorf("%s closed at %v, before its deadline %v", no, o.ClosedAt, at)
		}
	}
	// A deadline set here is handed to the trigger.
	local := create(t, e, checkout("SH-local", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return tr.has(local.ID) })
	if st := e.TriggerStatus(); !st.Configured || st.Using != "redis" || st.Degraded {
		t.Errorf("status %+v", st)
	}
}

// TestSharedTriggerDegrades: the trigger fails: the engine degrades, the
// sweep fires on its faster beat (path sweep), and once the trigger answers
// again it is seeded from the database and takes over. A flushed trigger is
// seeded again. Operators can force either path.
func TestSharedTriggerDegrades(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, s := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour, SweepGrace: 10 * time.Millisecond,
		DegradedSweep: 200 * time.Millisecond})
	c.Start(context.Background())
	t.Cleanup(c.Stop)

	tr.fail(errors.New("redis: i/o timeout"))
	waitUntil(t, 30*time.Second, func() bool { return e.TriggerStatus().Degraded })
	if st := e.TriggerStatus(); st.Using != "database" || st.Reason == "" {
		t.Errorf("degraded status %+v", st)
	}
	nos := insertDue(t, s, "DG", 20, time.Now().Add(100*time.Millisecond))
	byDB := func(nos []string) bool {
		n := firedBy(t, e, nos)
		return n[lapse.FiredBySweep]+n[lapse.FiredByTimer] == len(nos)
	}
	waitUntil(t, 30*time.Second, func() bool { return byDB(nos) })

	// Pending deadlines set while it was down are seeded when it returns.
	later := insertDue(t, s, "LT", 5, time.Now().Add(time.Hour))
	tr.fail(nil)
	waitUntil(t, 30*time.Second, func() bool { return !e.TriggerStatus().Degraded })
	first, last := idOf(t, s, later[0]), idOf(t, s, later[4])
	waitUntil(t, 30*time.Second, func() bool { return tr.has(first) && tr.has(last) })

	// Flushed: its data is gone; the next claim finds it unseeded.
	tr.flush()
	waitUntil(t, 30*time.Second, func() bool { return tr.has(first) })
	tr.mu.Lock()
	seeds := tr.seeds
	tr.mu.Unlock()
	if seeds < 2 {
		t.Errorf("seeded %d times, want at least 2 (after the outage and after the flush)", seeds)
	}

	// Forced to the database: not using the trigger, whatever it says.
	if err := e.SetTriggerMode(engine.TriggerDatabase); err != nil {
		t.Fatal(err)
	}
	if st := e.TriggerStatus(); st.Using != "database" || st.Mode != engine.TriggerDatabase {
		t.Errorf("forced database: %+v", st)
	}
	forced := insertDue(t, s, "FD", 5, time.Now().Add(100*time.Millisecond))
	waitUntil(t, 30*time.Second, func() bool { return byDB(forced) })
	// Forced to the trigger: a failure does not switch it off.
	if err := e.SetTriggerMode(engine.TriggerShared); err != nil {
		t.Fatal(err)
	}
	tr.fail(errors.New("redis: connection refused"))
	time.Sleep(300 * time.Millisecond)
	if st := e.TriggerStatus(); st.Using != "redis" {
		t.Errorf("forced shared, failing: %+v", st)
	}
	if err := e.SetTriggerMode("bogus"); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("bogus mode = %v", err)
	}
	into := map[string]bool{}
	for _, no := range slices.Concat(nos, forced) {
		if into[no] {
			t.Errorf("%s twice", no)
		}
		into[no] = true
	}
}

// TestSharedTriggerEarlierMembers: an earlier version left a member that
// is an order number, due; the order it names is due in the database and
// this process's timer knows nothing of it. The member wakes the claimer,
// which fires the order (path redis) and is done with the member.
func TestSharedTriggerEarlierMembers(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, s := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.Start(context.Background())
	t.Cleanup(c.Stop)
	nos := insertDue(t, s, "EM", 1, time.Now().Add(100*time.Millisecond))
	tr.mu.Lock()
	tr.due[nos[0]] = time.Now().Add(100 * time.Millisecond)
	tr.mu.Unlock()
	waitUntil(t, 30*time.Second, func() bool { return firedBy(t, e, nos)[lapse.FiredByRedis] == 1 })
	waitUntil(t, 30*time.Second, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.due)+len(tr.processing) == 0
	})
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	stop := time.Now().Add(d)
	for !cond() {
		if time.Now().After(stop) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSharedTriggerToldOfAskLease: when the deadline of an order whose
// customer started paying passes, the claim leases the order (moves its
// deadline by the time its provider has to answer) rather than closing it.
// The lease's end is a deadline like any other: the trigger is told of it,
// so that an order the answer leaves unsettled fires when the lease ends,
// not when the sweep comes by.
func TestSharedTriggerToldOfAskLease(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	s := openSQLite(t)
	prov := &fakeProvider{hold: make(chan struct{})}
	f := flows.Checkout()
	f.Grace = 300 * time.Millisecond
	e, err := engine.New(s, []*lapse.Flow{f}, engine.Config{Trigger: tr,
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
	if err != nil {
		t.Fatal(err)
	}
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.Start(context.Background())
	t.Cleanup(c.Stop)
	t.Cleanup(func() { close(prov.hold) }) // before Stop: the ask in flight ends
	o := create(t, e, checkout("AL-1", 500*time.Millisecond))
	started, err := e.StartPayment(context.Background(), o.OrderNo, "sandbox", app)
	if err != nil {
		t.Fatal(err)
	}
	var leased *lapse.Order
	waitUntil(t, 10*time.Second, func() bool {
		leased, _ = e.Order(context.Background(), o.OrderNo)
		return leased.DeadlineAt != nil && leased.DeadlineAt.After(*started.DeadlineAt)
	})
	waitUntil(t, 30*time.Second, func() bool { at, ok := tr.dueAt(o.ID); return ok && at.Equal(*leased.DeadlineAt) })
	if leased.State != flows.Unpaid {
		t.Errorf("the leased order is %s; want UNPAID while its provider is asked", leased.State)
	}
}

// claimStarts records where the claims made in its transactions started.
type claimStarts struct {
	lapse.Store
	mu    sync.Mutex
	froms []time.Time
}

func (s *claimStarts) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(&claimStartsTx{Store: tx, rec: s}) })
}

func (s *claimStarts) starts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.froms)
}

type claimStartsTx struct {
	lapse.Store
	rec *claimStarts
}

func (s *claimStartsTx) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	s.rec.mu.Lock()
	s.rec.froms = append(s.rec.froms, p.From)
	s.rec.mu.Unlock()
	return s.Store.OrderClaimDue(ctx, p)
}

// TestSharedTriggerReadsOnFromFloor: the shared trigger's path keeps its
// place in the due index from one step to the next, as the precise path
// does, so that its burns do not read over the entries of the orders closed
// before; and a member due before that place (a deadline another process
// set in the past) moves the place back, so that the member's burn still
// closes it at once.
func TestSharedTriggerReadsOnFromFloor(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	s := openSQLite(t)
	rec := &claimStarts{Store: s}
	e, err := engine.New(rec, flows.Builtin(), engine.Config{Trigger: tr})
	if err != nil {
		t.Fatal(err)
	}
	// MaxSleep and the sweep an hour away: no claim from the start but
	// where the floor says so.
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour})
	c.Start(context.Background())
	t.Cleanup(c.Stop)
	// As another process: orders written straight to the database, and
	// their deadlines to the trigger.
	due := func(prefix string, at time.Time) []string {
		nos := insertDue(t, s, prefix, 3, at)
		var ds []engine.TriggerDue
		for _, no := range nos {
			ds = append(ds, engine.TriggerDue{OrderID: idOf(t, s, no), At: at})
		}
		if err := tr.Add(context.Background(), ds); err != nil {
			t.Fatal(err)
		}
		return nos
	}
	closedByTrigger := func(nos []string) bool { return firedBy(t, e, nos)[lapse.FiredByRedis] == len(nos) }
	for i, in := range []time.Duration{300 * time.Millisecond, 200 * time.Millisecond} {
		nos := due(fmt.Sprintf("RF%d", i), time.Now().Add(in))
		waitUntil(t, 30*time.Second, func() bool { return closedByTrigger(nos) })
	}
	froms := rec.starts()
	if len(froms) < 2 {
		t.Fatalf("claims from %v; want at least two", froms)
	}
	for i, from := range froms[1:] {
		if from.IsZero() {
			t.Errorf("claim %d read from the start: %v", i+1, froms)
		}
	}
	past := due("RP", time.Now().Add(-time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return closedByTrigger(past) })
}
