package postgres

import (
	"context"
	"embed"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/lapsehq/lapse/internal/migration"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateLockClass is the first key of the advisory lock that serialises
// Migrate; the second is a hash of the schema, so that stores in different
// schemas of one database migrate independently.
const migrateLockClass = 0x6c617073 // "laps"

// Migrate brings the schema up to date: it applies, in order and in one
// transaction, every embedded migration not yet recorded in lapse_migrations.
// It is safe to call on every start, from many processes at once: they queue
// on an advisory lock and all but the first find nothing to do. Tables are
// created in the first schema of the search_path.
//
// It fails, changing nothing, when the schema records a migration this
// build does not have: a newer Lapse has migrated it.
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, math.MaxInt64)
}

// migrate applies the migrations up to version upTo; tests of an upgrade
// start from an older schema with it.
func (s *Store) migrate(ctx context.Context, upTo int64) error {
	ms, err := migration.List(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// A migration may build an index over millions of orders: only ctx
	// bounds it. Waiting for another process's migrations is expected too,
	// but DDL that queues behind a long transaction holds up every query of
	// its table, so once the lock is ours lock_timeout applies again.
	for _, q := range []string{
		"SET LOCAL statement_timeout = 0",
		"SET LOCAL lock_timeout = 0",
		"SELECT pg_advisory_xact_lock(" + strconv.Itoa(migrateLockClass) + ", hashtext(coalesce(current_schema(), '')))",
		"SET LOCAL lock_timeout TO DEFAULT",
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS lapse_migrations (
		version    int PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM lapse_migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	if err := migration.Known(ms, slices.Collect(maps.Keys(applied))); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	for _, m := range ms {
		if applied[m.Version] || m.Version > upTo {
			continue
		}
		// Without arguments pgx uses the simple protocol, which runs a file
		// of several statements.
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("postgres: migrate %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO lapse_migrations (version) VALUES ($1)", m.Version); err != nil {
			return fmt.Errorf("postgres: migrate %s: %w", m.Name, err)
		}
	}
	// The outbox's partitions of the days ahead (outbox_partition.go), by
	// the database's clock: they are where events are kept, and decide
	// nothing about them. The pruner makes them too, by the engine's.
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	if err := (&Store{pool: s.pool, db: conn{tx}, tx: tx}).ensureOutboxDays(ctx, now); err != nil {
		return fmt.Errorf("postgres: migrate: the outbox's partitions: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return nil
}

// MigrateCheck reports, as an error, a schema that Migrate would change
// or refuses: one that lacks a migration of this build, or records one this
// build does not have. It changes nothing, and is for the commands that use
// a database without migrating it.
func (s *Store) MigrateCheck(ctx context.Context) error {
	ms, err := migration.List(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass('lapse_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	var applied []int64
	if exists {
		if err := s.pool.QueryRow(ctx, "SELECT coalesce(array_agg(version::bigint), '{}') FROM lapse_migrations").Scan(&applied); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if err := migration.Current(ms, applied); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}
