package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// SharedTrigger is a precise trigger that every process shares (package
// redis implements it with a sorted set and Lua scripts): the engine tells it
// each deadline it sets, and a Trigger loop claims the members that come due
// and has the claimer look at the database at once. It is only ever a hint:
// the database stays the truth, and the guarded transition decides whether
// an order fires.
//
// A member is the trigger's own name for an order, derived from its
// database id; the engine only hands claimed members back to Done and
// Retry, and asks for their ids (OrderID) to know where in the deadline
// index to start. A claimed member says that an order may be due, and the
// claimer then fires whatever the database has due. So a member that names
// no order the engine knows, such as an order number written by an earlier
// version of Lapse, is a hint like any other and goes once it is done.
type SharedTrigger interface {
	// Add records that each order is due at its time, replacing a later
	// time recorded before, never an earlier one: the writes of one
	// order's deadlines, from several processes and seeds, arrive in no
	// set order, and a later time kept over the order's deadline would
	// fire it late, while an earlier one only has it claimed early, and
	// put back at its deadline (Requeue; the claimer checks the
	// database). A claimed member (in processing) leaves processing, due
	// at its time or at its lease expiry if that is earlier.
	Add(ctx context.Context, due []TriggerDue) error
	// Requeue puts the members of the orders of due that are still in
	// processing back due, each at its time, however far past its lease,
	// their attempts kept: those of orders a claim took before they were
	// due, at their deadlines. A member not in processing (done, or moved
	// by Add since it was claimed) is left as it is.
	Requeue(ctx context.Context, due []TriggerDue) error
	// Claim moves up to limit members due by now into processing, leased
	// until now+lease, and returns them. Members whose lease expired are
	// due again and claimed first; their attempt counts are kept. seeded is
	// false when the trigger has lost its data (a restart without
	// persistence, a flush): it must be seeded again from the database.
	Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) (members []string, seeded bool, err error)
	// Done removes members from processing and forgets their attempts.
	Done(ctx context.Context, members []string) error
	// Retry, in one atomic step, counts an attempt of member, removes it
	// from processing, and puts it back due at now + delays[attempt-1], or,
	// after the last delay, moves it to the to-notify set.
	Retry(ctx context.Context, member string, now time.Time, delays []time.Duration) (attempt int, notified bool, err error)
	// Release puts members still in processing back due at now, their
	// attempts kept, so that any process claims them at once: those of a
	// pass that a stop cut short. A member not in processing (done, or
	// moved by Add since it was claimed) is left as it is.
	Release(ctx context.Context, members []string, now time.Time) error
	// Next returns the earliest due time, and false when nothing is due.
	Next(ctx context.Context) (time.Time, bool, error)
	// BeginSeed records that a seed from the database starts, so that
	// the MarkSeeded that ends it can tell whether the trigger lost its
	// data meanwhile.
	BeginSeed(ctx context.Context) error
	// MarkSeeded records that every pending deadline of the database has
	// been added since the last BeginSeed, so that Claim reports seeded
	// from now on. It fails, marking nothing, when the trigger lost its
	// data (a flush, a restart without persistence) since that BeginSeed:
	// the deadlines added before the loss are gone, and a trigger marked
	// seeded without them would be trusted with deadlines it does not
	// hold.
	MarkSeeded(ctx context.Context) error
	// ToNotify returns how many members gave up and wait for an operator.
	ToNotify(ctx context.Context) (int64, error)
	// Ping checks that the trigger answers.
	Ping(ctx context.Context) error
	// OrderID returns the database id of the order member names, and false
	// for a member it did not derive from one.
	OrderID(member string) (int64, bool)
}

// TriggerDue is one order's due time for a SharedTrigger. The order is
// named by its database id, not its order number, so that what a trigger
// holds per order is small and the same for every order.
type TriggerDue struct {
	OrderID int64
	At      time.Time
}

// TriggerMode says how deadlines are triggered across processes when a
// SharedTrigger is configured.
type TriggerMode string

// Trigger modes. An operator may force either path at run time
// (SetTriggerMode); auto switches by itself.
const (
	// TriggerAuto uses the shared trigger while it answers. When it errs or
	// times out the trigger is degraded: the database sweep takes over on a
	// faster beat until the shared trigger answers again, is seeded again
	// from the database, and returns.
	TriggerAuto TriggerMode = "auto"
	// TriggerShared uses the shared trigger whatever it answers; errors are
	// logged and counted, the sweep keeps its usual beat. It is written
	// "redis", as the flags, the API and fired_by name the shared trigger.
	TriggerShared TriggerMode = "redis"
	// TriggerDatabase leaves the shared trigger alone: the database sweep
	// fires on the faster beat.
	TriggerDatabase TriggerMode = "database"
)

// ParseTriggerMode reads a mode as operators write it: auto (or empty),
// redis (or shared, its former name), database (or db, sweep). Its error is
// about the field "mode", as PUT /v1/trigger names it.
func ParseTriggerMode(s string) (TriggerMode, error) {
	switch s {
	case "auto", "":
		return TriggerAuto, nil
	case "shared", "redis":
		return TriggerShared, nil
	case "database", "db", "sweep":
		return TriggerDatabase, nil
	}
	return "", lapse.FieldError("mode", "%q is not a trigger mode: auto, redis or database", s)
}

// TriggerStatus is how deadlines are being triggered.
type TriggerStatus struct {
	Configured bool        `json:"configured"` // a shared trigger exists
	Mode       TriggerMode `json:"mode"`
	// Using is the path in charge: "redis" (the shared trigger) or
	// "database".
	Using    string `json:"using"`
	Degraded bool   `json:"degraded"`
	Reason   string `json:"reason,omitempty"` // why it is degraded
}

// trigger is the engine's side of a SharedTrigger: the deadlines to add,
// the mode and whether the shared trigger is degraded.
type trigger struct {
	t        SharedTrigger
	delays   []time.Duration // Retry's schedule for a pass that failed
	mode     atomic.Pointer[TriggerMode]
	degraded atomic.Bool
	reason   atomic.Pointer[string]
	// stale is set whenever deadlines may have been set without reaching
	// the shared trigger (degraded, forced to the database, a full queue):
	// it is seeded from the database before it is used again.
	stale atomic.Bool
	// known is set once this process has seen the trigger seeded: a
	// trigger without data after that has lost it, while one that has none
	// at the start may just be new.
	known atomic.Bool
	// seeding is set while the trigger is seeded from the database: a
	// deadline set meanwhile may come after the seed read its page, so it
	// is queued too, and added once the seed is done.
	seeding atomic.Bool
	// drops counts the deadlines the full queue turned away: a seed during
	// which one was may have read the database before it, and does not
	// put the trigger in charge.
	drops   atomic.Uint64
	pending chan TriggerDue
	kick    chan struct{}

	degradedGauge prometheus.Gauge
	errors        prometheus.Counter
	dropped       prometheus.Counter
}

// DefaultTriggerRetries is seed 000's schedule for a member whose pass
// failed: looked at again after 1 s, 2 s, 4 s, 8 s and 16 s, then moved to
// the to-notify set (the sweep still fires the orders).
var DefaultTriggerRetries = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

func newTrigger(t SharedTrigger, mode TriggerMode, m *metrics) *trigger {
	tr := &trigger{t: t, delays: DefaultTriggerRetries, pending: make(chan TriggerDue, 1<<16), kick: make(chan struct{}, 1),
		degradedGauge: m.triggerDegraded, errors: m.triggerErrors, dropped: m.triggerDropped}
	// Not stale at start: the other processes kept the trigger current, and
	// a trigger that lost its data says so on its first Claim.
	tr.mode.Store(&mode)
	return tr
}

// using reports whether the shared trigger is in charge.
func (tr *trigger) using() bool {
	switch *tr.mode.Load() {
	case TriggerShared:
		return true
	case TriggerDatabase:
		return false
	}
	// In auto mode it takes charge once it answers and holds every
	// pending deadline.
	return !tr.degraded.Load() && !tr.stale.Load()
}

func (tr *trigger) signal() {
	select {
	case tr.kick <- struct{}{}:
	default:
	}
}

// deadlineSet tells the precise path that the order with database id
// orderID is due at at: the shared trigger when it is in charge, else the
// in-process timer.
func (e *Engine) deadlineSet(orderID int64, at time.Time) {
	tr := e.trig
	if tr == nil {
		e.wake.notify(at)
		return
	}
	// seeding is loaded before using: read false, either the seed has not
	// set it yet, and so reads this deadline's commit, or it is done and
	// the trigger is in charge.
	seeding := tr.seeding.Load()
	if !seeding && !tr.using() {
		e.wake.notify(at)
		return
	}
	if seeding {
		e.wake.notify(at) // the precise path is in charge until the seed is done
	}
	select {
	case tr.pending <- TriggerDue{OrderID: orderID, At: at}:
		tr.signal()
	default:
		// The queue is full: the trigger misses this deadline, so it is
		// not in charge until it is seeded again; meanwhile this process's
		// own timer fires it.
		tr.dropped.Inc()
		tr.drops.Add(1)
		tr.stale.Store(true)
		e.wake.notify(at)
		tr.signal()
	}
}

// SetTriggerMode forces the shared trigger or the database, or lets the
// engine switch by itself (TriggerAuto). It fails when no shared trigger is
// configured.
func (e *Engine) SetTriggerMode(m TriggerMode) error {
	if e.trig == nil {
		return lapse.Errorf(lapse.EINVALID, "no shared trigger (Redis) is configured: deadlines are triggered by the database")
	}
	m, err := ParseTriggerMode(string(m))
	if err != nil {
		return err
	}
	prev := *e.trig.mode.Swap(&m)
	if prev != m {
		e.log.Warn("trigger mode changed", "from", prev, "to", m)
		if m == TriggerDatabase {
			e.trig.stale.Store(true)
		}
		e.trig.signal()
	}
	e.trig.update()
	return nil
}

// TriggerStatus says how deadlines are being triggered.
func (e *Engine) TriggerStatus() TriggerStatus {
	if e.trig == nil {
		return TriggerStatus{Mode: TriggerDatabase, Using: "database"}
	}
	tr := e.trig
	st := TriggerStatus{Configured: true, Mode: *tr.mode.Load(), Using: "database", Degraded: tr.degraded.Load()}
	if tr.using() {
		st.Using = string(TriggerShared)
	}
	if st.Degraded {
		if r := tr.reason.Load(); r != nil {
			st.Reason = *r
		}
	}
	return st
}

// update sets the degraded gauge from the state.
func (tr *trigger) update() {
	v := 0.0
	if !tr.using() {
		v = 1
	}
	tr.degradedGauge.Set(v)
}

// fastBeat reports whether the database must fire on its faster beat: a
// shared trigger is configured but not in charge.
func (e *Engine) fastBeat() bool { return e.trig != nil && !e.trig.using() }
