// Package testenv gives tests the outside servers and programs they need. A
// test that needs one reads its address or path from an environment variable;
// when the variable is unset the test is skipped with a message, unless
// LAPSE_REQUIRE_SERVICES=1, in which case it fails: CI sets that so that every
// server and program is exercised.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables that name test servers and programs.
const (
	EnvPostgres = "LAPSE_TEST_POSTGRES" // e.g. postgres://postgres@127.0.0.1:5432/test
	EnvNATS     = "LAPSE_TEST_NATS"     // e.g. nats://127.0.0.1:4222 (JetStream enabled)
	EnvRabbitMQ = "LAPSE_TEST_RABBITMQ" // e.g. amqp://guest:guest@127.0.0.1:5672/
	EnvChromium = "LAPSE_TEST_CHROMIUM" // a Chromium (or Chrome) binary for the console's browser tests, e.g. /usr/bin/chromium
	EnvRequire  = "LAPSE_REQUIRE_SERVICES"
)

// Require returns the value of the environment variable env, or skips the test
// (fails it when LAPSE_REQUIRE_SERVICES=1) when it is unset.
func Require(t testing.TB, env, what string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s is required (%s=1) but %s is unset", what, EnvRequire, env)
	}
	t.Skipf("skipping: set %s to run against %s", env, what)
	return ""
}

// PostgresSchema creates a fresh schema in the test PostgreSQL, drops it when
// the test ends, and returns a DSN whose search_path is that schema.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	base := Require(t, EnvPostgres, "PostgreSQL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvPostgres, err)
	}
	defer conn.Close(ctx)
	schema := "lapse_test_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", EnvPostgres, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
