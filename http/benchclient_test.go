package http_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// benchClient is the benchmarks' HTTP/1.1 client: each request takes an
// idle keep-alive connection (or dials one), writes the request in one
// write and reads the answer on the caller's goroutine, as load generators
// such as wrk do. net/http's client hands every request to two goroutines
// of its connection and back through channels: on 2026-12-04 it took
// about a third of the process's CPU in BenchmarkCallback, on the cores
// that the server under test runs on.
type benchClient struct {
	addr    string
	idle    chan *benchConn
	timeout time.Duration
}

// benchConn is one keep-alive connection and its buffers.
type benchConn struct {
	c  net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
	cl []byte // scratch for Content-Length
}

func newBenchClient(addr string, conns int) *benchClient {
	return &benchClient{addr: addr, idle: make(chan *benchConn, conns), timeout: 30 * time.Second}
}

// post sends body to path with hdr and returns the answer's status and
// body. A connection that failed, or that the server closes after its
// answer, is not used again.
func (bc *benchClient) post(path string, body []byte, hdr http.Header) (int, []byte, error) {
	var c *benchConn
	select {
	case c = <-bc.idle:
	default:
		nc, err := net.DialTimeout("tcp", bc.addr, bc.timeout)
		if err != nil {
			return 0, nil, err
		}
		c = &benchConn{c: nc, r: bufio.NewReaderSize(nc, 4096), w: bufio.NewWriterSize(nc, 4096)}
	}
	status, got, keep, err := c.roundTrip(bc.addr, path, body, hdr, bc.timeout)
	if err != nil || !keep {
		c.c.Close()
		return status, got, err
	}
	select {
	case bc.idle <- c:
	default:
		c.c.Close()
	}
	return status, got, nil
}

func (c *benchConn) roundTrip(host, path string, body []byte, hdr http.Header, timeout time.Duration) (status int, got []byte, keep bool, err error) {
	if err := c.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, nil, false, err
	}
	w := c.w
	w.WriteString("POST ")
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\nContent-Length: ")
	c.cl = strconv.AppendInt(c.cl[:0], int64(len(body)), 10)
	w.Write(c.cl)
	w.WriteString("\r\n")
	for k, vs := range hdr {
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	w.WriteString("\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return 0, nil, false, err
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, nil, false, fmt.Errorf("POST %s: %w", path, err)
	}
	got, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return 0, nil, false, fmt.Errorf("POST %s: reading the answer: %w", path, err)
	}
	return res.StatusCode, got, !res.Close, nil
}

// close closes the idle connections.
func (bc *benchClient) close() {
	for {
		select {
		case c := <-bc.idle:
			c.c.Close()
		default:
			return
		}
	}
}
