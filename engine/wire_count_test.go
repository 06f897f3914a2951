package engine_test

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// wireCounter is a TCP proxy in front of PostgreSQL that counts the round
// trips its clients make: every simple query ('Q', which includes pgx's
// pings) and every Sync ('S', which ends each extended-protocol exchange:
// a prepare, or a bind and execute). It counts what a store actually sends,
// whatever method or pool sent it, which a wrapper around lapse.Store would
// not see (BEGIN, COMMIT, the pool's pings), and tells them apart by
// statement.
type wireCounter struct {
	ln     net.Listener
	target string
	trips  atomic.Int64
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	stmts map[string]int // statements run (simple queries and binds), by the start of their text
}

// countWire starts a wireCounter in front of the server of dsn, stopped
// when b ends, and returns it with the DSN that goes through it.
func countWire(b *testing.B, dsn string) (*wireCounter, string) {
	b.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	w := &wireCounter{ln: ln, target: u.Host, stmts: map[string]int{}}
	w.wg.Go(w.accept)
	b.Cleanup(w.close)
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable") // the counter reads the messages: no TLS through it
	u.RawQuery = q.Encode()
	return w, u.String()
}

func (w *wireCounter) accept() {
	for {
		c, err := w.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", w.target)
		if err != nil {
			c.Close()
			continue
		}
		w.mu.Lock()
		w.conns = append(w.conns, c, s)
		w.mu.Unlock()
		w.wg.Go(func() { _, _ = io.Copy(c, s); c.Close() })
		w.wg.Go(func() { _ = w.pump(s, c); s.Close() })
	}
}

// pump copies the client's messages to the server, counting round trips.
func (w *wireCounter) pump(dst io.Writer, src io.Reader) error {
	r := bufio.NewReader(src)
	prepared := map[string]string{} // this connection's statements, by name
	// The startup packet has no type byte; an SSL or GSS request is
	// answered with one byte and followed by the real startup packet.
	for {
		var head [8]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(head[:4])
		if n < 8 {
			return errors.New("wire counter: bad startup packet")
		}
		body := make([]byte, n-8)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		if _, err := dst.Write(append(head[:], body...)); err != nil {
			return err
		}
		if code := binary.BigEndian.Uint32(head[4:]); code != 80877103 && code != 80877104 { // SSLRequest, GSSENCRequest
			break
		}
	}
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n < 4 {
			return errors.New("wire counter: bad message")
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'Q': // query text
			w.trips.Add(1)
			w.ran(cstrings(body, 1)[0])
		case 'S':
			w.trips.Add(1)
		case 'P': // statement name, query text, …
			if f := cstrings(body, 2); len(f) == 2 {
				prepared[f[0]] = f[1]
			}
		case 'B': // portal name, statement name, …
			if f := cstrings(body, 2); len(f) == 2 {
				w.ran(prepared[f[1]])
			}
		}
		if _, err := dst.Write(append(head[:], body...)); err != nil {
			return err
		}
	}
}

// ran counts one run of the statement whose text is query.
func (w *wireCounter) ran(query string) {
	key := strings.Join(strings.Fields(query), " ")
	if len(key) > 60 {
		key = key[:60] + "…"
	}
	w.mu.Lock()
	w.stmts[key]++
	w.mu.Unlock()
}

// statements returns the statements run since the last call, by text, most
// run first, as "12× SELECT …".
func (w *wireCounter) statements() []string {
	w.mu.Lock()
	m := w.stmts
	w.stmts = map[string]int{}
	w.mu.Unlock()
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%d× %s", m[k], k)
	}
	return out
}

// cstrings returns the first n NUL-terminated strings of b.
func cstrings(b []byte, n int) []string {
	var out []string
	for len(out) < n {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			break
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out
}

func (w *wireCounter) close() {
	w.ln.Close()
	w.mu.Lock()
	for _, c := range w.conns {
		c.Close()
	}
	w.mu.Unlock()
	w.wg.Wait()
}
