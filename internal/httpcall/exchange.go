// Package httpcall makes one HTTP exchange the way Lapse's outbound ports
// need it: a read timeout kept apart from the connect timeout, and word of
// whether the request was sent, so that a failure can be told apart as
// "not sent" (safe to retry) or "outcome unknown" (ask before retrying).
package httpcall

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Exchange sends req with client and hands the response to read, which
// reads what it needs of the body; Exchange closes it. The read timeout
// starts once a connection is held, so it bounds writing the request,
// waiting for the answer and reading it, and never eats into the connect
// timeout (the client's dialer has that). written reports whether the whole
// request reached a connection: when it did, a failure leaves the outcome
// unknown, since the other side may have acted on it. An error caused by the
// read timeout wraps timeout.
func Exchange(ctx context.Context, client *http.Client, req *http.Request, readTimeout time.Duration, timeout error,
	read func(*http.Response) error) (written bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex // trace hooks may run on the transport's goroutines
		timer *time.Timer
		wrote atomic.Bool
	)
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			if timer == nil {
				timer = time.AfterFunc(readTimeout, func() { cancel(timeout) })
			}
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}()
	timedOut := func(err error) error {
		// An answer read in full is the answer, whenever the timer fired.
		if err != nil && errors.Is(context.Cause(ctx), timeout) {
			return fmt.Errorf("%w (%s): %w", timeout, readTimeout, err)
		}
		return err
	}
	resp, err := client.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = RedactURL(ue.URL)
		}
		return wrote.Load(), timedOut(err)
	}
	defer resp.Body.Close()
	return true, timedOut(read(resp))
}

// RedactURL is raw as an error may show it: without the password of its
// user information (which the client leaves out already), or the user
// itself when it has no password (a token sent as Basic auth), with the
// value of each query parameter masked, and with its path's long segments
// masked (MaskPath). A webhook's or a port's URL often carries its token in
// the query (?token=…) or in its path (Slack's and Discord's incoming
// webhooks), and a delivery's last error, which holds the URL, is shown to
// everyone who may read orders; a URL a setting refuses is shown in the
// error that stops the start.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("xxxxx")
		}
	}
	if masked := MaskPath(u.EscapedPath()); masked != u.EscapedPath() {
		u.Path, u.RawPath = masked, ""
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// secretSegment is the length from which a path segment is taken for a
// token: Slack's incoming webhooks end in one of 24 characters, Discord's
// in one of 68, while the segments of an API's own paths (reserve,
// refund_requests, v1) are words, shorter.
const secretSegment = 16

// MaskPath returns path (a URL's, as escaped) with each segment of
// secretSegment characters or more masked as xxxxx.
func MaskPath(path string) string {
	segs := strings.Split(path, "/")
	changed := false
	for i, s := range segs {
		if len(s) >= secretSegment {
			segs[i], changed = "xxxxx", true
		}
	}
	if !changed {
		return path
	}
	return strings.Join(segs, "/")
}
