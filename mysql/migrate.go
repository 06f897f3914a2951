package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
	"github.com/lapsehq/lapse/internal/migration"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// change is one embedded migration split into its statements, each ending
// with a semicolon at the end of a line: the driver runs one statement at a
// time.
type change struct {
	migration.Migration
	statements []string
}

// changes returns the embedded migrations in version order.
func changes() ([]change, error) {
	ms, err := migration.List(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	cs := make([]change, len(ms))
	for i, m := range ms {
		cs[i] = change{Migration: m, statements: statements(m.SQL)}
	}
	return cs, nil
}

// statements splits a migration file into its statements: lines that are
// comments ("-- …") are dropped, and a statement ends with a line that ends
// with a semicolon. The files hold no string that spans lines like that.
func statements(file string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(file) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Migrate brings the schema up to date: it applies, in version order, every
// embedded migration not yet recorded in lapse_migrations. It is safe to call
// on every start, from many processes at once: they queue on a named lock
// (GET_LOCK) of the database and all but the first find nothing to do.
// It fails, changing nothing, when the database records a migration this
// build does not have, applied or under way: a newer Lapse has migrated it.
//
// MySQL commits each DDL statement as it runs, so a migration cannot be
// applied in one transaction: lapse_migrations records, per version, how
// many of its statements have run, and a Migrate interrupted halfway
// (killed, the connection lost) carries on after the last statement it
// recorded. Only a stop between a statement and its record leaves that
// statement to run again, which then fails, naming it, for an operator.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := changes()
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	if err := s.migrate(ctx, ms); err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context, ms []change) error {
	c, err := s.pool.Conn(ctx)
	if err != nil {
		return unavailableWait(err)
	}
	// The session's settings below are for migrating only: the connection
	// is closed afterwards rather than given back to the pool. Ending the
	// session also releases the lock.
	defer func() {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		_ = c.Close()
	}()
	exec := func(q string, args ...any) error {
		_, err := c.ExecContext(ctx, q, args...)
		return unavailable(err)
	}
	// A migration may build an index over millions of orders: only ctx
	// bounds it. An ALTER TABLE waits for the metadata lock of its table
	// and meanwhile holds up every query of it, so that wait stays short. A
	// CREATE TABLE that names InnoDB must get InnoDB, not a substitute
	// without transactions.
	timeout, _ := s.server.timeoutVar(0)
	for _, q := range []string{
		"SET SESSION " + timeout + " = 0",
		"SET SESSION lock_wait_timeout = " + strconv.Itoa(int(DefaultLockTimeout.Seconds())),
		"SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_ENGINE_SUBSTITUTION')",
	} {
		if err := exec(q); err != nil {
			return err
		}
	}
	// The lock is the session's, named after the database, so that stores
	// in different databases of one server migrate independently. Waiting
	// for another process's migrations is expected; ctx bounds it.
	const lock = "CONCAT('lapse_migrate_', SHA1(DATABASE()))"
	for {
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK("+lock+", 10)").Scan(&got); err != nil {
			return unavailable(err)
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
	}
	defer func() { _, _ = c.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK("+lock+")") }()

	if err := exec(`CREATE TABLE IF NOT EXISTS lapse_migrations (
		version    INT    NOT NULL,
		statements INT    NOT NULL,
		applied_at BIGINT NOT NULL,
		PRIMARY KEY (version)
	) ENGINE = InnoDB`); err != nil {
		return err
	}
	done, err := appliedStatements(ctx, c)
	if err != nil {
		return err
	}
	ids := make([]migration.Migration, len(ms))
	for i, m := range ms {
		ids[i] = m.Migration
	}
	if err := migration.Known(ids, slices.Collect(maps.Keys(done))); err != nil {
		return err
	}
	record := func(m change, n int) error {
		// Bookkeeping, not business logic: the wall clock is the right one.
		now := column.Micros(lapse.SystemClock{}.Now())
		if err := exec(`INSERT INTO lapse_migrations (version, statements, applied_at) VALUES (?, ?, ?)
			ON DUPLICATE KEY UPDATE statements = ?, applied_at = ?`, m.Version, n, now, n, now); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		return nil
	}
	for _, m := range ms {
		n, seen := done[m.Version]
		if seen && n >= len(m.statements) {
			continue
		}
		for i := n; i < len(m.statements); i++ {
			if err := exec(m.statements[i]); err != nil {
				return fmt.Errorf("%s, statement %d of %d (those before it are applied): %w", m.Name, i+1, len(m.statements), err)
			}
			if err := record(m, i+1); err != nil {
				return err
			}
		}
		if len(m.statements) == 0 {
			if err := record(m, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// appliedStatements reads lapse_migrations: for each version, how many of
// its statements have been applied.
func appliedStatements(ctx context.Context, c *sql.Conn) (map[int64]int, error) {
	rows, err := c.QueryContext(ctx, "SELECT version, statements FROM lapse_migrations")
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	done := map[int64]int{}
	for rows.Next() {
		var v int64
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			return nil, unavailable(err)
		}
		done[v] = n
	}
	return done, unavailable(rows.Err())
}

// MigrateCheck reports, as an error, a database that Migrate would change
// or refuses: one that lacks a migration of this build (or some of its
// statements), or records one this build does not have. It changes nothing,
// and is for the commands that use a database without migrating it.
func (s *Store) MigrateCheck(ctx context.Context) error {
	ms, err := changes()
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	var exists int
	if err := s.pool.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name = 'lapse_migrations'`).Scan(&exists); err != nil {
		return fmt.Errorf("mysql: %w", unavailable(err))
	}
	ids := make([]migration.Migration, len(ms))
	statements := map[int64]int{}
	for i, m := range ms {
		ids[i] = m.Migration
		statements[m.Version] = len(m.statements)
	}
	var applied []int64
	if exists > 0 {
		c, err := s.pool.Conn(ctx)
		if err != nil {
			return fmt.Errorf("mysql: %w", unavailableWait(err))
		}
		defer c.Close()
		done, err := appliedStatements(ctx, c)
		if err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		for v, n := range done {
			// A known migration counts once all its statements have run;
			// an unknown one, however far it went.
			if want, known := statements[v]; !known || n >= want {
				applied = append(applied, v)
			}
		}
	}
	if err := migration.Current(ids, applied); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return nil
}
