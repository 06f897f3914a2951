package http

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/lapsehq/lapse"
)

// DefaultBodyTimeout is Config.BodyTimeout when it is not set. A JSON body of
// the API is a few kilobytes, sent by a service in one go: 10 s is ample for a
// slow link (64 KiB, the largest body, at 6 KB/s), while a client that sends
// its headers and then trickles, or stops, is cut within seconds.
const DefaultBodyTimeout = 10 * time.Second

// readBody reads r's body in full before any handler sees it, within
// s.bodyTimeout from now and up to s.maxBody+1 bytes, and returns r with a
// body that replays those bytes. Reading happens before a request takes an
// in-flight slot, so clients that are slow to send (or never finish) cannot
// hold the slots that other requests need.
//
// What the handler reads is what it would have read from the connection: the
// same bytes, then io.EOF, or the read's error (a timeout, a client that went
// away), or, past s.maxBody bytes, a *http.MaxBytesError. A handler that reads
// through http.MaxBytesReader with s.maxBody as its limit sees the same error
// for a body that is too large as it would on the connection.
//
// whole reports whether the body arrived in full and within the limit. A
// request whose body did not is answered with a 400 without touching the
// database, by serve (bodyRefusal) or, for a payment callback, by its
// handler in its provider's format, so it takes no in-flight slot: slow
// clients whose bodies time out together must not shed one another, nor
// anything else.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (_ *http.Request, whole bool) {
	return readBody(w, r, s.bodyTimeout, s.maxBody)
}

// bodyLimit is the body limit of the route of the ServeMux pattern
// pattern: Config.MaxBodyBytes, or the route's own maxBody when that is
// larger.
func (s *Server) bodyLimit(pattern string) int64 {
	if rt := s.byPattern[pattern]; rt != nil && rt.maxBody > s.maxBody {
		return rt.maxBody
	}
	return s.maxBody
}

// readBody is Server.readBody with the deadline timeout and the bound limit.
func readBody(w http.ResponseWriter, r *http.Request, timeout time.Duration, limit int64) (_ *http.Request, whole bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return r, true
	}
	// Not every ResponseWriter has a connection (httptest.ResponseRecorder):
	// its body is in memory already.
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
	// The buffer grows with what arrives, not with what Content-Length
	// claims: a client that claims much and sends little costs little.
	var buf bytes.Buffer
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
	case int64(buf.Len()) > limit:
		err = &http.MaxBytesError{Limit: limit}
	default:
		err = io.EOF
		// The whole body is in: lift the deadline, which would otherwise
		// cut the connection's background read and cancel the request's
		// context while the handler runs. After an error, or with part of
		// the body still unread, the deadline stays: net/http reads the
		// rest of a body after the handler, and must not wait for it.
		if deadline {
			_ = rc.SetReadDeadline(time.Time{})
		}
	}
	r2 := new(http.Request)
	*r2 = *r // not r.Clone: the header, URL and context stay shared
	r2.Body = &bufferedBody{r: bytes.NewReader(buf.Bytes()), err: err}
	return r2, err == io.EOF
}

// WithBodyDeadline returns h behind the API's body deadline and size bound
// (Config.BodyTimeout, Config.MaxBodyBytes), for handlers mounted beside the
// API: h sees a body that readBody read in full, and so does not take its own
// time reading from the connection. It is not counted against MaxInFlight.
func (s *Server) WithBodyDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read, _ := s.readBody(w, r)
		h.ServeHTTP(w, read)
	})
}

// BodyDeadline returns h behind a body deadline and size bound of its own,
// as the API's (Config.BodyTimeout, Config.MaxBodyBytes), for a handler that
// is not mounted beside a Server's, such as the console on its own listener:
// h sees a body read in full within timeout of its headers and up to limit
// bytes, or, reading past them, the read's error (the connection is then
// closed once h has answered). Without it, a client that sends its headers
// and then a byte of body now and then holds its connection, and the
// goroutine serving it, for as long as it likes. timeout and limit must be
// positive.
func BodyDeadline(h http.Handler, timeout time.Duration, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read, _ := readBody(w, r, timeout, limit)
		h.ServeHTTP(w, read)
	})
}

// bodyRefusal is the error of a request whose body readBody did not read in
// full, in the words of a handler that reads it (jsonbody.Read): larger
// than the limit, or not read.
func bodyRefusal(r *http.Request) error {
	if b, ok := r.Body.(*bufferedBody); ok {
		if mbe, ok := errors.AsType[*http.MaxBytesError](b.err); ok {
			return lapse.Errorf(lapse.EINVALID, "the request body is larger than the limit of %d bytes", mbe.Limit)
		}
	}
	return lapse.Errorf(lapse.EINVALID, "the request body could not be read")
}

// bufferedBody is a request body read in full: its bytes, then err.
type bufferedBody struct {
	r   *bytes.Reader
	err error // io.EOF, the read's error, or a *http.MaxBytesError
}

func (b *bufferedBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _ := b.r.Read(p) // a bytes.Reader fails only at its end
	if b.r.Len() == 0 {
		return n, b.err
	}
	return n, nil
}

func (b *bufferedBody) Close() error { return nil }

// bodyLeftOut reports whether r came without a body, on a route whose body
// is optional: none announced (Content-Length: 0), or none sent (an empty
// chunked body, which announces no length). A body cut short is not left
// out: reading it fails, as it should.
func bodyLeftOut(r *http.Request) bool {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return true
	}
	b, ok := r.Body.(*bufferedBody)
	return ok && b.err == io.EOF && b.r.Size() == 0
}

// bodyBytes returns the body readBody read, when it arrived in full, without
// consuming it: what an audit row and an approval request keep.
func bodyBytes(r *http.Request) ([]byte, bool) {
	b, ok := r.Body.(*bufferedBody)
	if !ok {
		return nil, r.Body == nil || r.Body == http.NoBody
	}
	if b.err != io.EOF {
		return nil, false
	}
	out := make([]byte, b.r.Size())
	_, _ = b.r.ReadAt(out, 0) // a bytes.Reader fails only past its end
	return out, true
}
