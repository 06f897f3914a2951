package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/testenv"
)

// pgafCluster is a pg_auto_failover formation on this machine, in a
// directory of its own: a monitor and two PostgreSQL nodes, each run by its
// own `pg_autoctl create … --run` in its own process group, so that killing
// the group is the death of a machine (the keeper and its postmaster at
// once, before the keeper can restart it).
type pgafCluster struct {
	t       *testing.T
	autoctl string
	pgctl   string
	dir     string
	osUser  string // the OS user the servers run as, and their superuser
	cred    *syscall.Credential
	monitor *pgafNode
	nodes   []*pgafNode
}

type pgafNode struct {
	name string
	port int
	cmd  *exec.Cmd
	log  string
}

// newPGAFCluster makes the formation's directory and starts its monitor,
// tuned to fail over within seconds rather than pg_auto_failover's
// half-minute defaults. PostgreSQL refuses to run as root: as root, the
// servers run as the postgres OS user.
func newPGAFCluster(t *testing.T) *pgafCluster {
	t.Helper()
	autoctl := testenv.Program(t, testenv.EnvPGAutoctl, "pg_auto_failover (pg_autoctl)")
	bin := os.Getenv(testenv.EnvPGBin)
	if bin == "" {
		out, err := exec.Command("pg_config", "--bindir").Output()
		if err != nil {
			t.Fatalf("%s is unset and pg_config --bindir fails: %v", testenv.EnvPGBin, err)
		}
		bin = strings.TrimSpace(string(out))
	}
	c := &pgafCluster{t: t, autoctl: autoctl, pgctl: filepath.Join(bin, "pg_ctl")}
	if _, err := os.Stat(c.pgctl); err != nil {
		t.Fatalf("pg_ctl: %v", err)
	}
	dir, err := os.MkdirTemp("", "lapse-pgaf-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	c.osUser = me.Username
	if os.Geteuid() == 0 {
		pu, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the postgres OS user: %v", err)
		}
		uid, _ := strconv.Atoi(pu.Uid)
		gid, _ := strconv.Atoi(pu.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		c.osUser = "postgres"
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.close)

	c.monitor = c.start("monitor", "create", "monitor")
	var conn *pgx.Conn
	waitFor(t, 60*time.Second, func() bool {
		conn, err = pgx.Connect(context.Background(), c.monitorDSN("postgres"))
		return err == nil && conn.Ping(context.Background()) == nil
	})
	defer conn.Close(context.Background())
	// Health-check the nodes every second, call one unhealthy when it has
	// failed its checks and not reported for 3 s, and promote the standby 3 s
	// after that (the time the old primary is given to see that it is cut
	// off and demote itself). The defaults take about half a minute.
	for _, set := range []string{
		"pgautofailover.health_check_period = 1000",
		"pgautofailover.health_check_timeout = 1000",
		"pgautofailover.health_check_max_retries = 1",
		"pgautofailover.health_check_retry_delay = 500",
		"pgautofailover.node_considered_unhealthy_timeout = 3000",
		"pgautofailover.primary_demote_timeout = 3000",
	} {
		if _, err := conn.Exec(context.Background(), "ALTER SYSTEM SET "+set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(context.Background(), "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs `pg_autoctl args… --pgdata DIR/name --pgport P --run` and
// returns the node.
func (c *pgafCluster) start(name string, args ...string) *pgafNode {
	c.t.Helper()
	n := &pgafNode{name: name, port: testenv.FreePort(c.t), log: filepath.Join(c.dir, name+".log")}
	args = append(args, "--pgdata", filepath.Join(c.dir, name), "--pgport", strconv.Itoa(n.port), "--pgctl", c.pgctl,
		"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
	logf, err := os.Create(n.log)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	n.cmd = exec.Command(c.autoctl, args...)
	n.cmd.Dir = c.dir
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	// Its configuration and state files go to the cluster's directory, not
	// to the OS user's home.
	n.cmd.Env = append(os.Environ(), "HOME="+c.dir, "XDG_CONFIG_HOME="+filepath.Join(c.dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(c.dir, "data"), "XDG_RUNTIME_DIR="+filepath.Join(c.dir, "run"))
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	if err := n.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go n.cmd.Wait() //nolint:errcheck // reaped; the exit shows in the node's state
	return n
}

// addNode starts a PostgreSQL node of the formation with a database
// "lapse": the first becomes the primary, the next its standby.
func (c *pgafCluster) addNode(name string) *pgafNode {
	c.t.Helper()
	n := c.start(name, "create", "postgres", "--name", name, "--dbname", "lapse", "--monitor", c.monitorDSN("autoctl_node"))
	c.nodes = append(c.nodes, n)
	return n
}

func (c *pgafCluster) monitorDSN(role string) string {
	if role == "postgres" {
		role = c.osUser
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/pg_auto_failover?sslmode=disable", role, c.monitor.port)
}

// nodeDSN is a connection to one node's lapse database.
func (c *pgafCluster) nodeDSN(n *pgafNode) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/lapse?sslmode=disable", c.osUser, n.port)
}

// DSN names the nodes, in this order, and asks for the writable one, as
// Lapse is configured against the formation.
func (c *pgafCluster) DSN(nodes ...*pgafNode) string {
	hosts := make([]string, len(nodes))
	for i, n := range nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.port)
	}
	return fmt.Sprintf("postgres://%s@%s/lapse?sslmode=disable&target_session_attrs=read-write", c.osUser, strings.Join(hosts, ","))
}

// states returns each node's reported and goal state, as the monitor has
// them ("primary/primary").
func (c *pgafCluster) states() map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.monitorDSN("postgres"))
	if err != nil {
		return nil
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node`)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for rows.Next() {
		var name, reported, goal string
		if rows.Scan(&name, &reported, &goal) == nil {
			out[name] = reported + "/" + goal
		}
	}
	return out
}

// checkpoint asks node n for an immediate checkpoint, which pg_basebackup
// of a new standby otherwise waits for at the spread pace.
func (c *pgafCluster) checkpoint(n *pgafNode) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, c.nodeDSN(n)); err == nil {
		_, _ = conn.Exec(ctx, "CHECKPOINT")
		conn.Close(ctx)
	}
}

// kill SIGKILLs the process group of node n: its keeper and its
// PostgreSQL die at once, as with the machine.
func (c *pgafCluster) kill(n *pgafNode) {
	c.t.Helper()
	if err := syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill %s: %v", n.name, err)
	}
}

// close stops every node (SIGTERM, then SIGKILL after 15 s), shows their
// logs when the test failed, and removes the directory.
func (c *pgafCluster) close() {
	all := append(append([]*pgafNode{}, c.nodes...), c.monitor)
	for _, n := range all {
		if n != nil {
			_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, n := range all {
		if n == nil {
			continue
		}
		stop := time.Now().Add(15 * time.Second)
		for syscall.Kill(-n.cmd.Process.Pid, 0) == nil {
			if time.Now().After(stop) {
				_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
				time.Sleep(100 * time.Millisecond)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if c.t.Failed() {
			if b, err := os.ReadFile(n.log); err == nil {
				c.t.Logf("log of pg_autoctl %s (last 4 kB):\n%s", n.name, tail(b, 4096))
			}
		}
	}
	_ = os.RemoveAll(c.dir)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
