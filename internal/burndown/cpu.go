package burndown

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// CPU is the CPU time a run used while it closed (or did) its work: this
// process's, which holds the engine, and that of the database sessions
// that served it. Server is -1 when it could not be read: only a
// PostgreSQL on this host, reached over loopback or a Unix socket, has its
// sessions' CPU time in /proc here.
type CPU struct {
	Process, Server time.Duration
}

// Per returns the process's and the server's CPU time per item, in
// microseconds, the server's -1 when unknown.
func (c CPU) Per(n int) (process, server float64) {
	if n <= 0 {
		return 0, -1
	}
	process, server = float64(c.Process.Microseconds())/float64(n), -1
	if c.Server >= 0 {
		server = float64(c.Server.Microseconds()) / float64(n)
	}
	return process, server
}

// CPUMeter measures a CPU: Start before the work, Stop after it. The
// server's sessions are those whose application_name is that of conn's
// session, which the DSN of a Scratch makes unique to the run; their CPU
// time is read from /proc/<pid>/stat, and a session that ends between
// Start and Stop is not counted (the store's pool keeps its connections).
type CPUMeter struct {
	// Children, when set, makes the process's CPU time that of this
	// process's children that ended between Start and Stop (pgbench run as
	// a command) rather than its own.
	Children bool

	conn    *pgx.Conn
	local   bool
	process time.Duration
	server  map[int32]time.Duration
	seen    map[int32]time.Duration // the latest Sample of each session
}

// NewCPUMeter returns a meter of this process and, when conn is not nil
// and its server is on this host, of the sessions of conn's
// application_name.
func NewCPUMeter(conn *pgx.Conn) *CPUMeter {
	m := &CPUMeter{conn: conn}
	if conn != nil {
		m.local = onThisHost(conn.Config().Host)
	}
	return m
}

func (m *CPUMeter) processCPU() time.Duration {
	if m.Children {
		return ChildrenCPU()
	}
	return ProcessCPU()
}

// Start takes the readings that Stop subtracts.
func (m *CPUMeter) Start(ctx context.Context) error {
	m.process = m.processCPU()
	m.seen = map[int32]time.Duration{}
	if !m.local {
		return nil
	}
	var err error
	m.server, err = m.sessions(ctx)
	return err
}

// Sample reads the sessions' CPU time now, for sessions that end before
// Stop (pgbench's): each counts up to its last Sample. Call it from the
// goroutine that calls Start and Stop, or while they do not run.
func (m *CPUMeter) Sample(ctx context.Context) error {
	if !m.local || m.server == nil {
		return nil
	}
	now, err := m.sessions(ctx)
	for pid, t := range now {
		m.seen[pid] = t
	}
	return err
}

// Stop returns the CPU time used since Start.
func (m *CPUMeter) Stop(ctx context.Context) (CPU, error) {
	c := CPU{Process: m.processCPU() - m.process, Server: -1}
	if !m.local || m.server == nil {
		return c, nil
	}
	if err := m.Sample(ctx); err != nil {
		return c, err
	}
	if len(m.seen) == 0 {
		return c, nil
	}
	c.Server = 0
	for pid, t := range m.seen {
		c.Server += t - m.server[pid] // a session that began after Start counts from zero
	}
	return c, nil
}

// sessions returns the CPU time of each session of the meter's
// application_name but its own, or nil when /proc does not have them (a
// server in a container of its own, say).
func (m *CPUMeter) sessions(ctx context.Context) (map[int32]time.Duration, error) {
	rows, err := m.conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE application_name = current_setting('application_name') AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil, fmt.Errorf("burndown: list the store's sessions: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("burndown: list the store's sessions: %w", err)
	}
	out := make(map[int32]time.Duration, len(pids))
	for _, pid := range pids {
		t, ok := procCPU(pid)
		if !ok {
			return nil, nil
		}
		out[pid] = t
	}
	return out, nil
}

// procCPU returns the user and system time of process pid, from
// /proc/<pid>/stat, and false when there is no such process or it is not
// PostgreSQL's.
func procCPU(pid int32) (time.Duration, bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || !strings.HasPrefix(string(comm), "postgres") {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// After the command, which is in parentheses, utime and stime are the
	// 12th and 13th fields (the 14th and 15th of the line).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * 10 * time.Millisecond, true // USER_HZ is 100 on Linux
}

// onThisHost reports whether host, as pgx connects to it, is this machine:
// a Unix socket's directory, localhost or a loopback address.
func onThisHost(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withApplicationName returns the postgres:// URL dsn with its
// application_name set to name.
func withApplicationName(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// Not err: url.Parse's error repeats the DSN, password and all.
		return "", errors.New("burndown: the PostgreSQL DSN is not a URL")
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
