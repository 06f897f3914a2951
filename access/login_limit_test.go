package access_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestLoginLimitPerAddress: past LoginsPerMinute attempts from one client
// address, whatever the names, a login is refused at once, even with the
// right password and code, which it does not look at, and only the first
// refusal leaves a row; a row a minute at most after that, with the count
// refused without one. Other addresses are not held back; an IPv6 address
// counts with its /64. A good login does not count; the per-operator
// lockout is as it was.
func TestLoginLimitPerAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LoginsPerMinute: 3})
	_, secret := e.addOperator("alice", access.RoleOperator)
	const from = "198.51.100.7"
	limited := func(_ string, _ *access.Principal, err error) *access.LoginLimitError {
		t.Helper()
		le, ok := errors.AsType[*access.LoginLimitError](err)
		if !ok || le.RetryAfter <= 0 || le.RetryAfter > time.Minute || lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
			t.Fatalf("login: %v, want it refused for its address", err)
		}
		return le
	}
	for i := range 3 {
		_, _, err := e.svc.Login(e.ctx, "nobody"+itoa(int64(i)), "guess", "123456", from)
		wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
	}
	for range 20 {
		limited(e.svc.Login(e.ctx, "mallory", "guess", "123456", from))
	}
	limited(e.svc.Login(e.ctx, "alice", password, e.code(secret), from))
	rows := e.audit("login")
	if len(rows) != 4 {
		t.Fatalf("%d login rows after 3 attempts and 21 refused, want 4", len(rows))
	}
	if r := rows[3]; r.ClientAddr != from || !strings.HasPrefix(r.Result, "refused: too many login attempts from this address") ||
		!strings.Contains(r.Result, "0 more were refused") {
		t.Errorf("the refusal's row %+v", r)
	}
	if o := e.operator("alice"); o.FailedLogins != 0 || o.LastTOTPStep != 0 {
		t.Errorf("a refused login counted against alice: %+v", o)
	}

	// Another address, and another /64, are their own.
	if _, _, err := e.svc.Login(e.ctx, "alice", password, e.code(secret), "198.51.100.8"); err != nil {
		t.Fatalf("alice from another address: %v", err)
	}
	for _, addr := range []string{"2001:db8:1:2::1", "2001:db8:1:2::ff", "2001:db8:1:2:aaaa::9"} {
		_, _, err := e.svc.Login(e.ctx, "nobody", "guess", "123456", addr)
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
	}
	limited(e.svc.Login(e.ctx, "nobody", "guess", "123456", "2001:db8:1:2::2"))
	_, _, err := e.svc.Login(e.ctx, "nobody", "guess", "123456", "2001:db8:1:3::1")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")

	// A minute on, the address may try again; refused again, its next row
	// counts those refused without one.
	e.clock.Advance(time.Minute)
	for range 3 {
		_, _, err := e.svc.Login(e.ctx, "nobody", "guess", "123456", from)
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
	}
	limited(e.svc.Login(e.ctx, "nobody", "guess", "123456", from))
	if r := e.lastAudit("login"); r.ClientAddr != from || !strings.Contains(r.Result, "20 more were refused") {
		t.Errorf("the next refusal's row %+v", r)
	}

	// A good login gives its attempt back.
	e.clock.Advance(time.Minute)
	const office = "203.0.113.5"
	for range 2 {
		_, _, err := e.svc.Login(e.ctx, "nobody", "guess", "123456", office)
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
	}
	if _, _, err := e.svc.Login(e.ctx, "alice", password, e.code(secret), office); err != nil {
		t.Fatalf("alice from the office: %v", err)
	}
	_, _, err = e.svc.Login(e.ctx, "nobody", "guess", "123456", office)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	limited(e.svc.Login(e.ctx, "nobody", "guess", "123456", office))
}

// TestLoginLimitDefault: by default an address may try ten logins a minute.
func TestLoginLimitDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	if n := e.svc.Config().LoginsPerMinute; n != 10 {
		t.Fatalf("LoginsPerMinute %d", n)
	}
	for range 10 {
		_, _, err := e.svc.Login(e.ctx, "nobody", "guess", "123456", "192.0.2.44")
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
	}
	_, _, err := e.svc.Login(e.ctx, "nobody", "guess", "123456", "192.0.2.44")
	if _, ok := errors.AsType[*access.LoginLimitError](err); !ok {
		t.Fatalf("the 11th login in a minute: %v", err)
	}
	e.clock.Advance(6 * time.Second)
	_, _, err = e.svc.Login(e.ctx, "nobody", "guess", "123456", "192.0.2.44")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
}
