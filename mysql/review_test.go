package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
)

// TestReviewPageIndex checks the plan of a later page of the open queue
// among many open reviews and a few resolved: a range of reviews_open_idx
// that starts at the cursor, read in order, rather than a read of the
// open reviews newer than it or a filesort.
func TestReviewPageIndex(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 5000 {
		ps = append(ps, createParams(fmt.Sprintf("RP-%06d", i), nil, now))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	// Three reviews a microsecond, so that a page ends among ties; one in
	// ten resolved.
	if _, err := s.Exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, created_at, resolved_at)
		SELECT id, order_no, 'test', ? + id DIV 3, IF(id % 10 = 0, ?, NULL) FROM orders`, now.UnixMicro(), now.UnixMicro()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, "ANALYZE TABLE reviews"); err != nil {
		t.Fatal(err)
	}
	var c lapse.ReviewCursor
	var micros int64
	if err := s.QueryRow(ctx, `SELECT created_at, id FROM reviews WHERE resolved_at IS NULL
		ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET 3000`).Scan(&micros, &c.ID); err != nil {
		t.Fatal(err)
	}
	c.CreatedAt = time.UnixMicro(micros)
	q, args := mysql.ReviewListQuery(&lapse.ReviewListParams{Open: true, Before: &c, Limit: 50})
	plan := explain(t, s, q, args...)
	t.Logf("a later page of the open queue:\n%s", plan)
	if !strings.Contains(plan, "type=range ") || !strings.Contains(plan, "key=reviews_open_idx ") || strings.Contains(plan, "filesort") {
		t.Errorf("a later page of the open queue is not a range of reviews_open_idx read in order:\n%s", plan)
	}
}
