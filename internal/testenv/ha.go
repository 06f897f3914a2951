package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"sync"
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

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now, for
// a program the test starts to listen on. It is taken from below the range
// the kernel hands to listeners of port 0 (32768 and up on Linux, 49152 and
// up elsewhere), so that a listener of another test cannot take it before
// the program does, and never twice in one test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if freePorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		ln.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatal("no free port of 127.0.0.1 between 20000 and 32000")
	return 0
}

var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}
