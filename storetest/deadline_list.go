package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testOrderDeadlineList pages through deadlines that tie and deadlines that
// differ, with orders that have none (never had one, or closed) in between.
func testOrderDeadlineList(t *testing.T, s lapse.Store) {
	if got, err := s.OrderDeadlineList(ctxT(t), &lapse.OrderDeadlineListParams{Limit: 10}); len(got) != 0 || err != nil {
		t.Errorf("OrderDeadlineList on an empty store = %v, %v", got, err)
	}
	// Created out of deadline order, so that ids and deadlines disagree.
	minutes := []int{5, 1, 3, 1, 5, 1, 2, 3}
	var want []string
	for _, m := range []int{1, 2, 3, 5} {
		// Equal deadlines come in creation order, which is id order.
		for i, mi := range minutes {
			if mi == m {
				want = append(want, fmt.Sprintf("%s+%dm", orderNo("DL", i), m))
			}
		}
	}
	for i, m := range minutes {
		mustCreate(t, s, orderNo("DL", i), base.Add(time.Duration(m)*time.Minute), base)
		if i == 2 {
			p := newOrder("DL-none", base, base)
			p.Order.DeadlineAt = nil
			if _, _, err := s.OrderCreate(ctxT(t), p); err != nil {
				t.Fatal(err)
			}
			closed := mustCreate(t, s, "DL-closed", base.Add(time.Minute), base)
			if _, err := s.OrderTransition(ctxT(t), plan(t, closed, flows.Cancel, base)); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, limit := range []int{1, 2, 3, len(minutes), 100} {
		var got []string
		var after *lapse.OrderDeadline
		for page := 0; ; page++ {
			ds, err := s.OrderDeadlineList(ctxT(t), &lapse.OrderDeadlineListParams{After: after, Limit: limit})
			if err != nil {
				t.Fatalf("limit %d, page %d: %v", limit, page, err)
			}
			if len(ds) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(ds))
			}
			for _, d := range ds {
				o := mustGet(t, s, d.OrderNo)
				if d.ID != o.ID || o.DeadlineAt == nil || !d.DeadlineAt.Equal(*o.DeadlineAt) || d.DeadlineAt.Location() != time.UTC {
					t.Errorf("listed %+v, stored id %d deadline %v", d, o.ID, o.DeadlineAt)
				}
				got = append(got, fmt.Sprintf("%s+%dm", d.OrderNo, d.DeadlineAt.Sub(base)/time.Minute))
			}
			if len(ds) < limit {
				break
			}
			after = &ds[len(ds)-1]
			if page > len(minutes) {
				t.Fatalf("limit %d: paging does not end", limit)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: listed\n%v\nwant\n%v", limit, got, want)
		}
	}

	// After is exclusive, and only its deadline and id count.
	all, err := s.OrderDeadlineList(ctxT(t), &lapse.OrderDeadlineListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.OrderDeadlineList(ctxT(t), &lapse.OrderDeadlineListParams{After: &all[len(all)-1], Limit: 10}); len(got) != 0 {
		t.Errorf("after the last: %v", got)
	}
	mid := lapse.OrderDeadline{ID: all[1].ID, DeadlineAt: all[1].DeadlineAt}
	got, err := s.OrderDeadlineList(ctxT(t), &lapse.OrderDeadlineListParams{After: &mid, Limit: 2})
	if err != nil || len(got) != 2 || got[0].ID != all[2].ID || got[1].ID != all[3].ID {
		t.Errorf("after %+v = %+v, %v; want %+v", mid, got, err, all[2:4])
	}
}
