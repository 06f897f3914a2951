package testenv

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// EnvMySQL names the test MySQL or MariaDB server, as a URL whose user may
// create and drop databases and users: mysql://root@127.0.0.1:3306/test.
// Tests get a database of their own on it; the URL's database is not used.
const EnvMySQL = "LAPSE_TEST_MYSQL"

// MySQLAdmin returns a pool of at most two connections to the test MySQL
// server as the user of EnvMySQL, in no database, closed when tb ends; it
// skips tb (fails it when LAPSE_REQUIRE_SERVICES=1) when EnvMySQL is unset.
func MySQLAdmin(tb testing.TB) *sql.DB {
	tb.Helper()
	u, err := url.Parse(Require(tb, EnvMySQL, "MySQL"))
	if err != nil || u.Scheme != "mysql" || u.Host == "" {
		tb.Fatalf("%s is not a mysql:// URL", EnvMySQL)
	}
	u.Path = ""
	return MySQLOpen(tb, u.String())
}

// MySQLOpen returns a pool of at most two connections to the database that
// dsn, a mysql:// URL such as MySQLDatabase returns, names (none when its
// path is empty), for a test's own queries; it is closed when tb ends.
func MySQLOpen(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "mysql" || u.Host == "" {
		tb.Fatalf("%q is not a mysql:// URL", dsn)
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
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	cfg.Logger = &mysql.NopLogger{}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// MySQLDatabase creates a fresh database on the test MySQL server, drops it
// when tb ends, and returns the URL of EnvMySQL naming it instead.
func MySQLDatabase(tb testing.TB) string {
	tb.Helper()
	admin := MySQLAdmin(tb)
	name := "lapse_test_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database: %v", err)
	}
	// Registered after MySQLAdmin's, so it runs before the pool closes, and
	// before anything registered earlier; stores opened on the database
	// later are closed first.
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
	})
	u, _ := url.Parse(Require(tb, EnvMySQL, "MySQL"))
	u.Path = "/" + name
	return u.String()
}
