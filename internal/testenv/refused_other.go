//go:build !linux

package testenv

import (
	"fmt"
	"testing"
)

// Refused returns an address of 127.0.0.1 where nothing listens now, from
// below the range of ports handed to listeners of port 0. Only on Linux is
// the port held for the test; CI runs on Linux.
func Refused(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}
