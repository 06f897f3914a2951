package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// defaultDB is the embedded default: an SQLite file in the working directory.
const defaultDB = "lapse.db"

// migratingStore is a store that can apply its own migrations and keeps
// the sandbox gateway's state.
type migratingStore interface {
	lapse.Store
	lapse.SandboxStore
	Migrate(ctx context.Context) error
}

// openStore opens the store named by dsn: a postgres:// or postgresql:// URL
// selects PostgreSQL, a mysql:// URL MySQL or MariaDB; anything else is an
// SQLite file path (an optional sqlite: prefix is dropped).
func openStore(ctx context.Context, dsn string) (migratingStore, error) {
	return openStoreConns(ctx, dsn, 0, postgres.DefaultBatchGather)
}

// openStoreConns is openStore with a PostgreSQL or MySQL pool of conns
// connections (zero: the store's default), and on PostgreSQL batches that
// gather for up to gather (zero: off; --batch-gather); SQLite has its own
// connections.
func openStoreConns(ctx context.Context, dsn string, conns int32, gather time.Duration) (migratingStore, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgres.Open(ctx, dsn, postgres.Config{MaxConns: conns, BatchGather: cmp.Or(gather, -1)})
	case strings.HasPrefix(dsn, "mysql://"):
		return mysql.Open(ctx, dsn, mysql.Config{MaxConns: int(conns)})
	case dsn == "":
		return nil, fmt.Errorf("--db is empty")
	default:
		path, _ := sqlitePath(dsn)
		return sqlite.Open(ctx, path, sqlite.Config{})
	}
}

// openExisting opens the store of a command that reads or changes a
// database but does not make one: an SQLite file that is not there is an
// error rather than a new, empty database. It applies no migrations.
func openExisting(ctx context.Context, dsn string) (migratingStore, error) {
	if path, ok := sqlitePath(dsn); ok {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--db %s: %w (lapse migrate or lapse serve makes it)", path, err)
		}
	}
	return openStore(ctx, dsn)
}

// sqlitePath returns the file path of an SQLite dsn, and false for a
// PostgreSQL or MySQL one.
func sqlitePath(dsn string) (string, bool) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || strings.HasPrefix(dsn, "mysql://") {
		return "", false
	}
	return strings.TrimPrefix(dsn, "sqlite:"), true
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	var o options
	if err := parseFlags(fs, migrateSettings, &o, args); err != nil {
		return err
	}
	s, err := openStore(ctx, o.db)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated %s\n", hidePasswords(o.db))
	return nil
}
