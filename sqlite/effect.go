package sqlite

import (
	"context"
	"time"

	"github.com/lapsehq/lapse/internal/column"
)

// EffectClaim records that consumer handled the event eventID, at at, and
// reports whether this is the first time; when it is not, it writes
// nothing. Inside Tx the record commits or rolls back with the effect it
// guards.
func (s *Store) EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (first bool, err error) {
	err = s.write(ctx, func(w *writeTx) error {
		res, err := w.tx.ExecContext(ctx, `INSERT INTO effects (consumer, event_id, created_at) VALUES (?, ?, ?)
			ON CONFLICT (consumer, event_id) DO NOTHING`, consumer, eventID, column.Micros(at))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		first = n == 1
		return err
	})
	if err != nil {
		return false, fail(err, "effect claim %s %s", consumer, eventID)
	}
	return first, nil
}
