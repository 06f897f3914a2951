package mysql

import (
	"database/sql"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The access records are in apikey.go, operator.go, session.go,
// approval.go, audit.go and close_batch.go.
var _ lapse.AccessStore = (*Store)(nil)

// nullTime is t as stored: NULL when it is zero.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return column.Micros(t)
}

// zeroTime is the time that nullTime kept: zero when NULL.
func zeroTime(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return column.Time(us.Int64)
}

// kept is t as it reads back once stored by nullTime.
func kept(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return column.Time(column.Micros(t))
}

// accessNotFound is an error wrapping lapse.ErrAccessNotFound.
func accessNotFound(format string, args ...any) error {
	return lapse.Refine(lapse.ErrAccessNotFound, format, args...)
}
