package access

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// DefaultLoginsPerMinute is Config.LoginsPerMinute's default.
const DefaultLoginsPerMinute = 10

// loginLimitKept bounds the client addresses a Service keeps a login count
// of, so that a flood from many addresses cannot grow its memory: past it,
// addresses it has no room for share one count (loginOverflow).
const loginLimitKept = 10_000

// loginOverflow is the key of the count shared by the addresses that found
// no room of their own.
const loginOverflow = "(every other address)"

// loginRowEvery is how often, at most, a client address that keeps trying
// past its limit leaves an audit row: the first refusal leaves one, the
// next one a minute later with the count of those refused without a row in
// between, so that an attack is seen without the log growing with it.
const loginRowEvery = time.Minute

// hashWaiting is how many password hashes may wait for a hashing slot
// (Service.takeTurn): a few hashes' time, at tens of milliseconds each.
const hashWaiting = 16

// errHashBusy is takeTurn's error when every hashing slot is taken and
// hashWaiting hashes wait already.
var errHashBusy = lapse.Errorf(lapse.EUNAVAILABLE, "too many password checks at once; try again in a second")

// LoginLimitError is the error of a login refused because its client
// address tried to log in more often than Config.LoginsPerMinute allows:
// it was refused before its password was looked at. Its code is
// EUNAVAILABLE, as an overload's; RetryAfter is when the address may try
// again.
//
// It is also the error of a login refused because so many logins from
// everywhere are checking their passwords that no more may wait for a turn
// (Busy): then no address is to blame, and RetryAfter is a second.
type LoginLimitError struct {
	RetryAfter time.Duration
	Busy       bool
}

func (e *LoginLimitError) Error() string { return "lapse: " + e.message() }

func (e *LoginLimitError) message() string {
	wait := max(time.Second, (e.RetryAfter + time.Second - 1).Truncate(time.Second)) // as Retry-After says it
	if e.Busy {
		return fmt.Sprintf("too many logins at once; try again in %s", wait)
	}
	return fmt.Sprintf("too many login attempts from this address; try again in %s", wait)
}

// Unwrap makes the error a lapse error of code EUNAVAILABLE.
func (e *LoginLimitError) Unwrap() error {
	return lapse.Errorf(lapse.EUNAVAILABLE, "%s", e.message())
}

// loginLimiter counts the login attempts of each client address, as a
// generic cell rate: each attempt takes a minute/rate of the address's
// minute, which comes back as time passes, so that an address may try rate
// times at once and then rate times a minute.
type loginLimiter struct {
	mu       sync.Mutex
	rate     int
	interval time.Duration // time.Minute / rate
	addrs    map[string]*loginCount
	swept    time.Time // when addrs was last swept of counts that ran out
}

// loginCount is one client address's count.
type loginCount struct {
	// until is when the address's attempts are all given back: an attempt
	// is allowed while it leaves until at most a minute ahead.
	until time.Time
	// rowAt is when the address's last refusal row was written (zero:
	// none), unrowed how many were refused since without one. It is not
	// reset by an attempt allowed in between, so that a flood that the
	// rate lets through now and then still leaves a row a minute at most.
	rowAt   time.Time
	unrowed int
}

func newLoginLimiter(rate int) *loginLimiter {
	return &loginLimiter{rate: rate, interval: time.Minute / time.Duration(rate), addrs: map[string]*loginCount{}}
}

// take counts an attempt of the client address addr at now. It returns
// zero wait when the attempt may go on; else how long addr must wait,
// and, when the refusal is to leave an audit row, row true with the
// number of the address's refusals since its last row that left none.
func (l *loginLimiter) take(addr string, now time.Time) (wait time.Duration, row bool, unrowed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.count(limitKey(addr), now)
	until := c.until
	if until.Before(now) {
		until = now
	}
	until = until.Add(l.interval)
	if over := until.Sub(now) - time.Minute; over > 0 {
		if c.rowAt.IsZero() || now.Sub(c.rowAt) >= loginRowEvery {
			row, unrowed = true, c.unrowed
			c.rowAt, c.unrowed = now, 0
		} else {
			c.unrowed++
		}
		return over, row, unrowed
	}
	c.until = until
	return 0, false, 0
}

// giveBack returns the attempt of addr that take counted: a good login
// does not count against its address, so that operators behind one address
// (an office's) are not held back by each other.
func (l *loginLimiter) giveBack(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.addrs[limitKey(addr)]; c != nil {
		c.until = c.until.Add(-l.interval)
	}
}

// count returns key's count, made when it has none; once loginLimitKept
// addresses are counted, a new one shares loginOverflow's.
func (l *loginLimiter) count(key string, now time.Time) *loginCount {
	if c := l.addrs[key]; c != nil {
		return c
	}
	if len(l.addrs) >= loginLimitKept && now.Sub(l.swept) >= time.Second {
		// Drop the counts that ran out: they are as good as none. At most
		// once a second, so that a flood of new addresses does not sweep
		// at every attempt.
		l.swept = now
		for k, c := range l.addrs {
			if !c.until.After(now) && c.unrowed == 0 {
				delete(l.addrs, k)
			}
		}
	}
	if len(l.addrs) >= loginLimitKept {
		key = loginOverflow
		if c := l.addrs[key]; c != nil {
			return c
		}
	}
	c := &loginCount{}
	l.addrs[key] = c
	return c
}

// limitKey is the key of the client address addr: the address itself, or
// for IPv6 its /64, which one host commonly holds whole, so that it cannot
// try from each of its addresses in turn. An address that does not parse
// (a test's, a Unix socket's) is its own key.
func limitKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return addr
	}
	return p.String()
}
