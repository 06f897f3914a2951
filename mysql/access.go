package mysql

import (
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The access records are in apikey.go, operator.go, session.go,
// approval.go, audit.go and close_batch.go.
var _ lapse.AccessStore = (*Store)(nil)

// kept is t as it reads back once stored by column.ZeroMicros.
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
