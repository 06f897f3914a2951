package engine_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/redis"
)

// redisTrigger is the Redis trigger on keys of the test's own, unseeded,
// with a client to look at the keys; they are deleted when the test ends.
func redisTrigger(t *testing.T) (tr *redis.Trigger, rdb *goredis.Client, prefix string) {
	t.Helper()
	url := testenv.Redis(t)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb = goredis.NewClient(opt)
	prefix = "lapse-engine-test-" + rand.Text()[:8] + ":"
	tr, err = redis.New(redis.Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, k := range []string{"due", "processing", "attempts", "notify", "seeded"} {
			rdb.Del(ctx, prefix+k)
		}
		tr.Close()
		rdb.Close()
	})
	return tr, rdb, prefix
}

// insertOrders writes n orders due at at straight into the store, with
// order numbers of width bytes.
func insertOrders(t *testing.T, s lapse.Store, width, n int, at time.Time) {
	t.Helper()
	now := time.Now()
	for i := 0; i < n; i += 1000 {
		var ps []*lapse.OrderCreateParams
		for j := i; j < min(i+1000, n); j++ {
			o := &lapse.Order{OrderNo: fmt.Sprintf("ORD-%0*d", width-4, j), Flow: "checkout", State: flows.Unpaid, DeadlineAt: &at,
				Amount: 100, Currency: "CNY", UserID: "u", Version: 1, CreatedAt: now, UpdatedAt: now, FiredBy: lapse.FiredByApp}
			ps = append(ps, &lapse.OrderCreateParams{Order: o, Log: lapse.TransitionRecord{ToState: flows.Unpaid,
				Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, CreatedAt: now}})
		}
		if err := s.OrderCreateMany(context.Background(), ps); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTriggerRedisSeedMemory: the claimer seeds an empty Redis trigger from
// a database of pending orders whose order numbers are 12, 24 and 32 bytes
// long; each costs the due set at most the SPEC's 110 bytes, and the same
// whatever its order number's length.
func TestTriggerRedisSeedMemory(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes 30,000 orders")
	}
	const n, target = 10_000, 110.0
	for _, width := range []int{12, 24, 32} {
		t.Run(fmt.Sprintf("order-numbers-of-%d-bytes", width), func(t *testing.T) {
			t.Parallel()
			tr, rdb, prefix := redisTrigger(t)
			e, s := triggerEngine(t, tr)
			insertOrders(t, s, width, n, time.Now().Add(time.Hour))
			c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
			c.Start(context.Background())
			t.Cleanup(c.Stop)
			waitUntil(t, time.Minute, func() bool { return rdb.Exists(context.Background(), prefix+"seeded").Val() == 1 })
			ctx := t.Context()
			if got, err := rdb.ZCard(ctx, prefix+"due").Result(); got != n || err != nil {
				t.Fatalf("ZCARD due = %d, %v; want %d", got, err, n)
			}
			used, err := rdb.MemoryUsage(ctx, prefix+"due", 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			per := float64(used) / n
			t.Logf("%d orders, order numbers of %d bytes: %.1f bytes per pending order in the due set (target ≤ %v)", n, width, per, target)
			if per > target {
				t.Errorf("%.1f bytes per pending order, want ≤ %v", per, target)
			}
		})
	}
}

// TestTriggerRedisEarlierMembers: during an upgrade, Redis holds a member
// that an earlier version wrote, the order number of an order due in the
// database that this process's timer knows nothing of. The member wakes
// the claimer, which fires the order (path redis) and is done with it.
func TestTriggerRedisEarlierMembers(t *testing.T) {
	t.Parallel()
	tr, rdb, prefix := redisTrigger(t)
	ctx := t.Context()
	if err := tr.MarkSeeded(ctx); err != nil {
		t.Fatal(err)
	}
	e, s := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.Start(context.Background())
	t.Cleanup(c.Stop)
	at := time.Now().Add(200 * time.Millisecond)
	nos := insertDue(t, s, "EARLY", 1, at)
	if err := rdb.ZAdd(ctx, prefix+"due", goredis.Z{Score: float64(at.UnixMilli() + 1), Member: nos[0]}).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, func() bool { return firedBy(t, e, nos)[lapse.FiredByRedis] == 1 })
	waitUntil(t, 30*time.Second, func() bool {
		n := rdb.ZCard(ctx, prefix+"due").Val() + rdb.ZCard(ctx, prefix+"processing").Val()
		return n == 0
	})
}

// seededRedisEngine is manualTriggerEngine on the Redis trigger, marked
// seeded, so that RunTriggerOnce claims at once rather than seed.
func seededRedisEngine(t *testing.T) (*engine.Engine, lapse.Store, *lapse.ManualClock, *engine.Claimer, *redis.Trigger) {
	t.Helper()
	tr, _, _ := redisTrigger(t)
	if err := tr.MarkSeeded(t.Context()); err != nil {
		t.Fatal(err)
	}
	e, s, clock, c := manualTriggerEngine(t, tr)
	return e, s, clock, c, tr
}

// wantRedisNext wants the trigger's next due time to be at.
func wantRedisNext(t *testing.T, tr *redis.Trigger, at time.Time) {
	t.Helper()
	next, ok, err := tr.Next(t.Context())
	if err != nil || !ok || !next.Equal(at.Truncate(time.Millisecond)) && !next.Equal(at.Truncate(time.Millisecond).Add(time.Millisecond)) {
		t.Fatalf("Redis next due = %v, %v, %v; want the order's deadline %v", next, ok, err, at)
	}
}

// TestTriggerRedisShortenedThenStale: an order's deadline is shortened,
// and then the older, later deadline reaches Redis over the new one (the
// write of another node that set it before, delayed; or a seed's page read
// before the change). Redis keeps the earlier time, and the order closes
// at its shortened deadline through Redis, not at the old one or a sweep.
func TestTriggerRedisShortenedThenStale(t *testing.T) {
	t.Parallel()
	e, s, clock, c, tr := seededRedisEngine(t)
	ctx := t.Context()
	old := clock.Now().Add(time.Hour)
	nos := insertDue(t, s, "SHORT", 1, old)
	id := idOf(t, s, nos[0])
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: id, At: old}}); err != nil {
		t.Fatal(err)
	}
	short := clock.Now().Add(time.Minute)
	if _, moved, err := e.SetDeadline(ctx, nos[0], engine.DeadlineChange{At: &short, By: engine.Actor{FiredBy: lapse.FiredByAPI, Name: "t"}}); err != nil || !moved {
		t.Fatalf("SetDeadline = %v, %v", moved, err)
	}
	runTrigger(t, c, 0) // hands the shortened deadline to Redis
	// The stale write, of the deadline before the change.
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: id, At: old}}); err != nil {
		t.Fatal(err)
	}
	wantRedisNext(t, tr, short)
	clock.Advance(time.Minute + time.Millisecond)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis at the shortened deadline", got)
	}
}

// TestTriggerRedisExtendedNeverEarly: an order's deadline is extended
// while Redis keeps the earlier time. Claimed at that time the order is
// not closed: its member goes back at the new deadline, and the order
// closes then, through Redis.
func TestTriggerRedisExtendedNeverEarly(t *testing.T) {
	t.Parallel()
	e, s, clock, c, tr := seededRedisEngine(t)
	ctx := t.Context()
	first := clock.Now().Add(time.Minute)
	nos := insertDue(t, s, "EXT", 1, first)
	id := idOf(t, s, nos[0])
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: id, At: first}}); err != nil {
		t.Fatal(err)
	}
	o, moved, err := e.SetDeadline(ctx, nos[0], engine.DeadlineChange{ExtendBy: time.Hour, By: engine.Actor{FiredBy: lapse.FiredByAPI, Name: "t"}})
	if err != nil || !moved {
		t.Fatalf("SetDeadline = %v, %v", moved, err)
	}
	runTrigger(t, c, 0)
	clock.Advance(time.Minute + time.Millisecond)
	runTrigger(t, c, 0) // claims the earlier time, closes nothing
	if got := firedBy(t, e, nos); len(got) != 0 {
		t.Fatalf("closed before its extended deadline: %v", got)
	}
	wantRedisNext(t, tr, *o.DeadlineAt)
	clock.Set(o.DeadlineAt.Add(time.Millisecond))
	runTrigger(t, c, 1)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis at the extended deadline", got)
	}
}

// TestTriggerRedisMixedClaim: one claim takes the member of an order that
// is due and that of one that is not (Redis held an earlier time for it:
// its deadline was extended). The claim fires the first; the second goes
// back to Redis at its order's deadline, and is fired then, through Redis,
// rather than forgotten until a sweep.
func TestTriggerRedisMixedClaim(t *testing.T) {
	t.Parallel()
	e, s, clock, c, tr := seededRedisEngine(t)
	ctx := t.Context()
	soon, later := clock.Now().Add(time.Minute), clock.Now().Add(time.Hour)
	due := insertDue(t, s, "MIXDUE", 1, soon)
	ahead := insertDue(t, s, "MIXAHEAD", 1, later)
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: idOf(t, s, due[0]), At: soon}, {OrderID: idOf(t, s, ahead[0]), At: soon}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + time.Millisecond)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, ahead); len(got) != 0 {
		t.Fatalf("the order not yet due closed: %v", got)
	}
	wantRedisNext(t, tr, later)
	clock.Set(later.Add(time.Millisecond))
	runTrigger(t, c, 1)
	if got := firedBy(t, e, ahead); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis at its deadline", got)
	}
}

// TestTriggerRedisStaleWhileClaimed: another process claims the member of
// a due order and dies before it fires it; meanwhile an older, later
// deadline of the order reaches Redis (a delayed write, a seed's page).
// The member is due again when the dead process's lease ends, not at the
// stale time, and this process fires the order then, through Redis.
func TestTriggerRedisStaleWhileClaimed(t *testing.T) {
	t.Parallel()
	e, s, clock, c, tr := seededRedisEngine(t)
	ctx := t.Context()
	at := clock.Now().Add(time.Minute)
	nos := insertDue(t, s, "CLAIMED", 1, at)
	id := idOf(t, s, nos[0])
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: id, At: at}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + time.Millisecond)
	const lease = 10 * time.Second
	if got, _, err := tr.Claim(ctx, clock.Now(), lease, 10); len(got) != 1 || err != nil { // the process that dies
		t.Fatalf("Claim = %q, %v; want the order's member", got, err)
	}
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: id, At: at.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(lease + time.Millisecond)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis once the dead process's lease ended", got)
	}
}

// gateStore is a work store that can stop answering (down: transactions
// and deadline reads fail, as a database that is away), or answer with
// its due orders held by another claimer (held: a claim finds none of them,
// as SKIP LOCKED does while another claimer's transaction holds them, one
// that then rolls back).
type gateStore struct {
	lapse.Store
	down, held atomic.Bool
}

func (s *gateStore) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.Tx(ctx, func(tx lapse.Store) error {
		if s.held.Load() {
			return fn(heldTx{tx})
		}
		return fn(tx)
	})
}

func (s *gateStore) OrderDeadlineMin(ctx context.Context, ids []int64) (time.Time, bool, error) {
	if s.down.Load() {
		return time.Time{}, false, errDown
	}
	return s.Store.OrderDeadlineMin(ctx, ids)
}

func (s *gateStore) OrderDeadlineList(ctx context.Context, p *lapse.OrderDeadlineListParams) ([]lapse.OrderDeadline, error) {
	if s.down.Load() {
		return nil, errDown
	}
	return s.Store.OrderDeadlineList(ctx, p)
}

func (s *gateStore) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	if s.down.Load() {
		return time.Time{}, false, errDown
	}
	return s.Store.OrderNextDeadline(ctx, flows, from)
}

// heldTx is a transaction whose claims find every due order held.
type heldTx struct{ lapse.Store }

func (heldTx) OrderClaimDue(context.Context, *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	return nil, nil
}

// gatedRedisEngine is seededRedisEngine on a work store that can be taken
// down or have its due orders held.
func gatedRedisEngine(t *testing.T) (*engine.Engine, lapse.Store, *gateStore, *lapse.ManualClock, *engine.Claimer, *redis.Trigger) {
	t.Helper()
	tr, _, _ := redisTrigger(t)
	if err := tr.MarkSeeded(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := openSQLite(t)
	work := &gateStore{Store: s}
	clock := lapse.NewManualClock(time.Now())
	e, err := engine.New(s, flows.Builtin(), engine.Config{Trigger: tr, WorkStore: work, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e, s, work, clock, engine.NewClaimer(e, engine.ClaimerConfig{Batch: 2}), tr
}

// TestTriggerRedisGivenUpNotDue: the member of an order whose deadline was
// extended is claimed at the earlier time Redis kept, while the database
// is away; its passes fail until the trigger gives up on it (to-notify).
// Once the database answers, the member is back in Redis at its order's
// deadline, and the order closes then, through Redis, not at a later
// sweep.
func TestTriggerRedisGivenUpNotDue(t *testing.T) {
	t.Parallel()
	e, s, work, clock, c, tr := gatedRedisEngine(t)
	ctx := t.Context()
	early, later := clock.Now().Add(time.Minute), clock.Now().Add(time.Hour)
	nos := insertDue(t, s, "GIVENUP", 1, later)
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: idOf(t, s, nos[0]), At: early}}); err != nil {
		t.Fatal(err)
	}
	clock.Set(early.Add(time.Millisecond))
	work.down.Store(true)
	for i, d := range append(slices.Clone(engine.DefaultTriggerRetries), 0) {
		if _, err := c.RunTriggerOnce(ctx); !errors.Is(err, errDown) {
			t.Fatalf("pass %d while the database is away = %v", i+1, err)
		}
		clock.Advance(d + time.Millisecond)
	}
	if n, err := tr.ToNotify(ctx); n != 1 || err != nil {
		t.Fatalf("ToNotify = %d, %v; want the member given up on", n, err)
	}
	work.down.Store(false)
	runTrigger(t, c, 0)
	wantRedisNext(t, tr, later)
	clock.Set(later.Add(time.Millisecond))
	runTrigger(t, c, 1)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis at its deadline", got)
	}
}

// TestTriggerRedisDueButHeld: a pass finds the due order of its member
// held by another claimer (whose transaction then rolls back), and fires
// nothing. The member goes back due soon, on the retry schedule, and the
// next pass fires the order through Redis rather than a later sweep.
func TestTriggerRedisDueButHeld(t *testing.T) {
	t.Parallel()
	e, s, work, clock, c, tr := gatedRedisEngine(t)
	ctx := t.Context()
	at := clock.Now().Add(time.Minute)
	nos := insertDue(t, s, "HELD", 1, at)
	if err := tr.Add(ctx, []engine.TriggerDue{{OrderID: idOf(t, s, nos[0]), At: at}}); err != nil {
		t.Fatal(err)
	}
	clock.Set(at.Add(time.Millisecond))
	work.held.Store(true)
	runTrigger(t, c, 0)
	work.held.Store(false)
	wantRedisNext(t, tr, clock.Now().Add(engine.DefaultTriggerRetries[0]))
	clock.Advance(engine.DefaultTriggerRetries[0] + time.Millisecond)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis once the other claimer let it go", got)
	}
}
