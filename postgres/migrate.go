package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered schema change, migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and _", base)
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	return ms, nil
}

// migrateLockClass is the first key of the advisory lock that serialises
// Migrate; the second is a hash of the schema, so that stores in different
// schemas of one database migrate independently.
const migrateLockClass = 0x6c617073 // "laps"

// Migrate brings the schema up to date: it applies, in order and in one
// transaction, every embedded migration not yet recorded in lapse_migrations.
// It is safe to call on every start, from many processes at once: they queue
// on an advisory lock and all but the first find nothing to do. Tables are
// created in the first schema of the search_path. Versions recorded by a
// newer binary are left alone, so that an older one can still start.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
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
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		// Without arguments pgx uses the simple protocol, which runs a file
		// of several statements.
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("postgres: migrate %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO lapse_migrations (version) VALUES ($1)", m.version); err != nil {
			return fmt.Errorf("postgres: migrate %s: %w", m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return nil
}
