package postgres

import (
	"context"
	"fmt"
	"time"
)

// EffectClaim records that consumer handled the event eventID and reports
// whether this is the first time. Of concurrent claims of one pair, one is
// first: the others wait for its transaction and find the row if it
// commits. Used inside Tx with the effect, it makes the effect happen once.
func (s *Store) EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (bool, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO effects (consumer, event_id, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (consumer, event_id) DO NOTHING`, consumer, eventID, at)
	if err != nil {
		return false, fmt.Errorf("postgres: claim effect of %s on event %s: %w", consumer, eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}
