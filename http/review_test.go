package http_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// reviewPage is the body of GET /v1/reviews.
type reviewPage struct {
	Reviews    []*lapse.Review `json:"reviews"`
	NextCursor *string         `json:"next_cursor"`
}

func (e *env) reviews(t *testing.T, query string) *reviewPage {
	t.Helper()
	var p reviewPage
	e.do("GET", "/v1/reviews?"+query, "").want(t, http.StatusOK).decode(t, &p)
	if p.Reviews == nil {
		t.Fatalf("GET /v1/reviews?%s: reviews is null, want an array", query)
	}
	return &p
}

// reviewPages walks GET /v1/reviews with the filter query, from cursor (""
// for the first page), passing each page's next_cursor to the next, and
// returns the ids listed.
func (e *env) reviewPages(t *testing.T, query, cursor string, limit int) []int64 {
	t.Helper()
	var ids []int64
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("%s by %d: paging does not end", query, limit)
		}
		q := fmt.Sprintf("%s&limit=%d", query, limit)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		p := e.reviews(t, q)
		if len(p.Reviews) > limit {
			t.Fatalf("%s: a page of %d", q, len(p.Reviews))
		}
		for _, r := range p.Reviews {
			ids = append(ids, r.ID)
		}
		if p.NextCursor == nil {
			return ids
		}
		if len(p.Reviews) != limit {
			t.Fatalf("%s: a short page of %d has a next_cursor", q, len(p.Reviews))
		}
		cursor = *p.NextCursor
	}
}

// TestListReviewsPages: GET /v1/reviews pages by an opaque cursor, as GET
// /v1/orders does: every review once, newest first, reviews of one instant
// by descending id, with open=true and without; a review resolved between
// pages of the open ones leaves the rest where they were. A cursor the
// server did not hand out for reviews is refused, naming cursor.
func TestListReviewsPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var orders []*lapse.Order
	for _, no := range []string{"RV-1", "RV-2", "RV-3"} {
		e.do("POST", "/v1/orders", createBody(no, "")).want(t, http.StatusCreated)
		o, err := e.store.OrderGet(ctx, no) // the answer leaves out the id a review names
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, o)
	}
	// Nine reviews at four instants, three at each of two and two at a
	// third; the clock steps back once, so the order of the ids is not the
	// order of the times.
	var all []*lapse.Review
	for i, step := range []time.Duration{time.Minute, 0, 0, time.Minute, 0, -3 * time.Minute, time.Hour, 0, 0} {
		e.clock.Advance(step)
		o := orders[i%len(orders)]
		r, err := e.store.ReviewCreate(ctx, &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: fmt.Sprintf("reason %d", i),
			CreatedAt: e.clock.Now()})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(x, y *lapse.Review) int {
		return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), cmp.Compare(y.ID, x.ID))
	})
	for _, i := range []int{1, 5} {
		e.do("POST", fmt.Sprintf("/v1/reviews/%d/resolve", all[i].ID), `{"note":"handled"}`).want(t, http.StatusOK)
	}
	var every, open []int64
	for i, r := range all {
		every = append(every, r.ID)
		if i != 1 && i != 5 {
			open = append(open, r.ID)
		}
	}
	if p := e.reviews(t, ""); p.NextCursor != nil || len(p.Reviews) != len(all) {
		t.Fatalf("one page of every review: %d reviews, next_cursor %v", len(p.Reviews), p.NextCursor)
	}
	for _, limit := range []int{1, 2, 3, 7, 9, 10} {
		if got := e.reviewPages(t, "", "", limit); !slices.Equal(got, every) {
			t.Errorf("limit %d: pages hold %v, want %v", limit, got, every)
		}
		if got := e.reviewPages(t, "open=true", "", limit); !slices.Equal(got, open) {
			t.Errorf("open=true&limit=%d: pages hold %v, want %v", limit, got, open)
		}
	}

	// The last review of a page of open ones is resolved, and one on the
	// next page: the next page starts where the first ended, without it.
	first := e.reviews(t, "open=true&limit=2")
	if first.NextCursor == nil {
		t.Fatal("no next_cursor after the first two of seven open reviews")
	}
	for _, id := range []int64{open[1], open[3]} {
		e.do("POST", fmt.Sprintf("/v1/reviews/%d/resolve", id), `{"note":"handled"}`).want(t, http.StatusOK)
	}
	rest := e.reviewPages(t, "open=true", *first.NextCursor, 2)
	if want := []int64{open[2], open[4], open[5], open[6]}; !slices.Equal(rest, want) {
		t.Errorf("open pages after resolving = %v, want %v", rest, want)
	}

	orderPage := e.list(t, "limit=1")
	if orderPage.NextCursor == nil {
		t.Fatal("no next_cursor for orders")
	}
	for _, cursor := range []string{
		"not-a-cursor",
		strings.Repeat("A", 23),
		*orderPage.NextCursor, // a position among orders, not reviews
		cursorAt(all[3].CreatedAt.UnixMicro(), all[3].ID), // the orders' layout
		reviewCursorAt(math.MinInt64, 1),
		reviewCursorAt(all[3].CreatedAt.UnixMicro(), 0),
	} {
		p := e.do("GET", "/v1/reviews?cursor="+url.QueryEscape(cursor), "").want(t, http.StatusBadRequest).problem(t)
		if p.Code != lapse.EINVALID || p.Field != "cursor" || !strings.Contains(p.Detail, "next_cursor") {
			t.Errorf("cursor %q: problem %+v, want one naming cursor", cursor, p)
		}
	}
	if got := e.reviewPages(t, "open=true", "", 50); !slices.Equal(got, []int64{open[0], open[2], open[4], open[5], open[6]}) {
		t.Errorf("open reviews after the refused cursors = %v", got)
	}
}

// reviewCursorAt is a cursor of GET /v1/reviews built as the server builds
// one (http/cursor.go), at micros since the epoch and the review id id.
func reviewCursorAt(micros, id int64) string {
	var b [17]byte
	b[0] = 2
	binary.BigEndian.PutUint64(b[1:9], uint64(micros))
	binary.BigEndian.PutUint64(b[9:], uint64(id))
	return base64.RawURLEncoding.EncodeToString(b[:])
}
