package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/testenv"
)

// TestBench runs two rounds of the three burn-downs with a tiny N against
// LAPSE_TEST_POSTGRES and checks the tables, the medians and that every
// scratch schema is gone. It times nothing: the figures are only printed.
func TestBench(t *testing.T) {
	dsn := testenv.Require(t, testenv.EnvPostgres, "PostgreSQL")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--db", dsn, "--orders", "2000", "--rounds", "2"}, &out, &errOut); err != nil {
		t.Fatalf("bench: %v\n%s%s", err, out.String(), errOut.String())
	}
	t.Logf("bench:\n%s", out.String())
	report := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`round 1 of 2: burn-down of N = 2000, .* one after the other: river, lapse`),
		regexp.MustCompile(`round 2 of 2: burn-down of N = 2000, .* one after the other: lapse, (pgbench, )?river\n`),
		regexp.MustCompile(`over 2 rounds, each in another order: median \(lowest–highest\)`),
		regexp.MustCompile(`(?m)^river +\d+ jobs/s +\(\d+–\d+, 2 rounds\)`),
		regexp.MustCompile(`(?m)^lapse +\d+ closes/s +\(\d+–\d+, 2 rounds\)`),
		regexp.MustCompile(`(?m)^Lapse ÷ River +\d+\.\d\d +\(\d+\.\d\d–\d+\.\d\d, 2 rounds\)`),
		regexp.MustCompile(`(?m)^river +River v0\.51\.2: 2000 no-op jobs.* \d+ jobs/s +\d+ B/job +\d+\.\d \+ \d+\.\d µs/job`),
		regexp.MustCompile(`(?m)^lapse +Lapse: 2000 due of 10000 orders.* \d+ closes/s +\d+ B/close +\d+\.\d \+ \d+\.\d µs/close`),
		regexp.MustCompile(`(?m)^Lapse ÷ River +\d+\.\d\d$`),
		regexp.MustCompile(`Lapse close lag .*p50 \S+, p99 \S+, p99\.9 \S+, max \S+`),
		regexp.MustCompile(`server: server_version \S+.*shared_buffers`),
	} {
		if !want.MatchString(report) {
			t.Errorf("the report has no match for %s", want)
		}
	}
	_, pgbenchErr := exec.LookPath("pgbench")
	_, psqlErr := exec.LookPath("psql")
	if pgbenchErr == nil && psqlErr == nil {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`round 1 of 2: .*one after the other: river, lapse, pgbench\n`),
			regexp.MustCompile(`round 2 of 2: .*one after the other: lapse, pgbench, river\n`),
			regexp.MustCompile(`(?m)^Lapse ÷ pgbench +\d+\.\d\d +\(\d+\.\d\d–\d+\.\d\d, 2 rounds\)`),
			regexp.MustCompile(`(?m)^pgbench +close\.sql: 2000 orders, 2×1 transactions of 500, 1000 closed +\d+ closes/s +\d+ B/close +(\d+\.\d \+ \d+\.\d µs/close|-)`), // its two transactions may end before a sample
			regexp.MustCompile(`(?m)^Lapse ÷ pgbench +\d+\.\d\d$`),
		} {
			if !want.MatchString(report) {
				t.Errorf("the report has no match for %s", want)
			}
		}
	} else if !strings.Contains(report, "pgbench  not run: ") {
		t.Errorf("pgbench is not on PATH, and the report does not say so")
	}

	schemas := regexp.MustCompile(`(?:river|lapse): scratch schema (\S+)`).FindAllStringSubmatch(errOut.String(), -1)
	if len(schemas) != 4 {
		t.Fatalf("the log names %d scratch schemas, want 4:\n%s", len(schemas), errOut.String())
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, m := range schemas {
		var left bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", m[1]).Scan(&left); err != nil || left {
			t.Errorf("scratch schema %s left: %v %v", m[1], left, err)
		}
	}
}

// TestArguments: -h is no error, and a bad argument is one before
// anything is made.
func TestArguments(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &out, &out); err == nil || !strings.Contains(out.String(), "-orders") {
		t.Errorf("-h: %v\n%s", err, out.String())
	}
	for _, args := range [][]string{{"--db", ""}, {"--db", "mysql://root@host/db"}, {"--db", "postgres://x/y", "--orders", "0"}, {"--db", "postgres://x/y", "extra"},
		{"--db", "postgres://x/y", "--rounds", "0"}, {"--db", "postgres://x/y", "--rounds", "101"}} {
		if err := run(context.Background(), args, &out, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
