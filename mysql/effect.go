package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/internal/column"
)

// EffectClaim records that consumer handled the event eventID, at at, and
// reports whether this is the first time; when it is not, it writes
// nothing. Of concurrent claims of one pair, one is first: the others wait
// for its transaction and find the row if it commits. Used inside Tx with
// the effect, it makes the effect happen once.
func (s *Store) EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (bool, error) {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO effects (consumer, event_id, created_at) VALUES (?, ?, ?)`, consumer, eventID, column.Micros(at))
	})
	if isDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mysql: claim effect of %s on event %s: %w", consumer, eventID, err)
	}
	return true, nil
}
