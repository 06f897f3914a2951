package burndown

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// Kinds of database a Scratch is made in.
const (
	KindPostgres = "postgres"
	KindMySQL    = "mysql"
	KindSQLite   = "sqlite"
)

// Scratch is a database made for one run, to be dropped after it: a schema
// on PostgreSQL, a database on MySQL, a directory holding the database file
// on SQLite, named lapse_bench_<random hex>.
type Scratch struct {
	// Kind is KindPostgres, KindMySQL or KindSQLite.
	Kind string
	// Name is the schema's, the database's or the directory's.
	Name string
	// DSN opens the scratch database as the DSN it was made from does: a
	// postgres:// URL whose search_path and application_name are the schema, a mysql:// URL
	// naming the database, or the path of an SQLite file.
	DSN string

	base string // the DSN it was made from
}

// NewScratch makes a scratch database beside the one dsn names: a
// postgres:// or postgresql:// URL, a mysql:// URL, or else an SQLite file
// path (an optional sqlite: prefix dropped), whose directory holds the
// scratch one, so that it is on the same disk. The user of a URL must be
// allowed to create a schema (PostgreSQL) or a database (MySQL).
func NewScratch(ctx context.Context, dsn string) (*Scratch, error) {
	name := "lapse_bench_" + randomHex(6)
	s := &Scratch{Name: name, base: dsn}
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s.Kind = KindPostgres
		u, err := url.Parse(dsn)
		if err != nil {
			// Not %w: url.Parse's error repeats the DSN, password and all.
			return nil, errors.New("burndown: the PostgreSQL DSN is not a postgres://user:password@host:5432/database URL " +
				"(percent-encode / : @ ? # and % in the password)")
		}
		if err := s.postgresExec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
			return nil, fmt.Errorf("burndown: create schema %s: %w", name, err)
		}
		q := u.Query()
		q.Set("search_path", name)
		// The run's sessions by name, so that CPUMeter finds them.
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		s.DSN = u.String()
	case strings.HasPrefix(dsn, "mysql://"):
		s.Kind = KindMySQL
		u, err := url.Parse(dsn)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("burndown: the MySQL DSN is not a mysql://user:password@host:3306/database URL")
		}
		if err := s.mysqlExec(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, fmt.Errorf("burndown: create database %s: %w", name, err)
		}
		u.Path = "/" + name
		s.DSN = u.String()
	default:
		s.Kind = KindSQLite
		dir, err := os.MkdirTemp(filepath.Dir(strings.TrimPrefix(dsn, "sqlite:")), name+"_")
		if err != nil {
			return nil, fmt.Errorf("burndown: make a scratch directory: %w", err)
		}
		s.Name, s.DSN = dir, filepath.Join(dir, "bench.db")
	}
	return s, nil
}

// Drop drops the scratch database and all it holds. Close every store open
// on it first: PostgreSQL and MySQL wait for their sessions' locks.
func (s *Scratch) Drop(ctx context.Context) error {
	var err error
	switch s.Kind {
	case KindPostgres:
		err = s.postgresExec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE")
	case KindMySQL:
		err = s.mysqlExec(ctx, "DROP DATABASE IF EXISTS "+s.Name)
	default:
		err = os.RemoveAll(s.Name)
	}
	if err != nil {
		return fmt.Errorf("burndown: drop %s: %w", s.Name, err)
	}
	return nil
}

// postgresExec runs one statement on a connection of its own to the
// database of the DSN the scratch was made from.
func (s *Scratch) postgresExec(ctx context.Context, stmt string) error {
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt)
	return err
}

// mysqlExec runs one statement on a connection of its own to the server of
// the DSN the scratch was made from, in no database.
func (s *Scratch) mysqlExec(ctx context.Context, stmt string) error {
	u, err := url.Parse(s.base)
	if err != nil {
		return err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.TLSConfig = u.Query().Get("tls") // as the store would connect
	cfg.Logger = &mysql.NopLogger{}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
