package postgres

import (
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// The access records (lapse.AccessStore) are in apikey.go, operator.go,
// session.go, approval.go, audit.go and close_batch.go.
var _ lapse.AccessStore = (*Store)(nil)

// nullTime is t as a timestamptz argument: NULL when t is zero, so that an
// absent time is absent in SQL too.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timeOf is a nullable timestamptz as read: zero when NULL, UTC otherwise.
func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// limitArg is a list's limit as a LIMIT argument: NULL (no limit) when zero
// or less.
func limitArg(n int) any {
	if n <= 0 {
		return nil
	}
	return n
}

// filter builds the WHERE clause of a list from the filters that are set,
// so that each combination is a statement of its own whose plan can use the
// index of its filters, which a catch-all "col = $1 OR $1 IS NULL" would
// keep it from.
type filter struct {
	conds []string
	args  []any
}

// add adds the condition cond, which ends in an operator, with v as its
// right-hand side.
func (f *filter) add(cond string, v any) { f.conds = append(f.conds, cond+f.arg(v)) }

// arg adds v as an argument and returns its placeholder.
func (f *filter) arg(v any) string {
	f.args = append(f.args, v)
	return "$" + strconv.Itoa(len(f.args))
}

// sql is the WHERE clause, or "" when no filter is set.
func (f *filter) sql() string {
	if len(f.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.conds, " AND ")
}
