package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse/redis"
)

// TestCheckVersion: the test server (Redis 6.2 or later) passes; one that
// cannot be reached is an error that is not ErrTooOld, for a server that
// is down is no reason to refuse it.
func TestCheckVersion(t *testing.T) {
	t.Parallel()
	s := newShared(t)
	tr, err := redis.New(redis.Config{URL: s.url, Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.CheckVersion(context.Background()); err != nil {
		t.Fatalf("CheckVersion of the test server: %v", err)
	}
	down, err := redis.New(redis.Config{URL: "redis://127.0.0.1:1/0", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	if err := down.CheckVersion(context.Background()); err == nil || errors.Is(err, redis.ErrTooOld) {
		t.Fatalf("CheckVersion of a server that is down = %v, want an error that is not ErrTooOld", err)
	}
}

// TestServerVersion: the version is read from INFO server's redis_version
// line and compared by major and minor.
func TestServerVersion(t *testing.T) {
	t.Parallel()
	info := "# Server\r\nredis_version:6.0.16\r\nredis_git_sha1:00000000\r\n"
	if v, ok := redis.ServerVersion(info); v != "6.0.16" || !ok {
		t.Fatalf("ServerVersion = %q, %v", v, ok)
	}
	if _, ok := redis.ServerVersion("# Server\r\nos:Linux\r\n"); ok {
		t.Fatal("a version read from INFO without redis_version")
	}
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"6.0.16", false}, {"5.0.14", false}, {"6.2.0", true}, {"6.2", true}, {"7.0.15", true}, {"10.0.1", true}, {"6.10.0", true},
		{"weird", true}, // a server of its own numbering is taken at its word
	} {
		if got := redis.AtLeast(c.v, redis.MinVersion); got != c.want {
			t.Errorf("AtLeast(%q, %s) = %v, want %v", c.v, redis.MinVersion, got, c.want)
		}
	}
}
