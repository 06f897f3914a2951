package sqlite

import (
	"context"
	"embed"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
	"github.com/lapsehq/lapse/internal/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate brings the schema up to date: it applies the embedded migrations
// that the database has not seen, in version order, in one transaction, and
// records each in lapse_migrations. It is idempotent and safe to call at
// every start, from several processes at once: the transaction holds the
// write lock, so a second Migrate waits for the first and finds nothing left.
//
// It fails, changing nothing, when the database records a migration this
// build does not have: a newer Lapse has migrated it.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migration.List(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	err = s.write(ctx, func(w *writeTx) error {
		if _, err := w.tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS lapse_migrations (
			version    INTEGER PRIMARY KEY,
			applied_at INTEGER NOT NULL
		) STRICT`); err != nil {
			return err
		}
		applied, err := appliedVersions(ctx, w)
		if err != nil {
			return err
		}
		if err := migration.Known(ms, slices.Collect(maps.Keys(applied))); err != nil {
			return err
		}
		// Bookkeeping, not business logic: the wall clock is the right one.
		now := column.Micros(lapse.SystemClock{}.Now())
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			if _, err := w.tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if _, err := w.tx.ExecContext(ctx, `INSERT INTO lapse_migrations (version, applied_at) VALUES (?, ?)`,
				m.Version, now); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	return nil
}

func appliedVersions(ctx context.Context, w *writeTx) (map[int64]bool, error) {
	rows, err := w.tx.QueryContext(ctx, `SELECT version FROM lapse_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

// MigrateCheck reports, as an error, a database that Migrate would change
// or refuses: one that lacks a migration of this build, or records one this
// build does not have. It changes nothing, and is for the commands that use
// a database without migrating it.
func (s *Store) MigrateCheck(ctx context.Context) error {
	ms, err := migration.List(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	var applied []int64
	// SQLite resolves the table when it prepares the statement, so a file
	// that was never migrated fails here: it has applied nothing.
	rows, err := s.reader.QueryContext(ctx, `SELECT version FROM lapse_migrations`)
	if err != nil && !strings.Contains(err.Error(), "no such table") {
		return fmt.Errorf("sqlite: %w", err)
	}
	if err == nil {
		defer rows.Close()
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				return fmt.Errorf("sqlite: %w", err)
			}
			applied = append(applied, v)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
	}
	if err := migration.Current(ms, applied); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}
