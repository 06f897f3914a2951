package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinVersion is the oldest Redis the trigger's scripts run on: they use
// ZADD's LT flag and ZMSCORE, both of Redis 6.2 (scripts.go). On an older
// server every Add fails, and the trigger would only ever be degraded,
// deadlines left to the sweep.
const MinVersion = "6.2"

// ErrTooOld: the server is older than MinVersion.
var ErrTooOld = errors.New("redis: the server is older than " + MinVersion + ", whose commands the trigger's scripts use (ZADD LT, ZMSCORE)")

// CheckVersion reads the server's version (INFO server) and returns an
// error wrapping ErrTooOld, naming it, when it is older than MinVersion;
// the error of the call when the server cannot be asked (down, say),
// which is no reason to refuse it: the trigger degrades until it is back.
// A server that names no version it can read (a Redis-compatible one of
// its own numbering) is taken at its word.
func (t *Trigger) CheckVersion(ctx context.Context) error {
	ctx, cancel := t.call(ctx)
	defer cancel()
	info, err := t.client.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("redis: read the server's version: %w", err)
	}
	v, ok := serverVersion(info)
	if ok && !atLeast(v, MinVersion) {
		return fmt.Errorf("%w: it is %s", ErrTooOld, v)
	}
	return nil
}

// serverVersion returns the redis_version line of INFO server.
func serverVersion(info string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "redis_version:"); ok {
			return v, v != ""
		}
	}
	return "", false
}

// atLeast reports whether version v (major.minor.patch) is min or later;
// a v whose major and minor are not numbers is taken as later.
func atLeast(v, min string) bool {
	parts := func(s string) (int, int, bool) {
		f := strings.SplitN(s, ".", 3)
		if len(f) < 2 {
			return 0, 0, false
		}
		major, err1 := strconv.Atoi(f[0])
		minor, err2 := strconv.Atoi(f[1])
		return major, minor, err1 == nil && err2 == nil
	}
	vm, vn, ok := parts(v)
	if !ok {
		return true
	}
	mm, mn, _ := parts(min)
	return vm > mm || vm == mm && vn >= mn
}
