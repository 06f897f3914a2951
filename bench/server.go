package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/internal/burndown"
)

// walLSN returns the server's current WAL position.
func walLSN(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
}

// walSince returns the bytes of WAL the whole server wrote since lsn.
func walSince(ctx context.Context, pool *pgxpool.Pool, lsn string) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the WAL written: %w", err)
	}
	return n, nil
}

// dropScratch drops sc, also when ctx was cancelled (Ctrl-C), and sets
// *err to why it could not when nothing else went wrong.
func dropScratch(ctx context.Context, sc *burndown.Scratch, err *error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if derr := sc.Drop(ctx); derr != nil && *err == nil {
		*err = derr
	}
}
