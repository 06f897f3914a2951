package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/internal/clientaddr"
)

// accessFlags configure who may call the API of lapse serve: the admin key
// it starts with, the thresholds of four eyes, how long sessions and second
// factors last, and where /metrics may be read without a key.
type accessFlags struct {
	adminKey, adminKeyFile                      string
	approvalAmount, approvalCount               int
	loginsPerMinute                             int
	approvalTTL, secondFactorWindow, sessionTTL time.Duration
	sessionIdle                                 time.Duration
	metricsAddr, consoleAddr                    string
	trustedOrigins, trustedProxies              string
}

// config returns the access.Config the flags ask for, or what is wrong with
// them, named by flag.
func (f *accessFlags) config() (access.Config, error) {
	switch {
	case f.adminKey != "" && len(f.adminKey) < access.MinAdminKeyLen:
		return access.Config{}, fmt.Errorf("--admin-key must be at least %d characters (it is %d); leave it out to have one made", access.MinAdminKeyLen, len(f.adminKey))
	case strings.IndexFunc(f.adminKey, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		// A line ending left by an env file, say: no request could send it.
		return access.Config{}, fmt.Errorf("--admin-key must be printable ASCII without blanks or line endings, as an Authorization header carries it")
	}
	check := http.NewCrossOriginProtection()
	for _, o := range splitList(f.trustedOrigins) {
		if err := check.AddTrustedOrigin(o); err != nil {
			return access.Config{}, fmt.Errorf("--trusted-origins: %w", err)
		}
	}
	return access.Config{
		AdminKey:           f.adminKey,
		ApprovalAmount:     int64(f.approvalAmount),
		ApprovalCount:      int64(f.approvalCount),
		ApprovalTTL:        f.approvalTTL,
		SecondFactorWindow: f.secondFactorWindow,
		SessionTTL:         f.sessionTTL,
		SessionIdle:        f.sessionIdle,
		LoginsPerMinute:    f.loginsPerMinute,
	}, nil
}

// proxies returns the proxies --trusted-proxies names, or what is wrong
// with it.
func (f *accessFlags) proxies() ([]netip.Prefix, error) {
	ps, err := clientaddr.ParseTrusted(splitList(f.trustedProxies))
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return ps, nil
}

// keyFile is where the first start writes the admin key it makes: the
// --admin-key-file given, else beside an SQLite database (lapse.db's is
// lapse.db.admin-key), else lapse.admin-key in the working directory.
func (f *accessFlags) keyFile(dsn string) string {
	if f.adminKeyFile != "" {
		return f.adminKeyFile
	}
	if path, ok := sqlitePath(dsn); ok && path != "" && path != ":memory:" {
		return path + ".admin-key"
	}
	return "lapse.admin-key"
}

// service builds the access service of lapse serve with cfg (from config)
// over store, the raw store (an AccessStore), and gives a new installation
// its first credential: without --admin-key, a store with no key or
// operator in force gets an admin key, written to keyFile with mode 0600.
// It logs where that file is, never the key.
func (f *accessFlags) service(ctx context.Context, cfg access.Config, store lapse.Store, dsn string, log *slog.Logger) (*access.Service, error) {
	svc, err := access.New(store, cfg)
	if err != nil {
		return nil, err
	}
	if f.adminKey != "" {
		return svc, nil
	}
	path := f.keyFile(dsn)
	created, err := svc.EnsureAdminKey(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("the first admin key: %w", err)
	}
	abs, aerr := filepath.Abs(path)
	if aerr != nil {
		abs = path
	}
	switch info, serr := os.Stat(path); {
	case created:
		log.Warn("an admin key was generated: it is in this file, readable by its owner only; use it as Authorization: Bearer <key>, "+
			"create keys of narrower scopes with lapse apikey create, and keep or remove the file", "file", abs)
	case serr == nil && info.Mode().Perm()&0o077 != 0:
		// Made readable by its owner only; someone opened it since.
		log.Warn("the admin key made at the first start is in this file, which others than its owner may read or write: chmod 600 it, "+
			"or revoke the key (lapse apikey revoke) and remove the file", "file", abs, "mode", fmt.Sprintf("%04o", info.Mode().Perm()))
	case serr == nil:
		log.Info("the admin key made at the first start is in this file", "file", abs)
	case errors.Is(serr, fs.ErrNotExist):
		log.Info("no --admin-key; the API takes the keys and operators in the database (lapse apikey, lapse operator)")
	}
	return svc, nil
}

// beyondLocalhost reports whether ln takes connections from other machines.
func beyondLocalhost(ln net.Listener) bool {
	addr, ok := ln.Addr().(*net.TCPAddr)
	return ok && !addr.IP.IsLoopback()
}

// warnSandbox logs that the sandbox, whose POST /sandbox/pay needs no
// credential, lets anyone who reaches an API listening beyond this machine
// pay any order.
func warnSandbox(ln net.Listener, log *slog.Logger) {
	if beyondLocalhost(ln) {
		log.Warn("the sandbox payment provider is on (--sandbox) and the API listens beyond this machine: anyone who reaches it can pay "+
			"any order through POST /sandbox/pay, with no credential; the sandbox is for tests and demos", "http", ln.Addr().String())
	}
}

// warnInsecure logs that an API listening beyond this machine without TLS
// sends session cookies that browsers will not send back: they are Secure.
func warnInsecure(ln net.Listener, log *slog.Logger) {
	if beyondLocalhost(ln) {
		log.Warn("the API listens beyond this machine over plain HTTP: operators' session cookies are Secure, so logins need HTTPS "+
			"(a proxy that terminates TLS in front of it); API keys work either way, but travel in the clear", "http", ln.Addr().String())
	}
}

// cliPrincipal is who the command line acts as: the OS user who runs it,
// with the admin scope, for whoever can reach the database with its
// credentials can change anything in it anyway.
func cliPrincipal() *access.Principal {
	return access.CLI(osUser())
}

// osUser names the user running the process: the account's name, else
// $USER, else the uid.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "uid:" + strconv.Itoa(os.Getuid())
}
