package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// StakeCreate inserts st.
func (s *Store) StakeCreate(ctx context.Context, st *lapse.Stake) error {
	err := s.write(ctx, func(w *writeTx) error {
		_, err := w.exec(ctx, `INSERT INTO operator_stakes (operator_id, action, target, count, at) VALUES (?, ?, ?, ?, ?)`,
			st.OperatorID, st.Action, st.Target, st.Count, column.Micros(st.At))
		return err
	})
	if err != nil {
		return fail(err, "stake create of operator %d", st.OperatorID)
	}
	return nil
}

// StakeSum sums the counts of the operator's stakes after since, reading
// operator_stakes_operator_idx.
func (s *Store) StakeSum(ctx context.Context, operatorID int64, since time.Time) (int64, error) {
	var n int64
	err := s.db().QueryRowContext(ctx, `SELECT coalesce(sum(count), 0) FROM operator_stakes WHERE operator_id = ? AND at > ?`,
		operatorID, column.Micros(since)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlite: stake sum of operator %d: %w", operatorID, err)
	}
	return n, nil
}
