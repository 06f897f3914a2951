package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestAPIKeyReadPlansOnce checks that the batched read of API keys keeps a
// generic plan on a table that was never analyzed, as api_keys, with its
// few rows, stays: planned anew on every request it cost more than it
// read.
func TestAPIKeyReadPlansOnce(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	openStore(t, dsn, postgres.Config{})
	ctx := context.Background()
	conn := connect(t, dsn)
	for _, p := range []string{"k1", "k2", "k3"} {
		if _, err := conn.Exec(ctx, `INSERT INTO api_keys (prefix, name, scopes, hash, created_at, created_by)
			VALUES ($1, $1, '{orders:write}', '\x00', now(), 'test')`, p); err != nil {
			t.Fatal(err)
		}
	}
	// One key at a time, as a service's requests read theirs; the last
	// reads more, and one that is not there.
	for i := range 10 {
		want := []string{"k2"}
		ask := want
		if i == 9 {
			want = []string{"k1", "k3"}
			ask = append(want, "none")
		}
		rows, err := conn.Query(ctx, postgres.APIKeyGetManySQL, ask)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			v, err := r.Values()
			if err != nil {
				return "", err
			}
			return v[1].(string), nil
		})
		if err != nil || len(got) != len(want) {
			t.Fatalf("read %v: %v, %v", want, got, err)
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
		postgres.APIKeyGetManySQL).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	// PostgreSQL makes five custom plans before it weighs the generic one.
	if generic < 5 || custom > 5 {
		t.Errorf("ten reads: %d on the generic plan, %d custom plans; want the generic plan from the sixth on", generic, custom)
	}
}
