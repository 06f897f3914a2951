package postgres

import (
	"net"
	"time"
)

// DefaultDeadPeerTimeout is Config.DeadPeerTimeout when it is not set.
const DefaultDeadPeerTimeout = 15 * time.Second

// dialer connects within connect (zero: no bound) and, when deadPeer is
// positive, makes the connection break once the server has not answered at
// the TCP level for about deadPeer: keepalive probes an idle connection
// from deadPeer/3 on, and (on Linux) TCP_USER_TIMEOUT ends one whose sent
// data stays unacknowledged for deadPeer. A server that is alive
// acknowledges both, however long its statement runs, so only a peer that
// vanished (a machine gone, a partition) trips them; without them a
// statement sent to it waits for the kernel's retransmissions, some
// fifteen minutes.
func dialer(connect, deadPeer time.Duration) *net.Dialer {
	d := &net.Dialer{Timeout: connect, KeepAlive: 5 * time.Minute} // pgx's own keepalive
	if deadPeer > 0 {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: deadPeer / 3, Interval: deadPeer / 6, Count: 3}
		d.Control = userTimeout(deadPeer)
	}
	return d
}
