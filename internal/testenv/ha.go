package testenv

import (
	"net"
	"os/exec"
	"testing"
)

// Environment variables that name the programs of the failover tests,
// which build clusters of their own from them.
const (
	// EnvPGAutoctl is pg_auto_failover's pg_autoctl, e.g. /usr/bin/pg_autoctl
	// (Debian's pg-auto-failover-cli with postgresql-15-auto-failover).
	EnvPGAutoctl = "LAPSE_TEST_PG_AUTOCTL"
	// EnvPGBin is the directory of the PostgreSQL programs pg_autoctl runs
	// (pg_ctl, initdb, …), e.g. /usr/lib/postgresql/15/bin. Unset: what
	// pg_config --bindir says.
	EnvPGBin = "LAPSE_TEST_PG_BINDIR"
	// EnvRedisSentinel is redis-sentinel, e.g. /usr/bin/redis-sentinel
	// (Debian's redis-sentinel). Its masters and replicas run the
	// redis-server beside it, or the one on PATH.
	EnvRedisSentinel = "LAPSE_TEST_REDIS_SENTINEL"
)

// Program returns the program that env names, or skips the test (fails it
// when LAPSE_REQUIRE_SERVICES=1) when env is unset; a program that is not
// there fails the test.
func Program(t testing.TB, env, what string) string {
	t.Helper()
	path := Require(t, env, what)
	p, err := exec.LookPath(path)
	if err != nil {
		t.Fatalf("%s=%s: %v", env, path, err)
	}
	return p
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
