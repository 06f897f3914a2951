package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/redis"
)

// base is the time the tests start from; scores are absolute, so it need
// not be the clock's.
var base = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// keyNames are the keys of a Trigger under its prefix.
var keyNames = []string{"due", "processing", "attempts", "notify", "seeded"}

// shared is the test Redis with a prefix of the test's own, as several
// processes would share it: a client to look at the keys directly, and
// Triggers made on demand. The keys are deleted when the test ends.
type shared struct {
	url    string
	prefix string
	rdb    *goredis.Client
}

func newShared(t testing.TB) *shared {
	t.Helper()
	url := testenv.Redis(t)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatalf("%s: %v", testenv.EnvRedis, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s := &shared{url: url, prefix: "lapse-test-" + hex.EncodeToString(b) + ":", rdb: goredis.NewClient(opt)}
	t.Cleanup(func() {
		if err := s.rdb.Del(context.Background(), s.keys()...).Err(); err != nil {
			t.Errorf("delete the test keys: %v", err)
		}
		s.rdb.Close()
	})
	return s
}

func (s *shared) key(name string) string { return s.prefix + name }

func (s *shared) keys() []string {
	out := make([]string, len(keyNames))
	for i, n := range keyNames {
		out[i] = s.key(n)
	}
	return out
}

// trigger is one more process on the shared keys.
func (s *shared) trigger(t testing.TB) *redis.Trigger {
	t.Helper()
	tr, err := redis.New(redis.Config{URL: s.url, Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// mem is the member of the order with id id, and mems those of ids.
func mem(id int64) string { return redis.Member(id) }

func mems(ids ...int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = mem(id)
	}
	return out
}

// score is the score of id's member in the set name, or the zero time when
// it is not there.
func (s *shared) score(t *testing.T, name string, id int64) time.Time {
	t.Helper()
	return s.rawScore(t, name, mem(id))
}

// rawScore is member's score in the set name, or the zero time.
func (s *shared) rawScore(t *testing.T, name, member string) time.Time {
	t.Helper()
	v, err := s.rdb.ZScore(t.Context(), s.key(name), member).Result()
	if err == goredis.Nil {
		return time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(int64(v)).UTC()
}

func (s *shared) attempts(t *testing.T, id int64) int {
	t.Helper()
	n, err := s.rdb.HGet(t.Context(), s.key("attempts"), mem(id)).Int()
	if err != nil && err != goredis.Nil {
		t.Fatal(err)
	}
	return n
}

func add(t testing.TB, tr *redis.Trigger, at time.Time, ids ...int64) {
	t.Helper()
	due := make([]engine.TriggerDue, len(ids))
	for i, id := range ids {
		due[i] = engine.TriggerDue{OrderID: id, At: at}
	}
	if err := tr.Add(context.Background(), due); err != nil {
		t.Fatalf("Add(%v at %v): %v", ids, at, err)
	}
}

func claim(t testing.TB, tr *redis.Trigger, now time.Time, lease time.Duration, limit int) []string {
	t.Helper()
	got, _, err := tr.Claim(context.Background(), now, lease, limit)
	if err != nil {
		t.Fatalf("Claim(%v): %v", now, err)
	}
	return got
}

// wantClaim claims and wants the members of ids.
func wantClaim(t *testing.T, tr *redis.Trigger, now time.Time, lease time.Duration, limit int, ids ...int64) {
	t.Helper()
	wantClaimRaw(t, tr, now, lease, limit, mems(ids...)...)
}

func wantClaimRaw(t *testing.T, tr *redis.Trigger, now time.Time, lease time.Duration, limit int, want ...string) {
	t.Helper()
	if got := claim(t, tr, now, lease, limit); !slices.Equal(got, want) {
		t.Errorf("Claim(+%v, limit %d) = %q, want %q", now.Sub(base), limit, got, want)
	}
}

func wantNext(t *testing.T, tr *redis.Trigger, want time.Time) {
	t.Helper()
	got, ok, err := tr.Next(t.Context())
	if err != nil || ok != !want.IsZero() || !got.Equal(want) {
		t.Errorf("Next = %v, %v, %v; want %v", got, ok, err, want)
	}
}

func TestClaimDueTimes(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	const a, b, c = 1, 200, 1 << 40
	wantNext(t, tr, time.Time{})
	wantClaim(t, tr, base.Add(time.Hour), time.Minute, 10)

	add(t, tr, base.Add(20*time.Millisecond), c)
	add(t, tr, base.Add(10*time.Millisecond+400*time.Microsecond), a) // stored as +11ms
	add(t, tr, base.Add(5*time.Millisecond), b)
	wantNext(t, tr, base.Add(5*time.Millisecond))

	wantClaim(t, tr, base.Add(5*time.Millisecond-time.Nanosecond), time.Minute, 10)
	wantClaim(t, tr, base.Add(10*time.Millisecond+400*time.Microsecond), time.Minute, 10, b)
	wantClaim(t, tr, base.Add(10*time.Millisecond+999*time.Microsecond), time.Minute, 10)
	wantClaim(t, tr, base.Add(30*time.Millisecond), time.Minute, 1, a)
	wantClaim(t, tr, base.Add(30*time.Millisecond), time.Minute, 0)
	wantClaim(t, tr, base.Add(30*time.Millisecond), time.Minute, 10, c)
	wantClaim(t, tr, base.Add(time.Minute), time.Minute, 10)
	wantNext(t, tr, base.Add(time.Minute+11*time.Millisecond)) // b's lease, from +10.4ms rounded up
	if at := s.score(t, "processing", a); !at.Equal(base.Add(30*time.Millisecond + time.Minute)) {
		t.Errorf("a leased until %v, want +30ms+1m", at)
	}
}

// TestClaimNeverEarly claims at random times among random deadlines with
// sub-millisecond parts: no member comes before its deadline, each comes
// once, earliest first within a claim.
func TestClaimNeverEarly(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	rng := mathrand.New(mathrand.NewPCG(1, 2))
	deadline := map[string]time.Time{}
	var due []engine.TriggerDue
	for i := range 500 {
		at := base.Add(time.Duration(rng.Int64N(int64(time.Second))))
		id := int64(i + 1) // small ids, and large ones of seven and eight bytes
		if i%2 == 1 {
			id *= 0x9e3779b97f4a
		}
		deadline[mem(id)] = at
		due = append(due, engine.TriggerDue{OrderID: id, At: at})
	}
	if err := tr.Add(t.Context(), due); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for now := base; len(seen) < len(deadline); now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Millisecond)))) {
		if now.After(base.Add(2 * time.Second)) {
			t.Fatalf("%d of %d claimed by +2s", len(seen), len(deadline))
		}
		got := claim(t, tr, now, time.Hour, 7)
		for i, m := range got {
			if deadline[m].After(now) {
				t.Errorf("%q claimed at +%v, due at +%v", m, now.Sub(base), deadline[m].Sub(base))
			}
			if seen[m] {
				t.Errorf("%q claimed twice", m)
			}
			seen[m] = true
			if i > 0 && deadline[m].Truncate(time.Millisecond).Before(deadline[got[i-1]].Truncate(time.Millisecond)) {
				t.Errorf("%q (+%v) claimed after %q (+%v)", m, deadline[m].Sub(base), got[i-1], deadline[got[i-1]].Sub(base))
			}
		}
	}
}

// TestLeaseExpiry has two processes share the keys: what one claimed and
// dropped, the other claims once the lease runs out, first, with the
// attempts counted so far.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	p1, p2 := s.trigger(t), s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	const x, y, m1, m2, m3 = 7, 1 << 33, 100, 101, 102

	add(t, p1, base, x)
	wantClaim(t, p1, base, 10*time.Second, 10, x)
	if n, _, err := p1.Retry(ctx, mem(x), base, delays); n != 1 || err != nil {
		t.Fatalf("Retry = %d, %v; want attempt 1", n, err)
	}
	wantClaim(t, p1, base.Add(time.Second), 10*time.Second, 10, x)
	// p1 dies holding x until +11s. y is due meanwhile.
	add(t, p2, base.Add(2*time.Second), y)
	wantClaim(t, p2, base.Add(10*time.Second), 10*time.Second, 0)
	wantNext(t, p2, base.Add(2*time.Second))
	wantClaim(t, p2, base.Add(11*time.Second), 10*time.Second, 1, x)
	wantClaim(t, p2, base.Add(11*time.Second), 10*time.Second, 1, y)
	if err := p2.Done(ctx, mems(y)); err != nil {
		t.Fatal(err)
	}
	if n, notified, err := p2.Retry(ctx, mem(x), base.Add(11*time.Second), delays); n != 2 || notified || err != nil {
		t.Errorf("Retry in the second process = %d, %v, %v; want attempt 2", n, notified, err)
	}
	wantClaim(t, p2, base.Add(13*time.Second), time.Minute, 10, x)

	// Expired leases past the limit are due again from when they expired.
	add(t, p1, base.Add(20*time.Second), m1, m2, m3)
	wantClaim(t, p1, base.Add(20*time.Second), time.Second, 10, m1, m2, m3)
	wantNext(t, p2, base.Add(21*time.Second))
	wantClaim(t, p2, base.Add(22*time.Second), time.Minute, 1, m1)
	for _, id := range []int64{m2, m3} {
		if at := s.score(t, "due", id); !at.Equal(base.Add(21 * time.Second)) {
			t.Errorf("%d due at %v, want +21s", id, at)
		}
	}
	wantClaim(t, p1, base.Add(22*time.Second), time.Minute, 10, m2, m3)
	if n := s.attempts(t, x); n != 2 {
		t.Errorf("attempts of x = %d, want 2", n)
	}
}

func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{time.Second, 2 * time.Second}
	const x = 12345678

	add(t, tr, base, x)
	now := base
	for attempt, wait := range delays {
		wantClaim(t, tr, now, time.Minute, 10, x)
		n, notified, err := tr.Retry(ctx, mem(x), now, delays)
		if n != attempt+1 || notified || err != nil {
			t.Fatalf("Retry = %d, %v, %v; want attempt %d", n, notified, err, attempt+1)
		}
		if at := s.score(t, "processing", x); !at.IsZero() {
			t.Errorf("attempt %d: x still in processing", n)
		}
		wantNext(t, tr, now.Add(wait))
		wantClaim(t, tr, now.Add(wait-time.Millisecond), time.Minute, 10)
		now = now.Add(wait)
	}
	wantClaim(t, tr, now, time.Minute, 10, x)
	n, notified, err := tr.Retry(ctx, mem(x), now, delays)
	if n != 3 || !notified || err != nil {
		t.Fatalf("last Retry = %d, %v, %v; want attempt 3, notified", n, notified, err)
	}
	if c, err := tr.ToNotify(ctx); c != 1 || err != nil {
		t.Errorf("ToNotify = %d, %v; want 1", c, err)
	}
	if at := s.score(t, "notify", x); !at.Equal(now) {
		t.Errorf("x to notify since %v, want %v", at, now)
	}
	if n := s.attempts(t, x); n != 0 {
		t.Errorf("attempts of x = %d after giving up", n)
	}
	wantNext(t, tr, time.Time{})
	wantClaim(t, tr, now.Add(time.Hour), time.Minute, 10)

	// A member that is not in processing is left alone.
	if n, notified, err := tr.Retry(ctx, mem(x), now, delays); n != 0 || notified || err != nil {
		t.Errorf("Retry of a member not claimed = %d, %v, %v; want 0", n, notified, err)
	}
	if n, _ := tr.ToNotify(ctx); n != 1 {
		t.Errorf("ToNotify = %d after a stray Retry", n)
	}
}

func TestDoneForgetsAttempts(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{time.Second, time.Second, time.Second}
	const x, y = 1, 2

	add(t, tr, base, x, y)
	wantClaim(t, tr, base, time.Minute, 10, x, y)
	for _, id := range []int64{x, y} {
		if n, _, err := tr.Retry(ctx, mem(id), base, delays); n != 1 || err != nil {
			t.Fatalf("Retry(%d) = %d, %v", id, n, err)
		}
	}
	wantClaim(t, tr, base.Add(time.Second), time.Minute, 10, x, y)
	if err := tr.Done(ctx, mems(x, y)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Done(ctx, nil); err != nil {
		t.Errorf("Done(nil): %v", err)
	}
	wantNext(t, tr, time.Time{})
	for _, id := range []int64{x, y} {
		if n := s.attempts(t, id); n != 0 {
			t.Errorf("attempts of %d = %d after Done", id, n)
		}
	}
	add(t, tr, base.Add(time.Minute), x)
	wantClaim(t, tr, base.Add(time.Minute), time.Minute, 10, x)
	if n, _, err := tr.Retry(ctx, mem(x), base.Add(time.Minute), delays); n != 1 || err != nil {
		t.Errorf("Retry after Done and Add = %d, %v; want attempt 1", n, err)
	}
}

// TestRelease hands claimed members back: each is due at once, for any
// claimer, with its attempts kept; a member that was done, or whose
// deadline Add moved since the claim, is left as it is.
func TestRelease(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{time.Second, time.Second}
	const x, y, z = 7, 8, 9

	add(t, tr, base, x, y, z)
	wantClaim(t, tr, base, time.Minute, 10, x, y, z)
	if n, _, err := tr.Retry(ctx, mem(x), base, delays); n != 1 || err != nil {
		t.Fatalf("Retry = %d, %v", n, err)
	}
	now := base.Add(time.Second)
	wantClaim(t, tr, now, time.Minute, 1, x)
	if err := tr.Done(ctx, mems(y)); err != nil {
		t.Fatal(err)
	}
	add(t, tr, base.Add(30*time.Second), z) // moved while claimed
	if err := tr.Release(ctx, mems(x, y, z), now); err != nil {
		t.Fatal(err)
	}
	if err := tr.Release(ctx, nil, now); err != nil {
		t.Errorf("Release(nil): %v", err)
	}
	if at := s.score(t, "processing", x); !at.IsZero() {
		t.Errorf("x still leased until %v after Release", at)
	}
	if n := s.attempts(t, x); n != 1 {
		t.Errorf("attempts of x = %d after Release, want 1 kept", n)
	}
	if at := s.score(t, "due", y); !at.IsZero() {
		t.Errorf("y, done, is due at %v after Release", at)
	}
	if at := s.score(t, "due", z); !at.Equal(base.Add(30 * time.Second)) {
		t.Errorf("z, moved, is due at %v after Release, want %v", at, base.Add(30*time.Second))
	}
	wantNext(t, tr, now)
	wantClaim(t, tr, now, time.Minute, 10, x)
}

// TestAddMovesOutOfProcessing moves the deadline of a claimed member: it is
// due at the new time, or at its lease expiry if that is earlier (when it
// would have come due again, had its claim failed: a later time may be a
// stale write), a late Retry of the old claim leaves it due, and its
// attempts are kept.
func TestAddMovesOutOfProcessing(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{time.Second, time.Second, time.Second}
	const x = 99

	add(t, tr, base, x)
	wantClaim(t, tr, base, time.Second, 10, x)
	if n, _, err := tr.Retry(ctx, mem(x), base, delays); n != 1 || err != nil {
		t.Fatalf("Retry = %d, %v", n, err)
	}
	wantClaim(t, tr, base.Add(time.Second), time.Minute, 10, x) // leased until +61s
	add(t, tr, base.Add(30*time.Second), x)
	if at := s.score(t, "processing", x); !at.IsZero() {
		t.Fatalf("x still in processing, leased until %v", at)
	}
	if n := s.attempts(t, x); n != 1 {
		t.Errorf("attempts of x = %d after Add, want 1 kept", n)
	}
	wantNext(t, tr, base.Add(30*time.Second))
	wantClaim(t, tr, base.Add(20*time.Second), time.Second, 10)
	if n, _, err := tr.Retry(ctx, mem(x), base.Add(20*time.Second), delays); n != 0 || err != nil {
		t.Errorf("late Retry = %d, %v; want 0", n, err)
	}
	wantNext(t, tr, base.Add(30*time.Second))
	wantClaim(t, tr, base.Add(30*time.Second), time.Second, 10, x) // leased until +31s
	add(t, tr, base.Add(time.Hour), x)
	if at := s.score(t, "due", x); !at.Equal(base.Add(31 * time.Second)) {
		t.Errorf("x due at +%v after Add of a later time while claimed, want its lease expiry +31s", at.Sub(base))
	}
	wantClaim(t, tr, base.Add(31*time.Second), time.Second, 10, x)
	if n, _, err := tr.Retry(ctx, mem(x), base.Add(31*time.Second), delays); n != 2 || err != nil {
		t.Errorf("Retry after the move = %d, %v; want attempt 2", n, err)
	}
}

// TestRequeue puts claimed members back, each at its own time, however
// far past its lease, attempts kept; a member done, or moved by Add since
// it was claimed, is left as it is.
func TestRequeue(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	const x, y, z = 7, 8, 9

	add(t, tr, base, x, y, z)
	wantClaim(t, tr, base, time.Minute, 10, x, y, z)
	if n, _, err := tr.Retry(ctx, mem(x), base, []time.Duration{time.Second}); n != 1 || err != nil {
		t.Fatalf("Retry = %d, %v", n, err)
	}
	wantClaim(t, tr, base.Add(time.Second), time.Minute, 10, x)
	if err := tr.Done(ctx, mems(y)); err != nil {
		t.Fatal(err)
	}
	add(t, tr, base.Add(30*time.Second), z) // moved since the claim
	due := []engine.TriggerDue{{OrderID: x, At: base.Add(time.Hour)}, {OrderID: y, At: base.Add(time.Hour)}, {OrderID: z, At: base.Add(time.Hour)}}
	if err := tr.Requeue(ctx, due); err != nil {
		t.Fatal(err)
	}
	if err := tr.Requeue(ctx, nil); err != nil {
		t.Errorf("Requeue(nil): %v", err)
	}
	if at := s.score(t, "due", x); !at.Equal(base.Add(time.Hour)) {
		t.Errorf("x due at +%v after Requeue, want +1h", at.Sub(base))
	}
	if at := s.score(t, "processing", x); !at.IsZero() {
		t.Errorf("x still leased until %v after Requeue", at)
	}
	if n := s.attempts(t, x); n != 1 {
		t.Errorf("attempts of x = %d after Requeue, want 1 kept", n)
	}
	if at := s.score(t, "due", y); !at.IsZero() {
		t.Errorf("y, done, is due at %v after Requeue", at)
	}
	if at := s.score(t, "due", z); !at.Equal(base.Add(30 * time.Second)) {
		t.Errorf("z, moved, is due at +%v after Requeue, want +30s", at.Sub(base))
	}
}

// TestAddNeverLater: Add only ever brings a due member's time earlier. A
// later time written after an earlier one (the write of a deadline that
// was shortened since, delayed; a seed's page read before the change)
// would have the order close late; an earlier time than the order's is
// harmless, since the engine checks the database and puts a member that is
// not yet due back at its order's deadline. A member in processing, or in
// no set, takes the time Add gives.
func TestAddNeverLater(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	const x, y = 7, 8

	add(t, tr, base.Add(time.Hour), x)
	add(t, tr, base.Add(time.Minute), x) // shortened
	add(t, tr, base.Add(time.Hour), x)   // the stale write
	if at := s.score(t, "due", x); !at.Equal(base.Add(time.Minute)) {
		t.Errorf("x due at +%v after a later time came over an earlier one, want +1m", at.Sub(base))
	}
	// One call with both, as a seed's page and the queue may hand them.
	if err := tr.Add(t.Context(), []engine.TriggerDue{{OrderID: y, At: base.Add(time.Minute)}, {OrderID: y, At: base.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if at := s.score(t, "due", y); !at.Equal(base.Add(time.Minute)) {
		t.Errorf("y due at +%v, want +1m", at.Sub(base))
	}
	// Claimed, leased until +2m, a member is due again at the earlier of
	// its lease expiry and the time Add gives.
	wantClaim(t, tr, base.Add(time.Minute), time.Minute, 10, x, y)
	add(t, tr, base.Add(time.Hour), x)
	if at := s.score(t, "due", x); !at.Equal(base.Add(2 * time.Minute)) {
		t.Errorf("x due at +%v after Add of a later time while claimed, want its lease expiry +2m", at.Sub(base))
	}
	add(t, tr, base.Add(90*time.Second), y)
	if at := s.score(t, "due", y); !at.Equal(base.Add(90 * time.Second)) {
		t.Errorf("y due at +%v after Add of an earlier time while claimed, want +90s", at.Sub(base))
	}
}

// TestEarlierMembers: an earlier version named orders by their order
// numbers. During an upgrade its members share the sets with the new ones:
// both are claimed in due order, leased, retried and done alike, a lease it
// left runs out as any other, and adding an order's new member leaves its
// old one as it is.
func TestEarlierMembers(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{time.Second}
	const id = 42
	// What the earlier version left: ORD-1 due, ORD-2 leased until +1s
	// after a failed attempt, and ORD-3 also due, which is order 42.
	for _, z := range []struct {
		key, member string
		at          time.Time
	}{{"due", "ORD-1", base}, {"processing", "ORD-2", base.Add(time.Second)}, {"due", "ORD-3", base.Add(2 * time.Second)}} {
		if err := s.rdb.ZAdd(ctx, s.key(z.key), goredis.Z{Score: float64(z.at.UnixMilli()), Member: z.member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.rdb.HSet(ctx, s.key("attempts"), "ORD-2", 1).Err(); err != nil {
		t.Fatal(err)
	}
	add(t, tr, base.Add(3*time.Second), id)
	if at := s.rawScore(t, "due", "ORD-3"); !at.Equal(base.Add(2 * time.Second)) {
		t.Errorf("ORD-3 due at %v after order 42 was added, want +2s", at)
	}
	wantNext(t, tr, base)
	wantClaimRaw(t, tr, base, time.Minute, 10, "ORD-1")
	if n, _, err := tr.Retry(ctx, "ORD-1", base, delays); n != 1 || err != nil {
		t.Errorf("Retry(ORD-1) = %d, %v; want attempt 1", n, err)
	}
	wantClaimRaw(t, tr, base.Add(time.Second), time.Minute, 1, "ORD-2")
	if n, notified, err := tr.Retry(ctx, "ORD-2", base.Add(time.Second), delays); n != 2 || !notified || err != nil {
		t.Errorf("Retry(ORD-2) = %d, %v, %v; want attempt 2, notified", n, notified, err)
	}
	wantClaimRaw(t, tr, base.Add(3*time.Second), time.Minute, 10, "ORD-1", "ORD-3", mem(id))
	if err := tr.Done(ctx, []string{"ORD-1", "ORD-3", mem(id)}); err != nil {
		t.Fatal(err)
	}
	wantNext(t, tr, time.Time{})
	for _, k := range []string{"due", "processing", "attempts"} {
		if n, err := s.rdb.Exists(ctx, s.key(k)).Result(); n != 0 || err != nil {
			t.Errorf("%s left after every member is done: %d, %v", k, n, err)
		}
	}
	if n, err := tr.ToNotify(ctx); n != 1 || err != nil {
		t.Errorf("ToNotify = %d, %v; want ORD-2", n, err)
	}
}

// TestConcurrentClaimers has eight goroutines in two processes claim the
// same set: each member goes to exactly one of them.
func TestConcurrentClaimers(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	procs := []*redis.Trigger{s.trigger(t), s.trigger(t)}
	const n = 3000
	var due []engine.TriggerDue
	for i := range n {
		due = append(due, engine.TriggerDue{OrderID: int64(i) + 1, At: base.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := procs[0].Add(t.Context(), due); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		got  = map[string]int{}
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	for g := range 8 {
		tr := procs[g%2]
		wg.Go(func() {
			for {
				ms, _, err := tr.Claim(context.Background(), base.Add(time.Hour), time.Hour, 1+g)
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					return
				}
				mu.Lock()
				for _, m := range ms {
					got[m]++
				}
				mu.Unlock()
				if err := tr.Done(context.Background(), ms); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(got) != n {
		t.Errorf("%d members claimed, want %d", len(got), n)
	}
	for m, c := range got {
		if c != 1 {
			t.Errorf("%q claimed %d times", m, c)
		}
	}
}

// TestSeeded loses the keys as a flush would: Claim reports it.
func TestSeeded(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	seeded := func() bool {
		t.Helper()
		_, ok, err := tr.Claim(ctx, base, time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	add(t, tr, base.Add(time.Hour), 1)
	if seeded() {
		t.Error("seeded before MarkSeeded")
	}
	if err := tr.MarkSeeded(ctx); err != nil {
		t.Fatal(err)
	}
	if !seeded() {
		t.Error("not seeded after MarkSeeded")
	}
	if err := s.rdb.Del(ctx, s.keys()...).Err(); err != nil {
		t.Fatal(err)
	}
	if seeded() {
		t.Error("seeded after the keys were lost")
	}
	wantNext(t, tr, time.Time{})
}

// TestSeedLost: a seed during which Redis loses its data (every key of
// the prefix, the seed's own included) is not marked: MarkSeeded returns
// ErrSeedLost and Claim still reports unseeded, so that the engine seeds
// again rather than trust a set without the members added before the loss.
// Seeds of two processes at once each end on their own.
func TestSeedLost(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	a, b := s.trigger(t), s.trigger(t)
	ctx := t.Context()
	seeded := func() bool {
		t.Helper()
		_, ok, err := a.Claim(ctx, base, time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	lose := func() {
		t.Helper()
		keys, err := s.rdb.Keys(ctx, s.prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}

	if err := a.BeginSeed(ctx); err != nil {
		t.Fatal(err)
	}
	add(t, a, base.Add(time.Hour), 1)
	lose()
	add(t, a, base.Add(time.Hour), 2)
	if err := a.MarkSeeded(ctx); !errors.Is(err, redis.ErrSeedLost) {
		t.Errorf("MarkSeeded after the data was lost during the seed: %v, want ErrSeedLost", err)
	}
	if seeded() {
		t.Error("seeded without the member lost during the seed")
	}

	for _, tr := range []*redis.Trigger{a, b} {
		if err := tr.BeginSeed(ctx); err != nil {
			t.Fatal(err)
		}
		add(t, tr, base.Add(time.Hour), 1, 2)
	}
	for _, tr := range []*redis.Trigger{b, a} {
		if err := tr.MarkSeeded(ctx); err != nil {
			t.Errorf("MarkSeeded of a seed that lost nothing: %v", err)
		}
	}
	if !seeded() {
		t.Error("not seeded after MarkSeeded")
	}
	if keys, err := s.rdb.Keys(ctx, s.prefix+"seeding:*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("seeds ended, and their keys are left: %q, %v", keys, err)
	}

	// A seed that never ended (an Add failed) leaves its key only until
	// the next seed of the same Trigger begins.
	for range 3 {
		if err := a.BeginSeed(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if keys, err := s.rdb.Keys(ctx, s.prefix+"seeding:*").Result(); err != nil || len(keys) != 1 {
		t.Errorf("after three seeds begun, the last under way: keys %q, %v; want one", keys, err)
	}
	if err := a.MarkSeeded(ctx); err != nil {
		t.Errorf("MarkSeeded of the last seed begun: %v", err)
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	if err := s.trigger(t).Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// TestDeadRedisFailsFast needs no Redis: calls to one that refuses or never
// answers fail within the timeout, not after the client's own retries.
func TestDeadRedisFailsFast(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, addr string }{
		{"refused", "127.0.0.1:1"},
		{"unanswered", testenv.Unanswered(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr, err := redis.New(redis.Config{URL: "redis://" + c.addr + "/0"})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			start := time.Now()
			if err := tr.Ping(t.Context()); err == nil {
				t.Error("Ping of a dead Redis succeeded")
			}
			if _, _, err := tr.Claim(t.Context(), base, time.Minute, 10); err == nil {
				t.Error("Claim on a dead Redis succeeded")
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("two calls took %v", d)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []redis.Config{
		{},
		{URL: "http://127.0.0.1:6379"},
		{URL: "redis://127.0.0.1:6379", Timeout: -time.Second},
	} {
		if _, err := redis.New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestMemoryPerMember measures what a pending order costs in the due set
// (MEMORY USAGE over every member, which a given Redis answers the same way
// each time) and holds it to the SPEC's 110 bytes. A member is made from the
// order's id, so the order number's length does not enter; the ids are those
// of a young installation, of one with ten million orders and of one with a
// hundred trillion. The cost per order is highest just after the set's hash
// table doubled, while Redis still holds the old table beside the new (65,600
// members); it is measured there too. For comparison it logs what members
// cost as an earlier version wrote them, as order numbers of 12, 24 and 32
// bytes. The engine's TestTriggerRedisSeedMemory seeds the set from orders
// with such order numbers.
func TestMemoryPerMember(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("adds 100,000 members seven times")
	}
	s := newShared(t)
	// Each Add of a batch is one script of 5,000 members: on a loaded
	// machine it may take longer than the default timeout, which is about
	// degrading the engine, not about memory.
	tr, err := redis.New(redis.Config{URL: s.url, Prefix: s.prefix, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	ctx := t.Context()
	const batch, target = 5_000, 110.0
	perOrder := func(n int) float64 {
		t.Helper()
		if c, err := s.rdb.ZCard(ctx, s.key("due")).Result(); c != int64(n) || err != nil {
			t.Fatalf("ZCARD due = %d, %v; want %d", c, err, n)
		}
		used, err := s.rdb.MemoryUsage(ctx, s.key("due"), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.Del(ctx, s.key("due")).Err(); err != nil {
			t.Fatal(err)
		}
		return float64(used) / float64(n)
	}
	for _, c := range []struct {
		first int64
		n     int
	}{{1, 100_000}, {10_000_000, 100_000}, {100_000_000_000_000, 100_000}, {10_000_000, 65_600}} {
		for i := 0; i < c.n; i += batch {
			due := make([]engine.TriggerDue, min(batch, c.n-i))
			for j := range due {
				due[j] = engine.TriggerDue{OrderID: c.first + int64(i+j), At: base.Add(time.Duration(i+j) * time.Millisecond)}
			}
			if err := tr.Add(ctx, due); err != nil {
				t.Fatal(err)
			}
		}
		got := perOrder(c.n)
		t.Logf("%d ids from %d (members of %d bytes): %.1f bytes per pending order (target ≤ %v)",
			c.n, c.first, len(mem(c.first+int64(c.n)-1)), got, target)
		if got > target {
			t.Errorf("%d ids from %d: %.1f bytes per pending order, want ≤ %v", c.n, c.first, got, target)
		}
	}
	const n = 100_000
	for _, width := range []int{12, 24, 32} {
		for i := 0; i < n; i += batch {
			zs := make([]goredis.Z, batch)
			for j := range zs {
				// ORD-00012345, ORD-0000000000000000012345, ...
				zs[j] = goredis.Z{Member: fmt.Sprintf("ORD-%0*d", width-4, i+j), Score: float64(base.Add(time.Duration(i+j) * time.Millisecond).UnixMilli())}
			}
			if err := s.rdb.ZAdd(ctx, s.key("due"), zs...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%d earlier members, order numbers of %d bytes: %.1f bytes per pending order", n, width, perOrder(n))
	}
}

// TestNextScoreOutOfRange: a member whose score lies beyond what a time
// holds (written by something other than Lapse under its prefix: +inf for
// "never", 1e300) is due at the end of time, not at the start: Next put it
// in the distant past (int64 of +Inf), and the shared path, told that
// something was due at once and finding nothing to claim, asked Redis
// again without sleeping, round after round, for as long as it stayed.
func TestNextScoreOutOfRange(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	end := time.UnixMilli(math.MaxInt64).UTC()
	for _, score := range []float64{math.Inf(1), 1e300, 1e19} {
		if err := s.rdb.ZAdd(ctx, s.key("due"), goredis.Z{Score: score, Member: "stranger"}).Err(); err != nil {
			t.Fatal(err)
		}
		wantNext(t, tr, end)
		wantClaimRaw(t, tr, base, time.Minute, 10)
	}
	add(t, tr, base, 7)
	wantNext(t, tr, base)

	// In processing, a lease that never ends is the same.
	if err := s.rdb.ZAdd(ctx, s.key("processing"), goredis.Z{Score: math.Inf(1), Member: "stranger2"}).Err(); err != nil {
		t.Fatal(err)
	}
	wantClaim(t, tr, base, time.Minute, 10, 7)
	if err := tr.Done(ctx, mems(7)); err != nil {
		t.Fatal(err)
	}
	wantNext(t, tr, end)

	// A score below what a time holds is long due: claimed at once.
	if err := s.rdb.ZAdd(ctx, s.key("due"), goredis.Z{Score: math.Inf(-1), Member: "early"}).Err(); err != nil {
		t.Fatal(err)
	}
	wantNext(t, tr, time.UnixMilli(math.MinInt64).UTC())
	wantClaimRaw(t, tr, base, time.Minute, 10, "early")
}

// TestNotifyKept: a member stays in the to-notify set for NotifyKept, then
// leaves it at the next claim. Nothing took members out of it, and every
// order given up during a database outage stayed in Redis for good.
func TestNotifyKept(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr := s.trigger(t)
	ctx := t.Context()
	delays := []time.Duration{}
	giveUp := func(now time.Time, id int64) {
		t.Helper()
		add(t, tr, now, id)
		wantClaim(t, tr, now, time.Minute, 10, id)
		if _, notified, err := tr.Retry(ctx, mem(id), now, delays); !notified || err != nil {
			t.Fatalf("Retry(%d) = %v, %v; want notified", id, notified, err)
		}
	}
	giveUp(base, 1)
	giveUp(base.Add(redis.NotifyKept), 2) // 1 went there NotifyKept ago: kept
	if n, err := tr.ToNotify(ctx); n != 2 || err != nil {
		t.Errorf("ToNotify = %d, %v; want 2", n, err)
	}
	giveUp(base.Add(redis.NotifyKept+time.Millisecond), 3)
	if n, err := tr.ToNotify(ctx); n != 2 || err != nil {
		t.Errorf("ToNotify = %d, %v; want 2, the first gone", n, err)
	}
	if at := s.score(t, "notify", 1); !at.IsZero() {
		t.Errorf("member 1 still to notify since %v, past NotifyKept", at)
	}

	// A claim that finds nothing due takes them out all the same, a
	// thousand at a time.
	for i := range int64(1500) {
		if err := s.rdb.ZAdd(ctx, s.key("notify"), goredis.Z{Score: float64(base.UnixMilli()), Member: mem(100 + i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	later := base.Add(3 * redis.NotifyKept)
	wantClaim(t, tr, later, time.Minute, 10)
	if n, err := tr.ToNotify(ctx); n != 502 || err != nil {
		t.Errorf("ToNotify = %d, %v after one claim; want the 502 past the first thousand", n, err)
	}
	wantClaim(t, tr, later, time.Minute, 10)
	if n, err := tr.ToNotify(ctx); n != 0 || err != nil {
		t.Errorf("ToNotify = %d, %v after two claims; want 0", n, err)
	}
}
