package burndown

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// settingNames are the PostgreSQL settings that bear on the figures: how
// much is cached, what a commit waits for, and how much WAL is written and
// when it is checkpointed.
var settingNames = []string{"server_version", "shared_buffers", "synchronous_commit", "fsync", "wal_level",
	"max_wal_size", "checkpoint_timeout", "autovacuum", "wal_compression", "full_page_writes"}

// pgServer is a connection of a run's own to the store's PostgreSQL, for
// what the run measures beside the store.
type pgServer struct {
	conn *pgx.Conn
}

func openPostgres(ctx context.Context, dsn string) (*pgServer, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("burndown: connect to PostgreSQL: %w", err)
	}
	return &pgServer{conn: conn}, nil
}

func (p *pgServer) close() {
	_ = p.conn.Close(context.Background())
}

// settings returns the values of settingNames, as the server shows them.
func (p *pgServer) settings(ctx context.Context) ([]Setting, error) {
	rows, err := p.conn.Query(ctx, "SELECT name, current_setting(name) FROM unnest($1::text[]) WITH ORDINALITY AS s(name, n) ORDER BY n", settingNames)
	if err != nil {
		return nil, fmt.Errorf("burndown: read the server's settings: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Setting, error) {
		var s Setting
		return s, r.Scan(&s.Name, &s.Value)
	})
	if err != nil {
		return nil, fmt.Errorf("burndown: read the server's settings: %w", err)
	}
	return out, nil
}

// vacuum vacuums and analyzes every table of the connection's schema (the
// first of its search_path), which loading has just filled: as autovacuum
// would have by the time a live table held as much, and so that the run
// neither sets hint bits nor meets autovacuum on them.
func (p *pgServer) vacuum(ctx context.Context) error {
	rows, err := p.conn.Query(ctx, "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")
	if err != nil {
		return fmt.Errorf("burndown: list the tables to vacuum: %w", err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var schema, table string
		return pgx.Identifier{schema, table}, r.Scan(&schema, &table)
	})
	if err != nil {
		return fmt.Errorf("burndown: list the tables to vacuum: %w", err)
	}
	for _, t := range tables {
		if _, err := p.conn.Exec(ctx, "VACUUM (ANALYZE) "+t.Sanitize()); err != nil {
			return fmt.Errorf("burndown: vacuum %s: %w", t.Sanitize(), err)
		}
	}
	// The load wrote far more WAL than max_wal_size: without a checkpoint
	// now, the run would meet the ones it set off, each of which makes the
	// next change of every page write a whole copy of it. pgbench's setup
	// ends the same way. A role that may not checkpoint runs without it.
	if _, err := p.conn.Exec(ctx, "CHECKPOINT"); err != nil && !isInsufficientPrivilege(err) {
		return fmt.Errorf("burndown: checkpoint: %w", err)
	}
	return nil
}

// isInsufficientPrivilege reports whether err is PostgreSQL's refusal of a
// statement the role may not run.
func isInsufficientPrivilege(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "42501"
}

// walLSN returns the server's current WAL position.
func (p *pgServer) walLSN(ctx context.Context) (string, error) {
	var lsn string
	if err := p.conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return "", fmt.Errorf("burndown: read the WAL position: %w", err)
	}
	return lsn, nil
}

// walSince returns the bytes of WAL the server wrote since lsn.
func (p *pgServer) walSince(ctx context.Context, lsn string) (int64, error) {
	var n int64
	if err := p.conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn).Scan(&n); err != nil {
		return 0, fmt.Errorf("burndown: read the WAL written: %w", err)
	}
	return n, nil
}
