package sim

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// errRedisDown is what the trigger answers while it is down.
var errRedisDown = errors.New("sim: redis is down")

// trigger is the shared trigger (Redis) in memory, with the semantics of
// package redis's sorted sets and scripts: due times, members in processing
// under a lease, attempts, the to-notify set and the seeded marker. One
// trigger serves every process of a run, so it outlives a crash. It can
// lose all its data (redis_lost: a flush, a restart without persistence) or
// be down until a time on the simulated clock (redis_down). A member is the
// order's database id in decimal.
type trigger struct {
	clock *lapse.ManualClock

	mu         sync.Mutex
	due        map[string]time.Time
	processing map[string]time.Time // member → lease expiry
	owner      map[string]int       // member in processing → the process that claimed it
	proc       int                  // the process alive now
	attempts   map[string]int
	notify     map[string]time.Time
	seeded     bool
	losses     int // how many times it lost its data
	begun      int // losses as the last BeginSeed found it; -1: none since MarkSeeded
	downUntil  time.Time
	// told is, per order id, the last due time added since the data was
	// lost, unless the member gave up since: what the auditor holds the
	// trigger to.
	told map[int64]time.Time
}

var _ engine.SharedTrigger = (*trigger)(nil)

func newTrigger(clock *lapse.ManualClock) *trigger {
	t := &trigger{clock: clock, begun: -1}
	t.lose()
	return t
}

// lose wipes every key: the engine finds the trigger unseeded.
func (t *trigger) lose() {
	t.due, t.processing, t.attempts, t.notify = map[string]time.Time{}, map[string]time.Time{}, map[string]int{}, map[string]time.Time{}
	t.owner = map[string]int{}
	t.told = map[int64]time.Time{}
	t.seeded = false
	t.losses++
}

// lost is the fault redis_lost.
func (t *trigger) lost() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lose()
}

// downFor is the fault redis_down: every call fails for d of simulated
// time. Its data is kept.
func (t *trigger) downFor(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.downUntil = t.clock.Now().Add(d)
}

// boot records that process n is the one alive: the members it claims are
// its own.
func (t *trigger) boot(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.proc = n
}

// up ends an outage.
func (t *trigger) up() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.downUntil = time.Time{}
}

// check is the error of a call: errRedisDown while down. The caller holds
// mu.
func (t *trigger) check() error {
	if t.clock.Now().Before(t.downUntil) {
		return errRedisDown
	}
	return nil
}

func (t *trigger) Add(_ context.Context, due []engine.TriggerDue) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	for _, d := range due {
		m := strconv.FormatInt(d.OrderID, 10)
		at := d.At
		if lease, ok := t.processing[m]; ok && lease.Before(at) {
			at = lease // due again then anyway, should its claim fail
		}
		if cur, ok := t.due[m]; !ok || at.Before(cur) {
			t.due[m] = at // never later than a time there (ZADD LT)
		}
		delete(t.processing, m) // its deadline moved while it was claimed; attempts kept
		delete(t.owner, m)
		t.told[d.OrderID] = d.At
	}
	return nil
}

// byTime lists the members of set scored by at most until, earliest
// first, ties by member, so that a run replays.
func byTime(set map[string]time.Time, until time.Time) []string {
	var out []string
	for m, at := range set {
		if !at.After(until) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(set[a].Compare(set[b]), cmp.Compare(a, b)) })
	return out
}

func (t *trigger) Claim(_ context.Context, now time.Time, lease time.Duration, limit int) ([]string, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return nil, false, err
	}
	var out []string
	for _, m := range byTime(t.processing, now) {
		if len(out) < limit {
			out = append(out, m)
		} else {
			t.due[m] = t.processing[m] // due again since its lease expired
			delete(t.processing, m)
			delete(t.owner, m)
		}
	}
	for _, m := range byTime(t.due, now) {
		if len(out) >= limit {
			break
		}
		delete(t.due, m)
		out = append(out, m)
	}
	for _, m := range out {
		t.processing[m] = now.Add(lease)
		t.owner[m] = t.proc
	}
	return out, t.seeded, nil
}

func (t *trigger) Done(_ context.Context, members []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	for _, m := range members {
		delete(t.processing, m)
		delete(t.owner, m)
		delete(t.attempts, m)
	}
	return nil
}

// Requeue puts members still in processing back due, each at its time.
func (t *trigger) Requeue(_ context.Context, due []engine.TriggerDue) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	for _, d := range due {
		m := strconv.FormatInt(d.OrderID, 10)
		if _, ok := t.processing[m]; !ok {
			continue // done, or moved by Add since it was claimed
		}
		delete(t.processing, m)
		delete(t.owner, m)
		t.due[m] = d.At
		t.told[d.OrderID] = d.At
	}
	return nil
}

func (t *trigger) Release(_ context.Context, members []string, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	for _, m := range members {
		if _, ok := t.processing[m]; !ok {
			continue // done, or moved by Add since it was claimed
		}
		delete(t.processing, m)
		delete(t.owner, m)
		t.due[m] = now
	}
	return nil
}

func (t *trigger) Retry(_ context.Context, member string, now time.Time, delays []time.Duration) (int, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return 0, false, err
	}
	if _, ok := t.processing[member]; !ok {
		return 0, false, nil // done, or moved by Add since it was claimed
	}
	delete(t.processing, member)
	delete(t.owner, member)
	t.attempts[member]++
	n := t.attempts[member]
	if n > len(delays) {
		delete(t.attempts, member)
		t.notify[member] = now
		if id, err := strconv.ParseInt(member, 10, 64); err == nil {
			delete(t.told, id) // given up: the sweep's to fire
		}
		return n, true, nil
	}
	t.due[member] = now.Add(delays[n-1])
	return n, false, nil
}

func (t *trigger) Next(context.Context) (time.Time, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return time.Time{}, false, err
	}
	var next time.Time
	for _, set := range []map[string]time.Time{t.due, t.processing} {
		for at := range maps.Values(set) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	return next, !next.IsZero(), nil
}

func (t *trigger) BeginSeed(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	t.begun = t.losses
	return nil
}

// MarkSeeded fails, as package redis's does, when the data was lost since
// the last BeginSeed.
func (t *trigger) MarkSeeded(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	begun := t.begun
	t.begun = -1
	if begun >= 0 && begun != t.losses {
		return errors.New("sim: redis lost its data while it was being seeded")
	}
	t.seeded = true
	return nil
}

// OrderID returns the id of the order member names.
func (t *trigger) OrderID(member string) (int64, bool) {
	id, err := strconv.ParseInt(member, 10, 64)
	return id, err == nil
}

func (t *trigger) ToNotify(context.Context) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return 0, err
	}
	return int64(len(t.notify)), nil
}

func (t *trigger) Ping(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.check()
}

// owes reports whether the trigger owes the order with id id a
// claim by now: it was told that the order is due at at, no process that
// crashed holds its member under a lease (the one alive has done with
// what it claimed), and the member does not wait for a retry of a pass that
// failed (at most the engine's retry schedule, after which it gives up and
// is no longer owed).
func (t *trigger) owes(id int64, at, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := strconv.FormatInt(id, 10)
	told, ok := t.told[id]
	_, leased := t.processing[m]
	leased = leased && t.owner[m] != t.proc
	retrying := t.attempts[m] > 0 && t.due[m].After(now)
	return ok && told.Equal(at) && !leased && !retrying
}
