package closes_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

func TestFindRunning(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	v.orders("F", "u1", 3)
	v.clk.Advance(time.Hour)
	v.order("G-1", "u2", "")
	byNos, err := v.c.Start(ctx, &closes.Selector{OrderNos: []string{"F-002", "F-001"}}, "provider outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	shanghai := time.FixedZone("CST", 8*3600)
	from, to := t0.In(shanghai), t0.Add(30*time.Minute).In(shanghai)
	byRange, err := v.c.Start(ctx, &closes.Selector{From: &from, To: &to}, "provider outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	utcFrom, utcTo := t0, t0.Add(30*time.Minute)
	for _, c := range []struct {
		sel  *closes.Selector
		want int64
	}{
		{&closes.Selector{OrderNos: []string{"F-001", "F-002"}}, byNos.ID}, // in another order
		{&closes.Selector{OrderNos: []string{"F-002", "F-001"}}, byNos.ID},
		{&closes.Selector{OrderNos: []string{"F-001"}}, 0},
		{&closes.Selector{OrderNos: []string{"F-001", "F-002"}, Flow: "checkout"}, 0},
		{&closes.Selector{From: &utcFrom, To: &utcTo}, byRange.ID}, // in another zone
		{&closes.Selector{UserID: "u1"}, 0},
		// A from a nanosecond later chooses no order of t0: stores round
		// a bound up, so it chooses what a from a microsecond later does.
		{&closes.Selector{From: ns(&utcFrom, 1), To: &utcTo}, 0},
	} {
		b, err := v.c.FindRunning(ctx, c.sel)
		var got int64
		if b != nil {
			got = b.ID
		}
		if err != nil || got != c.want {
			t.Errorf("FindRunning(%+v) = batch %d, %v; want %d", c.sel, got, err, c.want)
		}
	}
	if _, err := v.c.Run(ctx, byNos.ID, alice, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := v.c.FindRunning(ctx, &closes.Selector{OrderNos: []string{"F-001", "F-002"}}); err != nil || b != nil {
		t.Errorf("FindRunning of a done batch = %+v, %v; want none", b, err)
	}
	if _, err := v.c.FindRunning(ctx, &closes.Selector{}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("FindRunning of an invalid selector = %v, want EINVALID", err)
	}
	un, err := v.c.Unfinished(ctx)
	if err != nil || len(un) != 1 || un[0].ID != byRange.ID {
		t.Errorf("Unfinished = %+v, %v; want the range batch alone", un, err)
	}
}
