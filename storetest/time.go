package storetest

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// testTimes checks how a store keeps times: to the microsecond, truncating
// (never rounding) a finer one, and in UTC whatever zone they were given in,
// so that a time from a lapse.Clock comes back equal.
func testTimes(t *testing.T, s lapse.Store) {
	east := time.FixedZone("UTC+8", 8*60*60)
	created := base.Add(999 * time.Nanosecond)                      // truncates to base
	deadline := base.Add(time.Hour + 1500*time.Nanosecond).In(east) // to +1h1µs
	p := newOrder("TM-1", deadline, created)
	if _, _, err := s.OrderCreate(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	o := mustGet(t, s, "TM-1")
	wantDeadline := base.Add(time.Hour + time.Microsecond)
	if !o.CreatedAt.Equal(base) || !o.DeadlineAt.Equal(wantDeadline) {
		t.Errorf("created %v deadline %v; want %v and %v, truncated to the microsecond", o.CreatedAt, o.DeadlineAt, base, wantDeadline)
	}
	if o.CreatedAt.Location() != time.UTC || o.DeadlineAt.Location() != time.UTC {
		t.Errorf("times come back in %v and %v, want UTC", o.CreatedAt.Location(), o.DeadlineAt.Location())
	}
	if o.CreatedAt != lapse.Truncate(created) || *o.DeadlineAt != lapse.Truncate(deadline) {
		t.Errorf("times read back differ from lapse.Truncate of the times written")
	}
	st, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tm", OnHand: 1, At: base.Add(-time.Nanosecond)})
	if err != nil {
		t.Fatal(err)
	}
	if want := base.Add(-time.Microsecond); !st.UpdatedAt.Equal(want) || st.UpdatedAt.Location() != time.UTC {
		t.Errorf("StockSet at base-1ns = %v, want %v (truncated, not rounded)", st.UpdatedAt, want)
	}
}
