package sqlite

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one file of migrations/, NNNN_name.sql, version NNNN.
type migration struct {
	version int64
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, path := range names {
		name := strings.TrimPrefix(path, "migrations/")
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_what.sql", name)
		}
		b, err := migrationFiles.ReadFile(path)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return cmp.Compare(a.version, b.version) })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s have the same version", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// Migrate brings the schema up to date: it applies the embedded migrations
// that the database has not seen, in version order, in one transaction, and
// records each in lapse_migrations. It is idempotent and safe to call at
// every start, from several processes at once: the transaction holds the
// write lock, so a second Migrate waits for the first and finds nothing left.
//
// It fails, changing nothing, when the database records a migration this
// build does not have: a newer Lapse has migrated it.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
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
		for v := range applied {
			if !slices.ContainsFunc(ms, func(m migration) bool { return m.version == v }) {
				return fmt.Errorf("the database has migration %d, which this build does not know; it was migrated by a newer version", v)
			}
		}
		// Bookkeeping, not business logic: the wall clock is the right one.
		now := micros(lapse.SystemClock{}.Now())
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			if _, err := w.tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if _, err := w.tx.ExecContext(ctx, `INSERT INTO lapse_migrations (version, applied_at) VALUES (?, ?)`,
				m.version, now); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
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
