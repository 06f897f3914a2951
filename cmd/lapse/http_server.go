package main

import (
	"net/http"
	"time"
)

// maxHeaderBytes bounds a request's header block on every listener of lapse
// serve. The largest a caller needs is a few kilobytes (a key, a session
// cookie, a provider's signature, a proxy's X-Forwarded-For); net/http's
// default, 1 MB, let anyone who reaches a listener, without a credential,
// have it hold a megabyte for each connection that sends one, within
// ReadHeaderTimeout. Past the bound a request is answered 431.
const maxHeaderBytes = 64 << 10

// newHTTPServer returns the server of one of lapse serve's listeners for h:
// headers within maxHeaderBytes and 10 s, idle connections closed after
// 2 minutes, and writeTimeout, counted from the end of the headers, to free
// the connections of clients that do not read their answers.
func newHTTPServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: writeTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: maxHeaderBytes}
}
