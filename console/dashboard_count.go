package console

import (
	"context"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// The dashboard's counts, each read with a bound on the rows it reads, so
// that a page costs the database a known amount however much there is. A
// count the bound cut short says so: its cut is the creation time of the
// oldest row it read, and the hours before that are not counted in full.

// dashBound is how many rows of one kind the dashboard reads, and dashPage
// how many at a time where a listing pages.
const (
	dashBound = 10_000
	dashPage  = 1_000
)

// hourCounts is what a count by hour came to: the counts themselves are
// beside it, the i-th for the hour from From + i hours.
type hourCounts struct {
	From time.Time
	N    int64     // in all
	Cut  time.Time // zero unless the bound cut the count short
}

// complete reports whether the hour that starts at start was counted in
// full.
func (h hourCounts) complete(start time.Time) bool { return h.Cut.IsZero() || start.After(h.Cut) }

// hour is the index of the hour at falls in, at most last.
func (h hourCounts) hour(at time.Time, last int) int { return min(int(at.Sub(h.From)/time.Hour), last) }

// dashOrderHours counts the orders created in each of hours hours from
// from, paging through list (newest first) page at a time and reading at
// most bound.
func dashOrderHours(ctx context.Context, list func(context.Context, *lapse.OrderListParams) ([]*lapse.Order, error),
	from time.Time, hours, bound, page int) (per []int64, hc hourCounts, err error) {
	to := from.Add(time.Duration(hours) * time.Hour)
	per, hc = make([]int64, hours), hourCounts{From: from}
	p := &lapse.OrderListParams{CreatedFrom: &from, CreatedTo: &to, Limit: min(page, bound+1)}
	for {
		os, err := list(ctx, p)
		if err != nil {
			return nil, hourCounts{}, err
		}
		for _, o := range os {
			if hc.N == int64(bound) {
				hc.Cut = p.Before.CreatedAt
				return per, hc, nil
			}
			per[hc.hour(o.CreatedAt, hours-1)]++
			hc.N++
			p.Before = &lapse.OrderCursor{CreatedAt: o.CreatedAt, ID: o.ID}
		}
		if len(os) < p.Limit {
			return per, hc, nil
		}
		// The page that reaches the bound reads one more, to see whether
		// there is more.
		p.Limit = min(page, bound-int(hc.N)+1)
	}
}

// dashReviewHours counts, by kind (the index of dashCategory's answer in
// dashCategories), the reviews created in each of hours hours from from,
// open or resolved. Reviews are listed newest first without a cursor: it
// is one read of at most bound (and one more, to see whether there is
// more).
func dashReviewHours(ctx context.Context, list func(context.Context, *lapse.ReviewListParams) ([]*lapse.Review, error),
	from time.Time, hours, bound int) (per [][]int64, hc hourCounts, err error) {
	rs, err := list(ctx, &lapse.ReviewListParams{Limit: bound + 1})
	if err != nil {
		return nil, hourCounts{}, err
	}
	hc = hourCounts{From: from}
	if len(rs) > bound && !rs[bound].CreatedAt.Before(from) {
		rs, hc.Cut = rs[:bound], rs[bound-1].CreatedAt
	}
	per = make([][]int64, hours)
	for i := range per {
		per[i] = make([]int64, len(dashCategories))
	}
	for _, rv := range rs {
		if rv.CreatedAt.Before(from) {
			break
		}
		// A review from ahead of this clock counts in the last hour.
		per[hc.hour(rv.CreatedAt, hours-1)][slices.Index(dashCategories, dashCategory(rv.Reason))]++
		hc.N++
	}
	return per, hc, nil
}

// dashOpenReviews counts the open reviews up to bound; more says there are
// more.
func dashOpenReviews(ctx context.Context, list func(context.Context, *lapse.ReviewListParams) ([]*lapse.Review, error),
	bound int) (n int64, more bool, err error) {
	rs, err := list(ctx, &lapse.ReviewListParams{Open: true, Limit: bound + 1})
	if err != nil {
		return 0, false, err
	}
	return int64(min(len(rs), bound)), len(rs) > bound, nil
}

// dashPayments counts the payments with status up to bound, paging through
// list by id, and adds up their amounts by currency; more says there are
// more.
func dashPayments(ctx context.Context, list func(context.Context, *lapse.PaymentListParams) ([]*lapse.Payment, error),
	status lapse.PaymentStatus, bound, page int) (n int64, sums map[string]int64, more bool, err error) {
	sums = map[string]int64{}
	p := &lapse.PaymentListParams{Status: status, Limit: min(page, bound+1)}
	for {
		ps, err := list(ctx, p)
		if err != nil {
			return 0, nil, false, err
		}
		for _, pay := range ps {
			if n == int64(bound) {
				return n, sums, true, nil
			}
			n++
			sums[pay.Currency] += pay.Amount
			p.AfterID = pay.ID
		}
		if len(ps) < p.Limit {
			return n, sums, false, nil
		}
		p.Limit = min(page, bound-int(n)+1)
	}
}
