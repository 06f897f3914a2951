package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lapsehq/lapse"
)

// Paging visits every order once when many share a creation time: the
// cursor's id breaks the tie.
func TestOrderListPagesThroughTies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	var ps []*lapse.OrderCreateParams
	for i := range 10 {
		ps = append(ps, newOrder(fmt.Sprintf("TIE-%02d", i), base))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for _, state := range []lapse.State{"", "UNPAID"} {
		seen := map[string]bool{}
		var cur *lapse.OrderCursor
		for {
			page, err := s.OrderList(ctx, &lapse.OrderListParams{State: state, Limit: 3, Before: cur})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page {
				if seen[o.OrderNo] {
					t.Fatalf("state %q: %s listed twice", state, o.OrderNo)
				}
				seen[o.OrderNo] = true
			}
			if len(page) < 3 {
				break
			}
			last := page[len(page)-1]
			cur = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		if len(seen) != 10 {
			t.Errorf("state %q: paging visited %d of 10 orders", state, len(seen))
		}
	}
}
