package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/burndown"
)

// pgbenchResult is what pgbench measured running the store's close SQL.
type pgbenchResult struct {
	script                 string // the script's path
	clients, txns, batch   int
	closed                 int // orders CLOSED in the table afterwards
	tps                    float64
	walBytes               int64
	cpu                    burndown.CPU
	setupSchema, setupPath string
}

// perSecond is closes per second: the orders closed over the time pgbench
// took for its transactions (without connecting), which is tps × the batch
// when every transaction closed a full one.
func (r *pgbenchResult) perSecond() float64 {
	return float64(r.closed) * r.tps / float64(r.clients*r.txns)
}

var (
	schemaPattern = regexp.MustCompile(`(?im)^\s*CREATE\s+SCHEMA\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)\s*;`)
	limitPattern  = regexp.MustCompile(`(?i)\bLIMIT\s+(\d+)`)
	tpsPattern    = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
)

// runPgbench runs pgbench on the close statement of the PostgreSQL store
// kept in dir (postgres/testdata/pgbench), as its setup.sql says: psql
// loads n due orders with setup.sql, which makes its own schema, then
// pgbench runs close.sql (close_subscribers.sql with two subscribers) from
// clients connections (each reading on from the deadlines it claimed,
// from floor=0), as many transactions as leave every one a full
// batch; the schema is dropped at the end. The schema's name and the batch
// are read from the files, which are used as they are. skip says why it
// did not run, when it could not.
func runPgbench(ctx context.Context, dsn, dir string, n, subscribers, clients int, say func(string)) (res *pgbenchResult, skip string, err error) {
	for _, tool := range []string{"pgbench", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, tool + " is not on PATH", nil
		}
	}
	res = &pgbenchResult{clients: clients, setupPath: filepath.Join(dir, "setup.sql")}
	switch subscribers {
	case 0:
		res.script = filepath.Join(dir, "close.sql")
	case 2:
		res.script = filepath.Join(dir, "close_subscribers.sql")
	default:
		return nil, fmt.Sprintf("%s has no close with %d subscribers (0 or 2)", dir, subscribers), nil
	}
	setup, err := os.ReadFile(res.setupPath)
	if err != nil {
		return nil, "", fmt.Errorf("pgbench: %w (give --pgbench-dir)", err)
	}
	script, err := os.ReadFile(res.script)
	if err != nil {
		return nil, "", fmt.Errorf("pgbench: %w", err)
	}
	m := schemaPattern.FindSubmatch(setup)
	if m == nil {
		return nil, "", fmt.Errorf("pgbench: %s creates no schema (CREATE SCHEMA name;) to run %s in", res.setupPath, res.script)
	}
	res.setupSchema = string(m[1])
	if m = limitPattern.FindSubmatch(script); m == nil {
		return nil, "", fmt.Errorf("pgbench: %s has no LIMIT: how many orders does one transaction close?", res.script)
	}
	res.batch, _ = strconv.Atoi(string(m[1]))
	if res.txns = (n/max(res.batch, 1) - 2) / clients; res.txns < 1 {
		return nil, fmt.Sprintf("%d orders are too few for %d clients of batches of %d", n, clients, res.batch), nil
	}

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, "", err
	}
	defer pool.Close()
	// The schema of setup.sql has a fixed name: one pgbench run on a server
	// at a time.
	lock, err := pool.Acquire(ctx)
	if err != nil {
		return nil, "", err
	}
	defer lock.Release()
	const lockKey = "lapse bench: pgbench"
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", lockKey); err != nil {
		return nil, "", err
	}
	defer lock.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext($1))", lockKey)
	defer func() {
		_, derr := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{res.setupSchema}.Sanitize()+" CASCADE")
		if derr != nil && err == nil {
			err = fmt.Errorf("pgbench: drop schema %s: %w", res.setupSchema, derr)
		}
	}()

	say(fmt.Sprintf("pgbench: psql -f %s (n=%d), schema %s", res.setupPath, n, res.setupSchema))
	if out, err := command(ctx, nil, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "n="+strconv.Itoa(n), "-f", res.setupPath, dsn); err != nil {
		return nil, "", fmt.Errorf("pgbench: psql -f %s: %w\n%s", res.setupPath, err, out)
	}
	lsn, err := walLSN(ctx, pool)
	if err != nil {
		return nil, "", err
	}
	c := strconv.Itoa(clients)
	say(fmt.Sprintf("pgbench: -D floor=0 -f %s -c %s -j %s -t %d", res.script, c, c, res.txns))
	// pgbench's sessions by name, for the CPU meter, which samples them
	// while they run, since they end with pgbench.
	appName := fmt.Sprintf("lapse_bench_pgbench_%d", os.Getpid())
	mcfg := pool.Config().ConnConfig.Copy()
	mcfg.RuntimeParams["application_name"] = appName
	meterConn, err := pgx.ConnectConfig(ctx, mcfg)
	if err != nil {
		return nil, "", err
	}
	defer meterConn.Close(context.WithoutCancel(ctx))
	meter := burndown.NewCPUMeter(meterConn)
	meter.Children = true
	if err := meter.Start(ctx); err != nil {
		return nil, "", err
	}
	env := []string{"PGOPTIONS=" + os.Getenv("PGOPTIONS") + " -csearch_path=" + res.setupSchema, "PGAPPNAME=" + appName}
	sampled := make(chan error, 1)
	quit := make(chan struct{})
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				sampled <- nil
				return
			case <-tick.C:
				if err := meter.Sample(ctx); err != nil {
					sampled <- err
					return
				}
			}
		}
	}()
	out, err := command(ctx, env, "pgbench", "-n", "-D", "floor=0", "-f", res.script, "-c", c, "-j", c, "-t", strconv.Itoa(res.txns), dsn)
	close(quit)
	if serr := <-sampled; err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return nil, "", fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	if res.cpu, err = meter.Stop(ctx); err != nil {
		return nil, "", err
	}
	if res.walBytes, err = walSince(ctx, pool, lsn); err != nil {
		return nil, "", err
	}
	m = tpsPattern.FindSubmatch(out)
	if m == nil {
		return nil, "", fmt.Errorf("pgbench printed no tps:\n%s", out)
	}
	res.tps, _ = strconv.ParseFloat(string(m[1]), 64)
	q := "SELECT count(*) FROM " + pgx.Identifier{res.setupSchema, "orders"}.Sanitize() + " WHERE state = 'CLOSED'"
	if err := pool.QueryRow(ctx, q).Scan(&res.closed); err != nil {
		return nil, "", fmt.Errorf("pgbench: count the closed orders: %w", err)
	}
	return res, "", nil
}

// command runs name with args (and env added to the environment) and
// returns what it printed.
func command(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
