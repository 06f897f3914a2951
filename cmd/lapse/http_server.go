package main

import (
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/lapsehq/lapse/console"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// maxHeaderBytes bounds a request's header block on every listener of lapse
// serve. The largest a caller needs is a few kilobytes (a key, a session
// cookie, a provider's signature, a proxy's X-Forwarded-For); net/http's
// default, 1 MB, let anyone who reaches a listener, without a credential,
// have it hold a megabyte for each connection that sends one, within
// ReadHeaderTimeout. Past the bound a request is answered 431.
const maxHeaderBytes = 64 << 10

// defaultMaxConns is --max-conns by default: far above what a service
// behind a proxy or a few hundred clients keeps open, far below the file
// descriptors a process is commonly given (ulimit -n of 65536 or more).
const defaultMaxConns = 10000

// limitConns caps the connections that ln accepts and keeps open at max (0:
// ln as it is). Past the cap Accept waits until one closes, leaving new
// connections in the kernel's backlog, not refused: each open connection,
// idle keep-alive ones too, holds a goroutine, buffers and a file
// descriptor, and anyone who reaches a listener could otherwise open them
// until the process has no descriptor left for anything, the payment
// callbacks included.
func limitConns(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return netutil.LimitListener(ln, max)
}

// newHTTPServer returns the server of one of lapse serve's listeners for h:
// headers within maxHeaderBytes and 10 s, idle connections closed after
// 2 minutes, and writeTimeout, counted from the end of the headers, to free
// the connections of clients that do not read their answers. Every request
// goes to h, OPTIONS * too: net/http's own answer to it read up to 4 KiB of
// body first, with no deadline, where h reads a body within its deadline.
func newHTTPServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: writeTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: maxHeaderBytes, DisableGeneralOptionsHandler: true}
}

// listenerHandler is the handler of the API's listener (--http): the
// console under console.Prefix, the sandbox's gateway under /sandbox/ when
// there is one (nil: none), and the API for every other path. It sends each
// request on by the prefix of its path, with no ServeMux in front: a
// ServeMux answers a path that is not in its clean form (//v1/orders,
// /a/../v1/orders) or names a subtree without its last slash (/console)
// with a redirect of its own, before any handler of Lapse's, and net/http
// then reads what the client left of the body, to answer, with no deadline:
// anyone could hold a connection, and its goroutine, for good with the
// headers of such a request and part of a body. Each of the three reads a
// body within the body deadline before anything answers, its redirects
// included.
func listenerHandler(api, con, sandbox http.Handler) http.Handler {
	consoleRoot := strings.TrimSuffix(console.Prefix, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == consoleRoot || strings.HasPrefix(p, console.Prefix):
			con.ServeHTTP(w, r)
		case sandbox != nil && (p == "/sandbox" || strings.HasPrefix(p, "/sandbox/")):
			sandbox.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// metricsServer serves what reg gathers at /metrics, to anyone who reaches
// it: the listener of --metrics-http, which is kept private. No route takes
// a body; one sent all the same is read, up to 1 KiB, within bodyTimeout.
func metricsServer(reg prometheus.Gatherer, bodyTimeout time.Duration) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return newHTTPServer(lapsehttp.BodyDeadline(mux, bodyTimeout, 1<<10), time.Minute)
}

// consoleServer serves the console con on a listener of its own
// (--console-http), with / sent to it. Every body is read within
// bodyTimeout, up to 1 MiB (the console's largest form), those of the
// requests the console never sees too (another path, a path the mux
// redirects to its clean form).
func consoleServer(con http.Handler, bodyTimeout time.Duration) *http.Server {
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, con)
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
	return newHTTPServer(lapsehttp.BodyDeadline(mux, bodyTimeout, 1<<20), 2*time.Minute)
}
