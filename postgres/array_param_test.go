package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestArrayParams: the arrays that the store encodes itself read on the
// server as pgx's encoding of the same values reads, NULLs, empty arrays,
// times before 2000 and 1970 and text beyond ASCII among them, in and
// outside Tx.
func TestArrayParams(t *testing.T) {
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 14, 0, 0, 123456789, time.FixedZone("", 8*3600))
	old, older := time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 1000, time.UTC)
	vs := []any{
		[]int64{1, -1, 1 << 62, 0}, []int64{},
		[]string{"", "a", "ünï \"quoted\" \\ {,}", "NULL"}, []string{},
		[][16]byte{{1, 2, 3}, {0xff, 0xfe}},
		[]time.Time{at, old, older}, []*time.Time{&at, nil, &old, nil},
		[][]byte{[]byte(`{"a": [1, "x"]}`), nil, []byte(`"s"`)},
	}
	check := func(name string, s *postgres.Store) {
		t.Helper()
		sql, got, err := s.ArrayParamsEcho(ctx, vs...)
		if err != nil {
			t.Fatalf("%s: ArrayParamsEcho: %v", name, err)
		}
		want := make([]string, len(vs))
		ptrs := make([]any, len(vs))
		for i := range want {
			ptrs[i] = &want[i]
		}
		if err := connect(t, dsn).QueryRow(ctx, sql, vs...).Scan(ptrs...); err != nil {
			t.Fatalf("%s: pgx: %v", name, err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: parameter %d reads %s, pgx's %s", name, i+1, got[i], want[i])
			}
		}
	}
	check("outside Tx", s)
	if err := s.Tx(ctx, func(tx lapse.Store) error { check("in Tx", tx.(*postgres.Store)); return nil }); err != nil {
		t.Fatal(err)
	}
}
