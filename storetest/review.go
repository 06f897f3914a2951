package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// addReview writes an open review of o, of the delivery deliveryID (0:
// none), with reason, created at at, the way a payment sent to review does,
// and returns it as stored.
func addReview(t *testing.T, s lapse.Store, o *lapse.Order, deliveryID int64, reason string, at time.Time) *lapse.Review {
	t.Helper()
	p := newPayment(o, "txn-"+reason, at)
	p.Payment.Status = lapse.PaymentReview
	p.Review = &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: reason, DeliveryID: deliveryID, CreatedAt: at}
	if _, created, err := s.PaymentCreate(ctxT(t), p); err != nil || !created {
		t.Fatalf("PaymentCreate(%s) = created %v, %v", reason, created, err)
	}
	rs, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Reason == reason {
			return r
		}
	}
	t.Fatalf("review %s not listed: %+v", reason, rs)
	return nil
}

// reviewIDs returns the ids of rs, in the order given.
func reviewIDs(rs []*lapse.Review) []int64 {
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

// checkResolved fails unless every review of rs is resolved at at (as kept)
// by by with note, and is so when read again.
func checkResolved(t *testing.T, s lapse.Store, rs []*lapse.Review, at time.Time, by, note string) {
	t.Helper()
	for _, r := range rs {
		if r.ResolvedAt == nil || !r.ResolvedAt.Equal(lapse.Truncate(at)) || r.ResolvedAt.Location() != time.UTC || r.ResolvedBy != by || r.Note != note {
			t.Errorf("review %d = resolved at %v by %q with note %q; want %v, %q, %q", r.ID, r.ResolvedAt, r.ResolvedBy, r.Note, lapse.Truncate(at), by, note)
		}
		got, err := s.ReviewGet(ctxT(t), r.ID)
		if err != nil || fmt.Sprint(*got) != fmt.Sprint(*r) {
			t.Errorf("ReviewGet(%d) = %+v, %v; want %+v", r.ID, got, err, r)
		}
	}
}

// testReviewResolve resolves reviews by id, by delivery and by order: only
// open ones, each once, and what is resolved stays as it was resolved.
func testReviewResolve(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := createWithSubs(t, s, "RV-1", base, "a", "b")
	other := mustCreate(t, s, "RV-2", base.Add(time.Hour), base)
	ds, err := s.DeliveryList(ctx, o.ID)
	if err != nil || len(ds) != 2 {
		t.Fatalf("DeliveryList = %d, %v", len(ds), err)
	}
	da, db := ds[0].ID, ds[1].ID
	r1 := addReview(t, s, o, da, "a died", base.Add(1*time.Minute))
	r2 := addReview(t, s, o, da, "a died again", base.Add(2*time.Minute))
	r3 := addReview(t, s, o, db, "b died", base.Add(3*time.Minute))
	r4 := addReview(t, s, o, 0, "amount differs", base.Add(4*time.Minute))
	r5 := addReview(t, s, other, 0, "merchant differs", base.Add(5*time.Minute))

	got, err := s.ReviewGet(ctx, r1.ID)
	if err != nil || got.ID != r1.ID || got.OrderID != o.ID || got.OrderNo != "RV-1" || got.DeliveryID != da || got.Reason != "a died" ||
		!got.CreatedAt.Equal(base.Add(time.Minute)) || got.ResolvedAt != nil || got.ResolvedBy != "" || got.Note != "" {
		t.Errorf("ReviewGet(%d) = %+v, %v", r1.ID, got, err)
	}
	if _, err := s.ReviewGet(ctx, r5.ID+1000); !errors.Is(err, lapse.ErrReviewNotFound) || lapse.ErrorCode(err) != lapse.ENOTFOUND {
		t.Errorf("ReviewGet(missing) = %v, want ErrReviewNotFound", err)
	}

	// By id: once, then a conflict that says when and by whom.
	at := base.Add(10*time.Minute + 999*time.Nanosecond)
	rs, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: r4.ID, At: at, By: "operator:alice", Note: "refunded by hand"})
	if err != nil || len(rs) != 1 || rs[0].ID != r4.ID || rs[0].Reason != r4.Reason || !rs[0].CreatedAt.Equal(r4.CreatedAt) {
		t.Fatalf("ReviewResolve(id %d) = %+v, %v", r4.ID, rs, err)
	}
	checkResolved(t, s, rs, at, "operator:alice", "refunded by hand")
	_, err = s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: r4.ID, At: at.Add(time.Minute), By: "operator:bob", Note: "me too"})
	if !errors.Is(err, lapse.ErrReviewResolved) || lapse.ErrorCode(err) != lapse.ECONFLICT ||
		!strings.Contains(err.Error(), "already resolved at "+lapse.Truncate(at).Format(time.RFC3339Nano)+" by operator:alice") {
		t.Errorf("resolving twice = %v, want ErrReviewResolved naming the first resolution", err)
	}
	checkResolved(t, s, rs, at, "operator:alice", "refunded by hand") // unchanged
	if _, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: r5.ID + 1000, At: at, By: "operator:bob"}); !errors.Is(err, lapse.ErrReviewNotFound) {
		t.Errorf("resolving a missing review = %v, want ErrReviewNotFound", err)
	}

	// By delivery: its open ones, by id; then none, which is no error.
	at2 := at.Add(time.Minute)
	rs, err = s.ReviewResolve(ctx, &lapse.ReviewResolveParams{DeliveryID: da, At: at2, By: "api", Note: "retried by api"})
	if err != nil || fmt.Sprint(reviewIDs(rs)) != fmt.Sprint([]int64{r1.ID, r2.ID}) {
		t.Fatalf("ReviewResolve(delivery %d) = %v, %v; want %v", da, reviewIDs(rs), err, []int64{r1.ID, r2.ID})
	}
	checkResolved(t, s, rs, at2, "api", "retried by api")
	for _, p := range []lapse.ReviewResolveParams{
		{DeliveryID: da, At: at2, By: "api"},
		{DeliveryID: ds[1].ID + 1000, At: at2, By: "api"},
		{OrderID: other.ID + 1000, At: at2, By: "api"},
	} {
		if rs, err := s.ReviewResolve(ctx, &p); err != nil || len(rs) != 0 {
			t.Errorf("ReviewResolve(%+v) with none open = %+v, %v; want none, no error", p, rs, err)
		}
	}

	// By order: what is still open of it, and nothing of another order.
	at3 := at2.Add(time.Minute)
	rs, err = s.ReviewResolve(ctx, &lapse.ReviewResolveParams{OrderID: o.ID, At: at3, By: "operator:carol", Note: "settled"})
	if err != nil || fmt.Sprint(reviewIDs(rs)) != fmt.Sprint([]int64{r3.ID}) {
		t.Fatalf("ReviewResolve(order %d) = %v, %v; want %v", o.ID, reviewIDs(rs), err, []int64{r3.ID})
	}
	checkResolved(t, s, rs, at3, "operator:carol", "settled")
	if rs, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{OrderID: o.ID, At: at3, By: "operator:carol"}); err != nil || len(rs) != 0 {
		t.Errorf("resolving an order's reviews again = %+v, %v; want none", rs, err)
	}
	all, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID})
	if err != nil || len(all) != 4 {
		t.Fatalf("ReviewList = %d, %v", len(all), err)
	}
	for _, r := range all {
		want := map[int64]string{r1.ID: "api", r2.ID: "api", r3.ID: "operator:carol", r4.ID: "operator:alice"}[r.ID]
		if r.ResolvedBy != want || r.ResolvedAt == nil {
			t.Errorf("review %d resolved by %q at %v, want %q", r.ID, r.ResolvedBy, r.ResolvedAt, want)
		}
	}
	open, err := s.ReviewList(ctx, &lapse.ReviewListParams{Open: true})
	if err != nil || fmt.Sprint(reviewIDs(open)) != fmt.Sprint([]int64{r5.ID}) {
		t.Errorf("open reviews = %v, %v; want only %d", reviewIDs(open), err, r5.ID)
	}
}

// testReviewList checks the filters of ReviewList, Since among them: at or
// after, to the microsecond.
func testReviewList(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	a := mustCreate(t, s, "RL-1", base.Add(time.Hour), base)
	b := mustCreate(t, s, "RL-2", base.Add(time.Hour), base)
	var rs []*lapse.Review
	for i, o := range []*lapse.Order{a, b, a, b} {
		rs = append(rs, addReview(t, s, o, 0, fmt.Sprintf("r%d", i), base.Add(time.Duration(i)*time.Minute)))
	}
	if _, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: rs[2].ID, At: base.Add(time.Hour), By: "api"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    lapse.ReviewListParams
		want []*lapse.Review // newest first
	}{
		{lapse.ReviewListParams{}, []*lapse.Review{rs[3], rs[2], rs[1], rs[0]}},
		{lapse.ReviewListParams{Open: true}, []*lapse.Review{rs[3], rs[1], rs[0]}},
		{lapse.ReviewListParams{OrderID: a.ID}, []*lapse.Review{rs[2], rs[0]}},
		{lapse.ReviewListParams{Since: base.Add(time.Minute)}, []*lapse.Review{rs[3], rs[2], rs[1]}},
		{lapse.ReviewListParams{Since: base.Add(time.Minute + time.Microsecond)}, []*lapse.Review{rs[3], rs[2]}},
		{lapse.ReviewListParams{Since: base.Add(time.Minute).In(time.FixedZone("UTC+8", 8*60*60))}, []*lapse.Review{rs[3], rs[2], rs[1]}},
		{lapse.ReviewListParams{Since: base.Add(time.Minute), Open: true}, []*lapse.Review{rs[3], rs[1]}},
		{lapse.ReviewListParams{Since: base.Add(time.Minute), Open: true, OrderID: b.ID, Limit: 1}, []*lapse.Review{rs[3]}},
		{lapse.ReviewListParams{Since: base.Add(time.Hour)}, nil},
	} {
		got, err := s.ReviewList(ctx, &c.p)
		if err != nil || fmt.Sprint(reviewIDs(got)) != fmt.Sprint(reviewIDs(c.want)) {
			t.Errorf("ReviewList(%+v) = %v, %v; want %v", c.p, reviewIDs(got), err, reviewIDs(c.want))
		}
	}
}

// testReviewListPaging pages through reviews with Before, a few at a time:
// every review that matches is listed once, newest first, and reviews of
// one microsecond (several at each of three times, written out of time
// order so that ids alone do not sort them) by descending id; with each
// filter, and while reviews are resolved between pages of the open ones.
func testReviewListPaging(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	a := mustCreate(t, s, "RP-1", base.Add(time.Hour), base)
	b := mustCreate(t, s, "RP-2", base.Add(time.Hour), base)
	var all []*lapse.Review
	for i, m := range []int{3, 1, 5, 1, 3, 0, 3, 1, 4, 5, 3, 2, 5} {
		o := a
		if i%3 == 1 {
			o = b
		}
		all = append(all, addReview(t, s, o, 0, fmt.Sprintf("p%02d", i), base.Add(time.Duration(m)*time.Minute)))
	}
	resolved := map[int64]bool{}
	for i, r := range all {
		if i%4 == 2 {
			if _, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: r.ID, At: base.Add(time.Hour), By: "api"}); err != nil {
				t.Fatal(err)
			}
			resolved[r.ID] = true
		}
	}
	slices.SortFunc(all, func(x, y *lapse.Review) int {
		return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), cmp.Compare(y.ID, x.ID))
	})
	// want lists the ids of the reviews that match, newest first.
	want := func(match func(r *lapse.Review, open bool) bool) []int64 {
		var ids []int64
		for _, r := range all {
			if match(r, !resolved[r.ID]) {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	// pages lists what paging with p, each page from the last review of
	// the one before, finds.
	pages := func(p lapse.ReviewListParams) []int64 {
		t.Helper()
		var got []int64
		for n := 0; ; n++ {
			if n > len(all) {
				t.Fatalf("paging %+v does not end", p)
			}
			rs, err := s.ReviewList(ctx, &p)
			if err != nil || len(rs) > p.Limit {
				t.Fatalf("ReviewList(%+v) = %d reviews, %v", p, len(rs), err)
			}
			got = append(got, reviewIDs(rs)...)
			if len(rs) < p.Limit {
				return got
			}
			last := rs[len(rs)-1]
			p.Before = &lapse.ReviewCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
	}
	since := base.Add(time.Minute)
	for _, c := range []struct {
		name  string
		p     lapse.ReviewListParams
		match func(r *lapse.Review, open bool) bool
	}{
		{"all", lapse.ReviewListParams{}, func(*lapse.Review, bool) bool { return true }},
		{"open", lapse.ReviewListParams{Open: true}, func(_ *lapse.Review, open bool) bool { return open }},
		{"of an order", lapse.ReviewListParams{OrderID: a.ID}, func(r *lapse.Review, _ bool) bool { return r.OrderID == a.ID }},
		{"open of an order", lapse.ReviewListParams{OrderID: b.ID, Open: true}, func(r *lapse.Review, open bool) bool { return open && r.OrderID == b.ID }},
		{"since", lapse.ReviewListParams{Since: since, Open: true}, func(r *lapse.Review, open bool) bool { return open && !r.CreatedAt.Before(since) }},
	} {
		w := want(c.match)
		if len(w) < 3 {
			t.Fatalf("%s: %d reviews match, too few to page", c.name, len(w))
		}
		for _, limit := range []int{1, 2, 3, 5, len(w), len(w) + 1} {
			p := c.p
			p.Limit = limit
			if got := pages(p); !slices.Equal(got, w) {
				t.Errorf("%s by %d: pages hold %v, want %v", c.name, limit, got, w)
			}
		}
	}

	// A position is a time and an id, in any zone, that need not be a
	// review's: the reviews of its time with a lower id come first.
	w := want(func(*lapse.Review, bool) bool { return true })
	at := base.Add(3 * time.Minute).In(time.FixedZone("UTC+8", 8*60*60))
	var tie []int64
	for _, r := range all {
		if r.CreatedAt.Equal(at) {
			tie = append(tie, r.ID)
		}
	}
	mid := slices.Max(tie)
	for _, c := range []struct {
		before lapse.ReviewCursor
		want   []int64
	}{
		{lapse.ReviewCursor{CreatedAt: at, ID: mid}, w[slices.Index(w, mid)+1:]},
		{lapse.ReviewCursor{CreatedAt: at, ID: math.MaxInt64}, w[slices.Index(w, mid):]},
		{lapse.ReviewCursor{CreatedAt: at, ID: 1}, w[slices.Index(w, slices.Min(tie))+1:]},
		{lapse.ReviewCursor{CreatedAt: base, ID: 1}, nil},
	} {
		got, err := s.ReviewList(ctx, &lapse.ReviewListParams{Before: &c.before})
		if err != nil || !slices.Equal(reviewIDs(got), c.want) {
			t.Errorf("ReviewList(Before %v, %d) = %v, %v; want %v", c.before.CreatedAt, c.before.ID, reviewIDs(got), err, c.want)
		}
	}

	// Resolving reviews between pages of the open ones moves nothing: the
	// last one listed still marks where the next page starts, and one not
	// yet listed is left out.
	w = want(func(_ *lapse.Review, open bool) bool { return open })
	first, err := s.ReviewList(ctx, &lapse.ReviewListParams{Open: true, Limit: 3})
	if err != nil || !slices.Equal(reviewIDs(first), w[:3]) {
		t.Fatalf("first page = %v, %v; want %v", reviewIDs(first), err, w[:3])
	}
	for _, id := range []int64{w[2], w[4]} {
		if _, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: id, At: base.Add(2 * time.Hour), By: "api"}); err != nil {
			t.Fatal(err)
		}
	}
	last := first[len(first)-1]
	got := pages(lapse.ReviewListParams{Open: true, Limit: 2, Before: &lapse.ReviewCursor{CreatedAt: last.CreatedAt, ID: last.ID}})
	if rest := slices.Delete(slices.Clone(w[3:]), 1, 2); !slices.Equal(got, rest) {
		t.Errorf("the open pages after resolving = %v, want %v", got, rest)
	}
}

// testReviewNote checks that notes and names come back byte for byte: other
// scripts, newlines, spaces at either end, a note of MaxNoteLen bytes.
func testReviewNote(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "RN-1", base.Add(time.Hour), base)
	long := strings.Repeat("核", lapse.MaxNoteLen/3) + strings.Repeat("x", lapse.MaxNoteLen%3)
	for i, c := range []struct{ by, note string }{
		{"operator:王小明", "已人工退款，客户已确认。\n第二行：订单号 RN-1"},
		{"operator:alice", "  spaces kept  \n\n"},
		{"key:ops", "emoji 🙂 and ñ, ü, ß; quotes ' \" \\ %_"},
		{"operator:bob", long},
	} {
		r := addReview(t, s, o, 0, fmt.Sprintf("note-%d", i), base.Add(time.Duration(i)*time.Second))
		p := &lapse.ReviewResolveParams{ID: r.ID, At: base.Add(time.Hour), By: c.by, Note: c.note}
		if err := p.Validate(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		rs, err := s.ReviewResolve(ctxT(t), p)
		if err != nil || len(rs) != 1 {
			t.Fatalf("ReviewResolve(%d) = %+v, %v", i, rs, err)
		}
		checkResolved(t, s, rs, p.At, c.by, c.note)
		listed, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID, Limit: 1})
		if err != nil || len(listed) != 1 || listed[0].Note != c.note || listed[0].ResolvedBy != c.by {
			t.Errorf("ReviewList after note %d = %+v, %v", i, listed, err)
		}
	}
	if len(long) != lapse.MaxNoteLen {
		t.Fatalf("the long note is %d bytes", len(long))
	}
}

// testReviewResolveConcurrent races resolvers of one review, by its id, its
// delivery and its order: exactly one resolves it, the others by id find it
// resolved, and the rest find nothing open. Then resolvers of one order's
// many reviews: each is resolved by one of them.
func testReviewResolveConcurrent(t *testing.T, s lapse.Store) {
	o := createWithSubs(t, s, "RC-1", base, "a")
	ds, err := s.DeliveryList(ctxT(t), o.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("DeliveryList = %d, %v", len(ds), err)
	}
	r := addReview(t, s, o, ds[0].ID, "a died", base)
	const n = 9
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
	)
	for i := range n {
		wg.Go(func() {
			by := fmt.Sprintf("operator:%d", i)
			p := &lapse.ReviewResolveParams{At: base.Add(time.Minute), By: by, Note: "note of " + by}
			switch i % 3 {
			case 0:
				p.ID = r.ID
			case 1:
				p.DeliveryID = ds[0].ID
			default:
				p.OrderID = o.ID
			}
			rs, err := s.ReviewResolve(ctxT(t), p)
			switch {
			case err == nil && len(rs) == 1 && rs[0].ID == r.ID && rs[0].ResolvedBy == by:
				mu.Lock()
				winners = append(winners, by)
				mu.Unlock()
			case err == nil && len(rs) == 0 && p.ID == 0:
			case errors.Is(err, lapse.ErrReviewResolved) && p.ID != 0:
			default:
				t.Errorf("resolver %d = %+v, %v", i, rs, err)
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("resolved by %v, want exactly one", winners)
	}
	got, err := s.ReviewGet(ctxT(t), r.ID)
	if err != nil || got.ResolvedBy != winners[0] || got.Note != "note of "+winners[0] {
		t.Errorf("review = %+v, %v; want resolved by %s", got, err, winners[0])
	}

	o2 := mustCreate(t, s, "RC-2", base.Add(time.Hour), base)
	want := map[int64]bool{}
	for i := range 6 {
		want[addReview(t, s, o2, 0, fmt.Sprintf("rc2-%d", i), base.Add(time.Duration(i)*time.Second)).ID] = true
	}
	seen := map[int64]int{}
	for i := range 4 {
		wg.Go(func() {
			rs, err := s.ReviewResolve(ctxT(t), &lapse.ReviewResolveParams{OrderID: o2.ID, At: base.Add(time.Minute), By: fmt.Sprintf("r%d", i)})
			if err != nil {
				t.Errorf("resolver %d: %v", i, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rs {
				seen[r.ID]++
			}
		})
	}
	wg.Wait()
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("review %d was resolved %d times", id, seen[id])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("resolved %v, want %v", seen, want)
	}
}

// testReviewCreate creates reviews that no other change carries: open, as
// given, each with its own id, and found by the order's list.
func testReviewCreate(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := mustCreate(t, s, "RC-1", base.Add(time.Hour), base)
	at := base.Add(time.Minute + 999*time.Nanosecond)
	r1, err := s.ReviewCreate(ctx, &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "a callback Lapse cannot read", CreatedAt: at})
	if err != nil || r1.ID == 0 || r1.OrderID != o.ID || r1.OrderNo != o.OrderNo || r1.Reason != "a callback Lapse cannot read" ||
		!r1.CreatedAt.Equal(lapse.Truncate(at)) || r1.ResolvedAt != nil || r1.DeliveryID != 0 || r1.OrderRefundID != 0 {
		t.Fatalf("ReviewCreate = %+v, %v", r1, err)
	}
	r2, err := s.ReviewCreate(ctx, &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "another", CreatedAt: at.Add(time.Second)})
	if err != nil || r2.ID == r1.ID {
		t.Fatalf("second ReviewCreate = %+v, %v", r2, err)
	}
	// The same thing said again while r1 is open is r1.
	again, err := s.ReviewCreate(ctx, &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "a callback Lapse cannot read", CreatedAt: at.Add(time.Hour)})
	if err != nil || fmt.Sprint(*again) != fmt.Sprint(*r1) {
		t.Fatalf("ReviewCreate of r1's reason again = %+v, %v; want r1 %+v", again, err, r1)
	}
	rs, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || fmt.Sprint(reviewIDs(rs)) != fmt.Sprint([]int64{r2.ID, r1.ID}) {
		t.Errorf("open reviews of RC-1 = %v, %v; want %d and %d, newest first", reviewIDs(rs), err, r2.ID, r1.ID)
	}
	if got, err := s.ReviewGet(ctx, r1.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(*r1) {
		t.Errorf("ReviewGet = %+v, %v; want %+v", got, err, r1)
	}
	// Reasons are compared byte for byte: one that differs from another by
	// a trailing blank or a letter's case is another thing said, which is
	// its own review, and says so again as that one.
	o2 := mustCreate(t, s, "RC-2", base.Add(time.Hour), base)
	byReason := map[string]int64{}
	for i, reason := range []string{"said", "said ", "Said", "said  "} {
		for again := range 2 {
			got, err := s.ReviewCreate(ctx, &lapse.Review{OrderID: o2.ID, OrderNo: o2.OrderNo, Reason: reason,
				CreatedAt: at.Add(time.Duration(2*i+again) * time.Second)})
			if err != nil || got.Reason != reason || (again == 1 && got.ID != byReason[reason]) {
				t.Fatalf("ReviewCreate(%q), time %d = %+v, %v; want a review of that reason, the same both times", reason, again+1, got, err)
			}
			byReason[reason] = got.ID
		}
	}
	if rs, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o2.ID, Open: true}); err != nil || len(rs) != len(byReason) {
		t.Errorf("open reviews of RC-2 = %v, %v; want %d, one per reason", reviewIDs(rs), err, len(byReason))
	}
}

// reviewSubjects adds to o what a review may be written with: member u1,
// pending, and the payment txn, in review.
func reviewSubjects(t *testing.T, s lapse.Store, o *lapse.Order, txn string) (*lapse.GroupMember, *lapse.Payment) {
	t.Helper()
	m, _, err := s.GroupMemberAdd(ctxT(t), newMember(o, "u1"))
	if err != nil {
		t.Fatal(err)
	}
	p := newPayment(o, txn, base.Add(time.Minute))
	p.Payment.Status = lapse.PaymentReview
	pay, _, err := s.PaymentCreate(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	return m, pay
}

// testReviewOnce writes reviews with the changes that carry them: an open
// review is one per order, delivery and reason, the change going ahead
// without a second; another reason, delivery or order is another review,
// and once the review is resolved the same reason opens a new one.
func testReviewOnce(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := createWithSubs(t, s, "RO-1", base, "refund")
	other := mustCreate(t, s, "RO-2", base.Add(time.Hour), base)
	ds, err := s.DeliveryList(ctx, o.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("DeliveryList = %d, %v", len(ds), err)
	}
	m, pay := reviewSubjects(t, s, o, "txn-ro")
	n := 0
	review := func(o *lapse.Order, deliveryID int64, reason string) *lapse.Review {
		n++
		return &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, DeliveryID: deliveryID, Reason: reason, CreatedAt: base.Add(time.Duration(n) * time.Minute)}
	}
	touchMember := func(r *lapse.Review) {
		t.Helper()
		got, err := s.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: m.ID, From: lapse.ChargePending, To: lapse.ChargePending,
			Error: r.Reason, At: r.CreatedAt, Review: r})
		if err != nil || got.LastError != r.Reason || !got.UpdatedAt.Equal(r.CreatedAt) {
			t.Fatalf("GroupMemberUpdate with review %q = %s, %v; want the change made", r.Reason, memberString(got), err)
		}
	}
	touchPayment := func(r *lapse.Review) {
		t.Helper()
		got, err := s.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: lapse.PaymentReview, To: lapse.PaymentReview,
			Reason: r.Reason, At: r.CreatedAt, Review: r})
		if err != nil || got.Reason != r.Reason || !got.UpdatedAt.Equal(r.CreatedAt) {
			t.Fatalf("PaymentUpdate with review %q = %+v, %v; want the change made", r.Reason, got, err)
		}
	}
	touchMember(review(o, 0, "said once"))
	touchMember(review(o, 0, "said once"))
	touchPayment(review(o, 0, "said once"))
	touchPayment(review(o, ds[0].ID, "said once")) // of a delivery: another subject
	touchPayment(review(other, 0, "said once"))    // of another order
	touchMember(review(o, 0, "said twice"))
	if _, created, err := s.PaymentCreate(ctx, func() *lapse.PaymentCreateParams {
		p := newPayment(o, "txn-ro-2", base.Add(time.Hour))
		p.Payment.Status, p.Review = lapse.PaymentReview, review(o, 0, "said twice")
		return p
	}()); err != nil || !created {
		t.Fatalf("PaymentCreate with a review said already = created %v, %v; want the payment created", created, err)
	}
	count := func(o *lapse.Order, open bool) map[string]int {
		t.Helper()
		rs, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: open})
		if err != nil {
			t.Fatal(err)
		}
		c := map[string]int{}
		for _, r := range rs {
			c[fmt.Sprintf("%s/%t", r.Reason, r.DeliveryID != 0)]++
		}
		return c
	}
	if got, want := count(o, true), map[string]int{"said once/false": 1, "said once/true": 1, "said twice/false": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("open reviews of RO-1 = %v; want %v", got, want)
	}
	if got := count(other, true); got["said once/false"] != 1 || len(got) != 1 {
		t.Errorf("open reviews of RO-2 = %v; want one", got)
	}
	// Resolved, the same reason is a new review.
	if _, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{OrderID: o.ID, At: base.Add(2 * time.Hour), By: "operator:alice"}); err != nil {
		t.Fatal(err)
	}
	touchMember(review(o, 0, "said once"))
	touchMember(review(o, 0, "said once"))
	if got := count(o, true); got["said once/false"] != 1 || len(got) != 1 {
		t.Errorf("open reviews of RO-1 after resolving = %v; want one, said once", got)
	}
	if got := count(o, false); got["said once/false"] != 2 || got["said twice/false"] != 1 {
		t.Errorf("reviews of RO-1 after resolving = %v; want said once twice (one resolved), said twice once", got)
	}
}

// testReviewOnceConcurrent writes one review many times at once, with
// touches of one member, of one payment, and with new payments each
// (which share no row): one review is open, and every change is made.
func testReviewOnceConcurrent(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := mustCreate(t, s, "ROC-1", base.Add(time.Hour), base)
	m, pay := reviewSubjects(t, s, o, "txn-roc")
	const n = 12
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 * n {
		at := base.Add(time.Duration(i+2) * time.Minute)
		wg.Go(func() {
			<-start
			var err error
			switch i % 3 {
			case 0:
				_, err = s.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: m.ID, From: lapse.ChargePending, To: lapse.ChargePending,
					At: at, Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "member said again", CreatedAt: at}})
			case 1:
				_, err = s.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: lapse.PaymentReview, To: lapse.PaymentReview,
					At: at, Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "payment said again", CreatedAt: at}})
			default:
				p := newPayment(o, fmt.Sprintf("txn-roc-%d", i), at)
				p.Payment.Status = lapse.PaymentReview
				p.Review = &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "captured again", CreatedAt: at}
				var created bool
				if _, created, err = s.PaymentCreate(ctx, p); err == nil && !created {
					err = fmt.Errorf("payment %s not created", p.Payment.TxnID)
				}
			}
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	rs, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]int{}
	for _, r := range rs {
		c[r.Reason]++
	}
	if want := map[string]int{"member said again": 1, "payment said again": 1, "captured again": 1}; fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("reviews of ROC-1 = %v; want %v", c, want)
	}
	if pays, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID}); err != nil || len(pays) != n+1 {
		t.Errorf("payments of ROC-1 = %d, %v; want %d", len(pays), err, n+1)
	}
}

// RunReviewOnceUpgrade checks the migration that makes an open review one
// per order, delivery and reason, on a store s whose schema is the one
// before it. It creates an order through s and has insert write its reviews
// as an earlier Lapse could (open duplicates among them, resolved ones with
// ResolvedAt and ResolvedBy set, one of a delivery), then runs migrate: the first of each open set stays
// open, the others are resolved by the migration, naming it, and the
// resolved ones are as they were. A reason that differs from another by a
// trailing blank or a letter's case is a reason of its own, as the key the
// migration makes says (MariaDB's PAD SPACE collation would take "said
// once " for "said once"), and stays open. Writing a review said already
// then writes none.
func RunReviewOnceUpgrade(t *testing.T, s lapse.Store, insert func(r *lapse.Review), migrate func() error) {
	t.Helper()
	ctx := ctxT(t)
	o := mustCreate(t, s, "RU-1", base.Add(time.Hour), base)
	rows := []struct {
		reason   string
		delivery int64
		resolved bool
	}{
		{"said thrice", 0, false}, {"said thrice", 0, true}, {"said thrice", 0, false}, {"said thrice", 0, false},
		{"said thrice", 7, false}, {"said thrice", 7, false}, {"said once", 0, false},
		{"said once ", 0, false}, {"Said once", 0, false},
	}
	for i, r := range rows {
		rv := &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: r.reason, DeliveryID: r.delivery,
			CreatedAt: base.Add(time.Duration(i) * time.Minute)}
		if r.resolved {
			rv.ResolvedAt, rv.ResolvedBy = &rv.CreatedAt, "operator:alice"
		}
		insert(rv)
	}
	before, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID})
	if err != nil || len(before) != len(rows) {
		t.Fatalf("reviews before the upgrade = %d, %v; want %d", len(before), err, len(rows))
	}
	if err := migrate(); err != nil {
		t.Fatal(err)
	}
	after, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID})
	if err != nil || len(after) != len(rows) {
		t.Fatalf("reviews after the upgrade = %d, %v; want all %d", len(after), err, len(rows))
	}
	// Newest first: the rows as inserted, the last first.
	ids := reviewIDs(after)
	keep := map[int]int{2: 0, 3: 0, 5: 4} // a duplicate → the review it repeats
	for i, r := range after {
		n := len(rows) - 1 - i
		was := before[i]
		switch k, dup := keep[n]; {
		case dup:
			if r.ResolvedAt == nil || !strings.HasPrefix(r.ResolvedBy, "lapse migration") ||
				r.Note != fmt.Sprintf("the same as review %d, which stays open", ids[len(rows)-1-k]) {
				t.Errorf("duplicate review %d (%s) after the upgrade = %+v; want resolved by the migration, naming review %d", r.ID, r.Reason, r, ids[len(rows)-1-k])
			}
		case fmt.Sprint(*r) != fmt.Sprint(*was):
			t.Errorf("review %d after the upgrade = %+v; want it as it was, %+v", r.ID, r, was)
		}
	}
	p := newPayment(o, "txn-ru", base.Add(time.Hour))
	p.Payment.Status = lapse.PaymentReview
	p.Review = &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "said thrice", CreatedAt: base.Add(time.Hour)}
	if _, created, err := s.PaymentCreate(ctx, p); err != nil || !created {
		t.Fatalf("PaymentCreate after the upgrade = %v, %v", created, err)
	}
	if open, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true}); err != nil || len(open) != 5 {
		t.Errorf("open reviews after the upgrade and a review said again = %d, %v; want 5", len(open), err)
	}
}
