package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// StakeCreate inserts st.
func (s *Store) StakeCreate(ctx context.Context, st *lapse.Stake) error {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO operator_stakes (operator_id, action, target, order_count, at) VALUES (?, ?, ?, ?, ?)`,
			st.OperatorID, st.Action, st.Target, st.Count, column.Micros(st.At))
	})
	if err != nil {
		return fmt.Errorf("mysql: create stake of operator %d: %w", st.OperatorID, err)
	}
	return nil
}

// StakeSum sums the counts of the operator's stakes after since, reading
// operator_stakes_operator_idx.
func (s *Store) StakeSum(ctx context.Context, operatorID int64, since time.Time) (int64, error) {
	n, err := scanInt64(s.queryRow(ctx, `SELECT CAST(coalesce(sum(order_count), 0) AS SIGNED) FROM operator_stakes
		WHERE operator_id = ? AND at > ?`, operatorID, column.Micros(since)))
	if err != nil {
		return 0, fmt.Errorf("mysql: sum stakes of operator %d: %w", operatorID, err)
	}
	return n, nil
}
