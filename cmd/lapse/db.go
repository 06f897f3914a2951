package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
	// MigrateCheck reports a schema that is not this build's, newer or
	// older, changing nothing.
	MigrateCheck(ctx context.Context) error
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
		if info, err := os.Stat(path); err == nil && info.IsDir() {
			return nil, fmt.Errorf("--db %s is a directory: give the path of the SQLite file in it (%s)", path, filepath.Join(path, defaultDB))
		}
		return sqlite.Open(ctx, path, sqlite.Config{})
	}
}

// openExisting opens the store of a command that reads or changes a
// database but does not make one: an SQLite file that is not there is an
// error rather than a new, empty database. It applies no migrations, and
// refuses a database whose schema is not this build's: one a newer Lapse
// migrated, whose meaning this build does not know, or one not yet
// migrated to this build.
func openExisting(ctx context.Context, dsn string) (migratingStore, error) {
	if path, ok := sqlitePath(dsn); ok {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--db %s: %w (lapse migrate or lapse serve makes it)", path, err)
		}
	}
	s, err := openStore(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if err := s.MigrateCheck(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

var (
	dsnScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)
	// libpq's keyword=value form, and the Go MySQL driver's DSN: neither
	// is a URL, so either would be taken for the name of an SQLite file.
	libpqDSN    = regexp.MustCompile(`(?i)(^|\s)(host|hostaddr|port|dbname|user|password|sslmode)\s*=`)
	driverDSN   = regexp.MustCompile(`@(tcp|unix)\(`)
	dsnExpected = "give an SQLite file path, a postgres:// URL or a mysql://user:password@host:3306/database URL"
)

// checkDSN is the Check of --db: a DSN that names a store, and no URL of
// another scheme, which would be taken for the name of an SQLite file to
// make. Its errors do not repeat the DSN, which may hold a password.
func checkDSN(dsn string) error {
	if strings.TrimSpace(dsn) == "" {
		return errors.New("empty: " + dsnExpected)
	}
	if m := dsnScheme.FindStringSubmatch(dsn); m != nil {
		switch m[1] {
		case "postgres", "postgresql", "mysql":
			return nil
		case "sqlite":
			if strings.HasPrefix(dsn, "sqlite:///") {
				return nil
			}
			return errors.New("sqlite://NAME names a host, not a file: give the file's path (sqlite:PATH or PATH, sqlite:///PATH from the root)")
		}
		return fmt.Errorf("the scheme %q names no store Lapse has (postgres, postgresql, mysql, in lower case): %s", m[1], dsnExpected)
	}
	if libpqDSN.MatchString(dsn) {
		return errors.New("PostgreSQL's keyword=value form is not taken: give a postgres://user:password@host:5432/database URL")
	}
	if driverDSN.MatchString(dsn) {
		return errors.New("the Go MySQL driver's DSN is not taken: give a mysql://user:password@host:3306/database URL")
	}
	return nil
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
	if fs.NArg() > 0 {
		// lapse migrate postgres://… would migrate (and make) ./lapse.db.
		return fmt.Errorf("migrate: unexpected argument %q (the database is --db)", fs.Arg(0))
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
