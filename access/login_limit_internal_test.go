package access

import (
	"fmt"
	"testing"
	"time"
)

// TestLoginLimiterIsBounded: a flood from more addresses than the limiter
// keeps counts of does not grow it: the addresses past loginLimitKept share
// one count, and the counts that ran out make room again.
func TestLoginLimiterIsBounded(t *testing.T) {
	t.Parallel()
	l := newLoginLimiter(2)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }
	for i := range loginLimitKept {
		if wait, _, _ := l.take(addr(i), now); wait != 0 {
			t.Fatalf("%s's first attempt waits %s", addr(i), wait)
		}
	}
	refused := 0
	for i := loginLimitKept; i < loginLimitKept+100; i++ {
		if wait, _, _ := l.take(addr(i), now); wait != 0 {
			refused++
		}
	}
	if len(l.addrs) > loginLimitKept+1 || refused != 98 {
		t.Fatalf("%d counts kept, %d of 100 addresses past the table refused; want %d at most and 98 (sharing one count)",
			len(l.addrs), refused, loginLimitKept+1)
	}
	now = now.Add(time.Minute)
	if wait, _, _ := l.take("192.0.2.1", now); wait != 0 || len(l.addrs) > 2 {
		t.Fatalf("a minute on: wait %s, %d counts kept; want the run-out counts dropped", wait, len(l.addrs))
	}
}

func TestLimitKey(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"2001:db8:1:2::1":      "2001:db8:1:2::/64",
		"2001:db8:1:2:ab::9":   "2001:db8:1:2::/64",
		"fe80::1%eth0":         "fe80::/64",
		"":                     "",
		"not an address":       "not an address",
		"2001:db8:1:3:0:0:0:1": "2001:db8:1:3::/64",
	} {
		if got := limitKey(addr); got != want {
			t.Errorf("limitKey(%q) = %q, want %q", addr, got, want)
		}
	}
}
