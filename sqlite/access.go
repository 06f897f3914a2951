package sqlite

import (
	"context"

	"github.com/lapsehq/lapse"
)

var _ lapse.AccessStore = (*Store)(nil)

// updateOne runs an UPDATE of one record and returns notFound when it
// matched none. SQLite counts the rows matched, changed or not.
func updateOne(ctx context.Context, w *writeTx, notFound error, query string, args ...any) error {
	res, err := w.exec(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound
	}
	return nil
}

// nullBytes is b as stored, NULL when nil, so that a nil slice reads back
// nil and an empty one empty.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// sqlLimit is n as a LIMIT: -1, SQLite's none, when n is zero or less.
func sqlLimit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
