package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// StakeCreate inserts st.
func (s *Store) StakeCreate(ctx context.Context, st *lapse.Stake) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO operator_stakes (operator_id, action, target, count, at) VALUES ($1, $2, $3, $4, $5)`,
		st.OperatorID, st.Action, st.Target, st.Count, st.At); err != nil {
		return fmt.Errorf("postgres: create stake of operator %d: %w", st.OperatorID, err)
	}
	return nil
}

// StakeSum sums the counts of the operator's stakes after since, reading
// operator_stakes_operator_idx.
func (s *Store) StakeSum(ctx context.Context, operatorID int64, since time.Time) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT coalesce(sum(count), 0)::bigint FROM operator_stakes WHERE operator_id = $1 AND at > $2`,
		operatorID, since).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: sum stakes of operator %d: %w", operatorID, err)
	}
	return n, nil
}
