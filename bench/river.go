package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/lapsehq/lapse/internal/burndown"
)

// riverVersion is the River this module pins (go.mod).
const riverVersion = "v0.51.2"

// riverResult is what the River burn-down measured.
type riverResult struct {
	jobs     int
	elapsed  time.Duration
	walBytes int64
	cpu      burndown.CPU
}

func (r *riverResult) perSecond() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

// noopArgs and noopWorker are riverbench's BenchmarkArgs and
// BenchmarkWorker: a job that does nothing.
type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "benchmark" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// runRiver is the burn-down of riverbench (River's `river bench
// --num-total-jobs N`), which lives in River's cmd/river module and cannot
// be imported here, driven through River's public API the way it does: in
// a scratch schema migrated by rivermigrate, n no-op jobs inserted before
// the client starts (not timed), then a client with riverbench's settings
// (FetchCooldown 2ms, FetchPollInterval 20ms, 2,000 workers) and a pool as
// River's CLI opens it, timed from its start to the last completion its
// subscription reports. Unlike riverbench it inserts with InsertManyFast
// (COPY), and vacuums the jobs table and checkpoints after loading, as the
// Lapse burn-down does its tables.
func runRiver(ctx context.Context, dsn string, n int, log *slog.Logger, progress func(string)) (res *riverResult, err error) {
	sc, err := burndown.NewScratch(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer dropScratch(ctx, sc, &err)
	progress("river: scratch schema " + sc.Name)

	pcfg, err := pgxpool.ParseConfig(sc.DSN)
	if err != nil {
		return nil, err
	}
	// As River's CLI sets them (rivercli.openPgxV5DBPool).
	params := pcfg.ConnConfig.RuntimeParams
	params["application_name"] = sc.Name // the scratch's own, which the CPU meter finds the sessions by
	params["idle_in_transaction_session_timeout"] = strconv.Itoa(11_000)
	params["statement_timeout"] = strconv.Itoa(10_000)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)

	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: sc.Name, Logger: log})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            log,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2_000}},
		Schema:            sc.Name,
		Workers:           workers,
	})
	if err != nil {
		return nil, err
	}

	const chunk = 5_000 // riverbench's insertBatchSize
	batch := make([]river.InsertManyParams, 0, chunk)
	for start := 0; start < n; start += chunk {
		batch = batch[:0]
		for i := start; i < min(start+chunk, n); i++ {
			batch = append(batch, river.InsertManyParams{Args: noopArgs{Num: i + 1}})
		}
		if _, err := client.InsertManyFast(ctx, batch); err != nil {
			return nil, fmt.Errorf("river: insert jobs: %w", err)
		}
		progress(fmt.Sprintf("river: %d/%d jobs inserted", start+len(batch), n))
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) river_job"); err != nil {
		return nil, fmt.Errorf("river: vacuum: %w", err)
	}
	// A checkpoint after the load, as Lapse's run and pgbench's setup
	// take: no run meets one that another's load set off.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, fmt.Errorf("river: checkpoint: %w", err)
	}

	// As riverbench: completions are counted from a subscription, which
	// sees a job through the completer, not when its worker returns.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: max(n, 1000),
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer cancel()

	lsn, err := walLSN(ctx, pool)
	if err != nil {
		return nil, err
	}
	meterConn, err := pgx.ConnectConfig(ctx, pcfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	defer meterConn.Close(context.WithoutCancel(ctx))
	meter := burndown.NewCPUMeter(meterConn)
	if err := meter.Start(ctx); err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	var last time.Time
	worked, failed := 0, 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for worked+failed < n && err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case ev := <-events:
			if ev.Kind == river.EventKindJobCompleted {
				worked++
			} else {
				failed++
			}
			last = time.Now()
		case <-tick.C:
			progress(fmt.Sprintf("river: %d/%d jobs worked", worked, n))
			if time.Since(cmpTime(last, start)) > 30*time.Second {
				err = errors.New("river: no job finished for 30s")
			}
		}
	}
	res = &riverResult{jobs: worked, elapsed: last.Sub(start)}
	if err == nil {
		res.cpu, err = meter.Stop(ctx)
	}
	if err == nil {
		res.walBytes, err = walSince(ctx, pool, lsn)
	}
	stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	if serr := client.Stop(stopCtx); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if failed > 0 {
		return nil, fmt.Errorf("river: %d of %d jobs failed or were cancelled", failed, n)
	}
	var completed int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
		return nil, err
	}
	if completed != n {
		return nil, fmt.Errorf("river: %d of %d jobs completed in the table", completed, n)
	}
	return res, nil
}

// cmpTime returns t, or else when t is zero.
func cmpTime(t, orElse time.Time) time.Time {
	if t.IsZero() {
		return orElse
	}
	return t
}
