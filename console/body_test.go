package console_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestSlowFormIsCut: a client that sends a post's headers and the start of
// its form, then nothing, is answered 400 at the body deadline and its
// connection closed, on a page open to anyone (the login) and on one that
// needs a session alike, rather than held for as long as it likes.
func TestSlowFormIsCut(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	e := newEnv(t, envConfig{bodyTimeout: timeout})
	u, err := url.Parse(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/console/login", "/console/close"} {
		c, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
			"Content-Length: 1000\r\n\r\nname=", path, u.Host); err != nil {
			t.Fatal(err)
		}
		// Far past the deadline: a connection still open then is held.
		_ = c.SetReadDeadline(time.Now().Add(timeout + 5*time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: a form that stopped coming had no answer: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 400 (or the 401 of no session)", path, res.StatusCode)
		}
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s: the connection is still open after its answer (read %d, %v)", path, n, err)
		}
	}
}
