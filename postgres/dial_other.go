//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeout does nothing where TCP_USER_TIMEOUT is not known: keepalive
// alone finds an idle connection's dead peer.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
