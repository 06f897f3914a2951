// Package faultproxy is an in-process TCP proxy that tests put between a
// client and a real server to break the network on cue, in the manner of
// toxiproxy: take the server away, stall the link, slow it down, or reset
// every connection mid-conversation.
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the proxy's own connection to the target, so that a
// target that is itself unreachable looks to the client like a closed
// connection rather than a hang the test did not ask for.
const dialTimeout = 5 * time.Second

// chunkBacklog is how many reads a direction may hold while it is stalled or
// delayed; beyond that the proxy stops reading and TCP pushes back on the
// sender, as a congested network would.
const chunkBacklog = 64

// Proxy forwards every connection made to Addr to the target. It starts up.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	down    bool
	stalled chan struct{} // non-nil while blackholed; closed by Up
	latency time.Duration
	conns   map[*pipe]struct{}
	closed  bool

	wg sync.WaitGroup
}

// New starts a proxy to target (host:port) listening on a free port of
// 127.0.0.1.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*pipe]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the host:port clients connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Down takes the target away: every live connection is closed, and new ones
// are accepted and reset at once, which the client sees as the server having
// gone (the port stays bound so that Up can bring the same address back).
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	live := p.takeConns()
	p.mu.Unlock()
	for _, c := range live {
		c.close(false)
	}
}

// Blackhole stalls the link without closing anything: nothing is forwarded
// in either direction, on live connections or on new ones (which are
// accepted and connected to the target but stay silent), until Up. It is a
// network partition, which clients notice only through their own timeouts;
// what was sent meanwhile is delivered when it heals, as TCP would.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Up undoes Down and Blackhole: new connections reach the target again and
// stalled ones resume.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// SetLatency delays every chunk of data by d in each direction, so a round
// trip takes at least 2d longer. Zero removes the delay. Data already in
// flight keeps the delay it was read with.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// ResetPeers aborts every live connection with a TCP reset on both sides, as
// a crashed middlebox or a restarted load balancer would. New connections go
// through as before.
func (p *Proxy) ResetPeers() {
	p.mu.Lock()
	live := p.takeConns()
	p.mu.Unlock()
	for _, c := range live {
		c.close(true)
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	live := p.takeConns()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range live {
		c.close(false)
	}
	p.wg.Wait()
	return err
}

// takeConns empties the set of live connections and returns them; p.mu is
// held.
func (p *Proxy) takeConns() []*pipe {
	live := make([]*pipe, 0, len(p.conns))
	for c := range p.conns {
		live = append(live, c)
	}
	clear(p.conns)
	return live
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept failure; the client will retry
		}
		p.mu.Lock()
		down := p.down || p.closed
		p.mu.Unlock()
		if down {
			reset(client)
			continue
		}
		p.wg.Go(func() { p.connect(client) })
	}
}

// connect dials the target for client and starts forwarding.
func (p *Proxy) connect(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		reset(client)
		return
	}
	c := &pipe{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.down || p.closed {
		p.mu.Unlock()
		c.close(true)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { p.forward(c, client, server) })
	wg.Go(func() { p.forward(c, server, client) })
	wg.Wait()
	c.close(false)
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// chunk is data read from one side, stamped with when it may be written to
// the other.
type chunk struct {
	data []byte
	due  time.Time
}

// forward copies src to dst through a queue, so that reading never waits for
// a delay or a stall and the delay of one chunk does not add to the next.
// Either side failing ends the whole connection.
func (p *Proxy) forward(c *pipe, src, dst net.Conn) {
	queue := make(chan chunk, chunkBacklog)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				due := time.Now().Add(p.latency)
				p.mu.Unlock()
				select {
				case queue <- chunk{data: buf[:n], due: due}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				c.close(false)
				return
			}
		}
	})
	for ch := range queue {
		if !p.wait(c, ch.due) {
			break
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.close(false)
			break
		}
	}
	c.close(false)
	wg.Wait()
}

// wait blocks until due has passed and the link is not stalled, and reports
// false if the connection ended meanwhile.
func (p *Proxy) wait(c *pipe, due time.Time) bool {
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return false
		}
	}
	for {
		p.mu.Lock()
		stalled := p.stalled
		p.mu.Unlock()
		if stalled == nil {
			return true
		}
		select {
		case <-stalled:
		case <-c.done:
			return false
		}
	}
}

// pipe is one proxied connection: the client's side and the target's.
type pipe struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

// close ends both sides, with a TCP reset when rst is set.
func (c *pipe) close(rst bool) {
	c.once.Do(func() {
		close(c.done)
		if rst {
			reset(c.client)
			reset(c.server)
			return
		}
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// reset closes conn with a TCP RST instead of a FIN: a linger time of zero
// makes the kernel discard unsent data and abort the connection.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
