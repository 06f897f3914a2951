package postgres_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestDeadPeerTimeout: the store's connections carry TCP_USER_TIMEOUT and
// keepalive probes from DeadPeerTimeout (15 s by default), so that a
// statement sent to a primary that vanished fails within it; a negative
// DeadPeerTimeout leaves both to the kernel.
func TestDeadPeerTimeout(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	for _, tt := range []struct {
		cfg                         postgres.Config
		userTimeout, idle, interval int // milliseconds, seconds, seconds (rounded up)
	}{
		{postgres.Config{}, 15000, 5, 3},
		{postgres.Config{DeadPeerTimeout: 9 * time.Second}, 9000, 3, 2},
		{postgres.Config{DeadPeerTimeout: -1}, 0, 300, 15}, // Go's defaults
	} {
		s := openStore(t, dsn, tt.cfg)
		got := map[string]int{}
		for name, opt := range map[string]int{"TCP_USER_TIMEOUT": unix.TCP_USER_TIMEOUT, "TCP_KEEPIDLE": unix.TCP_KEEPIDLE, "TCP_KEEPINTVL": unix.TCP_KEEPINTVL} {
			v, err := s.SocketOption(ctx, opt)
			if err != nil {
				t.Fatal(err)
			}
			got[name] = v
		}
		want := map[string]int{"TCP_USER_TIMEOUT": tt.userTimeout, "TCP_KEEPIDLE": tt.idle, "TCP_KEEPINTVL": tt.interval}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("DeadPeerTimeout %v: %s = %d, want %d", tt.cfg.DeadPeerTimeout, name, got[name], w)
			}
		}
	}
}
