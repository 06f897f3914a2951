package storetest

import (
	"slices"
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

// testTimeRange checks the created_at bounds of OrderList at a finer
// precision than a store keeps: From is inclusive and To exclusive of the
// time as given, so an order created a fraction of a microsecond before
// From is not listed, nor one created before To left out. Truncating the
// bounds as times are truncated listed the one and left out the other,
// and a manual close by time range (closes.Selector) closed an order
// created before its From.
func testTimeRange(t *testing.T, s lapse.Store) {
	for i, at := range []time.Duration{-time.Microsecond, 0, time.Microsecond} {
		p := newOrder(orderNo("TR", i), base.Add(time.Hour), base.Add(at))
		if _, _, err := s.OrderCreate(ctxT(t), p); err != nil {
			t.Fatal(err)
		}
	}
	list := func(from, to *time.Time) []string {
		t.Helper()
		got, err := s.OrderList(ctxT(t), &lapse.OrderListParams{CreatedFrom: from, CreatedTo: to, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var nos []string
		for _, o := range got {
			nos = append(nos, o.OrderNo)
		}
		return nos
	}
	from, to := base.Add(-500*time.Nanosecond), base.Add(500*time.Nanosecond)
	if got, want := list(&from, nil), []string{orderNo("TR", 2), orderNo("TR", 1)}; !slices.Equal(got, want) {
		t.Errorf("created from base-500ns: %v, want %v (the order of base-1µs was created before it)", got, want)
	}
	if got, want := list(nil, &to), []string{orderNo("TR", 1), orderNo("TR", 0)}; !slices.Equal(got, want) {
		t.Errorf("created before base+500ns: %v, want %v (the order of base was created before it)", got, want)
	}
	if got, want := list(&from, &to), []string{orderNo("TR", 1)}; !slices.Equal(got, want) {
		t.Errorf("created in [base-500ns, base+500ns): %v, want %v", got, want)
	}
}

// testServerTime checks ServerTime: the database's clock in UTC, read when
// asked, also inside a transaction (not the transaction's start, which
// would fall behind as the transaction goes on). The databases of the
// suite run on the test's machine, so their clock is the test's.
func testServerTime(t *testing.T, s lapse.Store) {
	before := time.Now()
	got, err := s.ServerTime(ctxT(t))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if got.Location() != time.UTC {
		t.Errorf("ServerTime in %v, want UTC", got.Location())
	}
	// SQLite's clock is read to the millisecond; a server's may tick in
	// steps of a few: a little slack each way.
	const slack = 50 * time.Millisecond
	if got.Before(before.Add(-slack)) || got.After(after.Add(slack)) {
		t.Errorf("ServerTime = %v, read between %v and %v on the same machine", got, before, after)
	}
	const pause = 100 * time.Millisecond
	err = s.Tx(ctxT(t), func(tx lapse.Store) error {
		first, err := tx.ServerTime(ctxT(t))
		if err != nil {
			return err
		}
		time.Sleep(pause) // time passes inside the transaction
		second, err := tx.ServerTime(ctxT(t))
		if err != nil {
			return err
		}
		if d := second.Sub(first); d < pause-slack {
			t.Errorf("ServerTime moved %v inside a transaction that lasted %v: it reads the transaction's start, not the clock", d, pause)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
