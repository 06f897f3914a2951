// Package redis is the shared precise trigger of Lapse: an engine.SharedTrigger
// kept in Redis as a sorted set of due times, changed only by Lua scripts.
//
// Every process adds the deadlines it sets; any process claims the members
// that come due, under a lease, and tells the claimer to look at the
// database at once. Redis is only a hint: the database decides whether an
// order fires, and the sweeper finds whatever Redis loses. So every command
// has a short timeout, and a Redis that is slow looks failed and the engine
// falls back to the sweeper rather than wait.
//
// All keys of a Trigger share its prefix, so that several installations, or
// tests, share one Redis. The scripts touch several keys at once: on Redis
// Cluster the prefix must carry a hash tag, such as "{lapse}:", to keep them
// in one slot. Redis should run with maxmemory-policy noeviction: an evicted
// key is lost data that the seeded marker may not reveal.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	neturl "net/url"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/engine"
)

var _ engine.SharedTrigger = (*Trigger)(nil)

// Defaults of Config.
const (
	DefaultPrefix  = "lapse:"
	DefaultTimeout = 200 * time.Millisecond
)

// Config configures a Trigger. URL or Client is required.
type Config struct {
	// URL is the Redis server, e.g. redis://:password@127.0.0.1:6379/0, as
	// goredis.ParseURL reads it; or, with a master_name parameter, the
	// Sentinels that watch a master and its replicas, as
	// goredis.ParseFailoverURL reads it:
	//
	//	redis://sentinel1:26379/0?master_name=lapse&addr=sentinel2:26379&addr=sentinel3:26379
	//
	// The host and each addr are Sentinels; the path is the database; a
	// user and password before the host are the Sentinels' own, while the
	// password parameter is the master's. The client asks the Sentinels
	// for the master, and after a failover finds the new one by itself.
	URL string
	// Prefix starts every key of the trigger. Default DefaultPrefix.
	Prefix string
	// Timeout bounds each call, connecting included: a slow Redis must
	// look failed quickly so that the engine degrades to the sweeper.
	// It overrides the URL's timeouts. Default DefaultTimeout.
	Timeout time.Duration
	// Client, when set, is used instead of a client made from URL, and
	// Close leaves it open. Its own options then govern retries and socket
	// timeouts; Timeout still bounds each call through its context.
	Client *goredis.Client
}

func (c *Config) setDefaults() error {
	if c.URL == "" && c.Client == nil {
		return errors.New("redis: a server URL is required")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Timeout < 0 {
		return errors.New("redis: negative timeout")
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return nil
}

// Trigger is the Redis engine.SharedTrigger. It is safe for concurrent use,
// and any number of Triggers, in any number of processes, may share the
// keys of one prefix.
type Trigger struct {
	client  *goredis.Client
	owned   bool // made from Config.URL: Close closes it
	timeout time.Duration

	due, processing, attempts, notify, seeded string
	seedingPrefix                             string // + a seed's token: the key of a seed under way

	mu   sync.Mutex
	seed string // the key of the seed BeginSeed began and MarkSeeded has not ended
}

// New returns a Trigger on the keys of cfg.Prefix. It does not connect:
// the first call does, and Ping checks that Redis answers.
func New(cfg Config) (*Trigger, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	t := &Trigger{
		client:     cfg.Client,
		timeout:    cfg.Timeout,
		due:        cfg.Prefix + "due",
		processing: cfg.Prefix + "processing",
		attempts:   cfg.Prefix + "attempts",
		notify:     cfg.Prefix + "notify",
		seeded:     cfg.Prefix + "seeded",

		seedingPrefix: cfg.Prefix + "seeding:",
	}
	if t.client == nil {
		c, err := newClient(cfg.URL, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		t.client, t.owned = c, true
	}
	return t, nil
}

// newClient makes the client of url: a Sentinel failover client when it
// has a master_name parameter, else a client of one server. Every
// connect, read, write and wait for the pool is bounded by timeout, and a
// command is not retried: a script that timed out may have run, and
// running Retry twice would count two attempts. The engine tries again on
// its next beat.
func newClient(url string, timeout time.Duration) (*goredis.Client, error) {
	if IsSentinelURL(url) {
		opt, err := failoverOptions(url, timeout)
		if err != nil {
			return nil, err
		}
		return goredis.NewFailoverClient(opt), nil
	}
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	return goredis.NewClient(opt), nil
}

// failoverOptions reads a Sentinel URL (see Config.URL) with the bounds
// of newClient.
func failoverOptions(url string, timeout time.Duration) (*goredis.FailoverOptions, error) {
	opt, err := goredis.ParseFailoverURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: sentinel: %w", err)
	}
	if opt.MasterName == "" {
		return nil, errors.New("redis: sentinel: master_name is empty")
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	return opt, nil
}

// IsSentinelURL reports whether url names Sentinels rather than one
// server: it has a master_name parameter (see Config.URL).
func IsSentinelURL(url string) bool {
	u, err := neturl.Parse(url)
	return err == nil && u.Query().Has("master_name")
}

// Close closes the client that New made from Config.URL.
func (t *Trigger) Close() error {
	if !t.owned {
		return nil
	}
	if err := t.client.Close(); err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

// call bounds one call to Redis by the timeout.
func (t *Trigger) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.timeout)
}

// Add records that each order is due at its time, rounded up to the
// millisecond so that it is never claimed before its deadline, replacing a
// later time recorded before but never an earlier one (addScript says
// why). The order's member is its id, encoded in a few bytes (member.go).
// A member in processing, whose deadline moved while it was claimed,
// leaves processing, due at the time given or at its lease expiry if that
// is earlier; its attempts are kept. One call is one script that must
// finish within the timeout: seed in batches of a few thousand.
func (t *Trigger) Add(ctx context.Context, due []engine.TriggerDue) error {
	return t.runDue(ctx, addScript, "add", due)
}

// runDue runs script, of the due and processing sets, on due: each
// member's time, rounded up to the millisecond, and the member. Its error
// names what (add, requeue).
func (t *Trigger) runDue(ctx context.Context, script *goredis.Script, what string, due []engine.TriggerDue) error {
	if len(due) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(due))
	for _, d := range due {
		args = append(args, ms(ceilMilli(d.At)), member(d.OrderID))
	}
	ctx, cancel := t.call(ctx)
	defer cancel()
	if err := script.Run(ctx, t.client, []string{t.due, t.processing}, args...).Err(); err != nil {
		return fmt.Errorf("redis: %s %d due: %w", what, len(due), err)
	}
	return nil
}

// NotifyKept is how long a member stays in the to-notify set: Claim takes
// out those that went there longer ago, a thousand at a time. Nothing in
// Lapse takes members out of it otherwise (the sweep fires their orders),
// so without a bound every order given up during a database outage, a
// flash sale's million, would stay in Redis for good.
const NotifyKept = 24 * time.Hour

// Claim moves up to limit members into processing, leased until now+lease,
// and returns them: first those whose lease expired (their attempts kept),
// then those due by now, earliest first. Expired members past the limit
// are due again from their lease expiry. Members that went to the
// to-notify set more than NotifyKept before now leave it. A member is an
// order's id as Add wrote it, or an order number that an earlier version
// wrote; the engine only hands it back. seeded reports the marker of MarkSeeded, which a
// flush or a restart without persistence removes.
func (t *Trigger) Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) (members []string, seeded bool, err error) {
	ctx, cancel := t.call(ctx)
	defer cancel()
	res, err := claimScript.Run(ctx, t.client, []string{t.due, t.processing, t.seeded, t.notify},
		ms(floorMilli(now)), ms(ceilMilli(now.Add(lease))), max(limit, 0), ms(floorMilli(now.Add(-NotifyKept)))).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("redis: claim: %w", err)
	}
	if len(res) != 2 {
		return nil, false, fmt.Errorf("redis: claim: unexpected reply %v", res)
	}
	flag, ok1 := res[0].(int64)
	list, ok2 := res[1].([]any)
	if !ok1 || !ok2 {
		return nil, false, fmt.Errorf("redis: claim: unexpected reply %v", res)
	}
	members = make([]string, 0, len(list))
	for _, m := range list {
		s, ok := m.(string)
		if !ok {
			return nil, false, fmt.Errorf("redis: claim: unexpected member %v", m)
		}
		members = append(members, s)
	}
	return members, flag == 1, nil
}

// Done removes members from processing and forgets their attempts. A
// member that Add moved back to due stays due.
func (t *Trigger) Done(ctx context.Context, members []string) error {
	if len(members) == 0 {
		return nil
	}
	args := make([]any, len(members))
	for i, m := range members {
		args[i] = m
	}
	ctx, cancel := t.call(ctx)
	defer cancel()
	if err := doneScript.Run(ctx, t.client, []string{t.processing, t.attempts}, args...).Err(); err != nil {
		return fmt.Errorf("redis: done %d: %w", len(members), err)
	}
	return nil
}

// Retry, in one atomic step, counts an attempt of member, removes it from
// processing, and puts it back due at now + delays[attempt-1], or, after
// the last delay, moves it to the to-notify set and forgets its attempts.
// A member that is not in processing (done, or moved by Add since it was
// claimed) is left as it is, and Retry returns attempt 0.
func (t *Trigger) Retry(ctx context.Context, member string, now time.Time, delays []time.Duration) (attempt int, notified bool, err error) {
	args := make([]any, 0, 2+len(delays))
	args = append(args, member, ms(ceilMilli(now)))
	for _, d := range delays {
		args = append(args, ms(ceilMilli(now.Add(d))))
	}
	ctx, cancel := t.call(ctx)
	defer cancel()
	res, err := retryScript.Run(ctx, t.client, []string{t.due, t.processing, t.attempts, t.notify}, args...).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("redis: retry %q: %w", member, err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("redis: retry %q: unexpected reply %v", member, res)
	}
	return int(res[0]), res[1] == 1, nil
}

// Release puts members still in processing back due at now, their
// attempts kept, so that any process claims them at once. A member not in
// processing (done, or moved by Add since it was claimed) is left as it is.
func (t *Trigger) Release(ctx context.Context, members []string, now time.Time) error {
	if len(members) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(members))
	args = append(args, ms(floorMilli(now)))
	for _, m := range members {
		args = append(args, m)
	}
	ctx, cancel := t.call(ctx)
	defer cancel()
	if err := releaseScript.Run(ctx, t.client, []string{t.due, t.processing}, args...).Err(); err != nil {
		return fmt.Errorf("redis: release %d: %w", len(members), err)
	}
	return nil
}

// Requeue puts the members of the orders of due that are still in
// processing back due, each at its time (rounded up, as Add rounds it),
// their attempts kept: members claimed before their orders were due go
// back at their orders' deadlines, however far past their leases. A member
// not in processing (done, or moved by Add since it was claimed) is left
// as it is.
func (t *Trigger) Requeue(ctx context.Context, due []engine.TriggerDue) error {
	return t.runDue(ctx, requeueScript, "requeue", due)
}

// Next returns the earliest time at which Claim finds a member: the
// earliest due time, or an earlier lease expiry, since a member whose lease
// runs out is due again. It returns false when both sets are empty.
func (t *Trigger) Next(ctx context.Context) (time.Time, bool, error) {
	ctx, cancel := t.call(ctx)
	defer cancel()
	var due, leased *goredis.ZSliceCmd
	_, err := t.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		due = p.ZRangeWithScores(ctx, t.due, 0, 0)
		leased = p.ZRangeWithScores(ctx, t.processing, 0, 0)
		return nil
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("redis: next: %w", err)
	}
	var next time.Time
	for _, z := range append(due.Val(), leased.Val()...) {
		at := scoreTime(z.Score)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero(), nil
}

// ErrSeedLost is MarkSeeded's error when Redis lost its data while the
// seed was under way.
var ErrSeedLost = errors.New("redis: the trigger lost its data while it was being seeded; it must be seeded again")

// seedTTL bounds how long the key of a seed under way outlives a process
// that died before it ended the seed.
const seedTTL = 24 * time.Hour

// BeginSeed records, in a key of its own, that this Trigger starts to seed
// the sets from the database; a flush, or a restart without persistence,
// takes that key with the members, and the MarkSeeded that ends the seed
// finds it gone. Seeds of other processes, under way at the same time,
// have keys of their own.
//
// The key of a seed of this Trigger that never ended (an Add failed) goes
// with the next BeginSeed.
func (t *Trigger) BeginSeed(ctx context.Context) error {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	key := t.seedingPrefix + hex.EncodeToString(b)
	t.mu.Lock()
	old := t.seed
	t.mu.Unlock()
	ctx, cancel := t.call(ctx)
	defer cancel()
	_, err := t.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		if old != "" {
			p.Del(ctx, old)
		}
		p.Set(ctx, key, "1", seedTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: begin seed: %w", err)
	}
	t.mu.Lock()
	t.seed = key
	t.mu.Unlock()
	return nil
}

// MarkSeeded records that every pending deadline of the database has been
// added since this Trigger's last BeginSeed, so that Claim reports seeded
// until the keys are lost. When Redis lost its data since that BeginSeed
// it marks nothing and returns ErrSeedLost: the members added before the
// loss are gone. Without a BeginSeed it marks at once.
func (t *Trigger) MarkSeeded(ctx context.Context) error {
	t.mu.Lock()
	key := t.seed
	t.seed = ""
	t.mu.Unlock()
	ctx, cancel := t.call(ctx)
	defer cancel()
	if key == "" {
		if err := t.client.Set(ctx, t.seeded, "1", 0).Err(); err != nil {
			return fmt.Errorf("redis: mark seeded: %w", err)
		}
		return nil
	}
	marked, err := markScript.Run(ctx, t.client, []string{t.seeded, key}).Int()
	if err != nil {
		return fmt.Errorf("redis: mark seeded: %w", err)
	}
	if marked == 0 {
		return ErrSeedLost
	}
	return nil
}

// ToNotify returns how many members gave up within NotifyKept.
func (t *Trigger) ToNotify(ctx context.Context) (int64, error) {
	ctx, cancel := t.call(ctx)
	defer cancel()
	n, err := t.client.ZCard(ctx, t.notify).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: to notify: %w", err)
	}
	return n, nil
}

// Ping checks that Redis answers within the timeout.
func (t *Trigger) Ping(ctx context.Context) error {
	ctx, cancel := t.call(ctx)
	defer cancel()
	if err := t.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// ceilMilli is t in unix milliseconds, rounded up: a due time stored so is
// never before the deadline.
func ceilMilli(t time.Time) int64 {
	m := t.UnixMilli()
	if time.UnixMilli(m).Before(t) {
		m++
	}
	return m
}

// floorMilli is t in unix milliseconds, rounded down: what is due by it is
// due by t.
func floorMilli(t time.Time) int64 {
	m := t.UnixMilli()
	if time.UnixMilli(m).After(t) {
		m--
	}
	return m
}

// scoreTime is the time of a score. A score beyond what a time holds
// (+inf, 1e300: written under the prefix by something other than Lapse)
// is the end of time, or its start, rather than what converting it to an
// int64 makes of it, which for +inf is the distant past: due at once, and
// never claimed, it had the shared path ask again without sleeping.
func scoreTime(score float64) time.Time {
	switch {
	case score >= math.MaxInt64:
		return time.UnixMilli(math.MaxInt64).UTC()
	case score <= math.MinInt64:
		return time.UnixMilli(math.MinInt64).UTC()
	}
	return time.UnixMilli(int64(score)).UTC()
}

// ms is a score as the scripts take it.
func ms(m int64) string { return strconv.FormatInt(m, 10) }
