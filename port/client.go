package port

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/lapsehq/lapse/internal/httpcall"
)

// ErrReadTimeout is in the chain of an error when the port accepted the
// connection but did not answer within Config.ReadTimeout.
var ErrReadTimeout = errors.New("port: no answer within the read timeout")

// Limits on what is read of an answer: a snippet for the delivery's last
// error, and a bound on the rest so that a connection can be reused without a
// large body holding it.
const (
	snippetLen = 256
	drainLen   = 64 << 10
)

// newClient builds a client whose dialer enforces the connect timeout. The
// read timeout is enforced per request, by roundTrip, so that it also holds
// for a client passed in Config.HTTPClient.
func newClient(connect time.Duration, conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// A merchant's service is reached directly: an environment proxy meant
	// for the open internet would only add a hop that can fail.
	t.Proxy = nil
	t.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = connect
	t.MaxIdleConnsPerHost = conns
	return &http.Client{
		Transport: t,
		// A redirected POST turns into a GET that applies nothing; the
		// status is reported instead, as a misconfiguration to fix.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// answer is what the port said: its status and the start of its body.
type answer struct {
	status int
	body   string
}

// roundTrip sends req and reads the answer: its status, and the start of its
// body for error messages. written reports whether the whole request reached
// the connection: when it did, a failure leaves the outcome unknown, since
// the port may have acted on it. See httpcall.Exchange for the timeouts.
func (p *Port) roundTrip(ctx context.Context, req *http.Request) (a answer, written bool, err error) {
	written, err = httpcall.Exchange(ctx, p.client, req, p.readTimeout, ErrReadTimeout, func(resp *http.Response) error {
		// The status is the answer; a body cut short does not change it.
		head, _ := io.ReadAll(io.LimitReader(resp.Body, snippetLen))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLen))
		a = answer{status: resp.StatusCode, body: snippet(head)}
		return nil
	})
	return a, written, err
}

// snippet makes the start of a body safe to keep in an error message that
// operators read: valid UTF-8, one line.
func snippet(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}
