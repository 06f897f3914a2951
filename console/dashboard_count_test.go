package console

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

var dashT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// fakeOrders lists orders as the stores do: newest first, in the created
// range, before the cursor, up to the limit. calls counts the reads.
func fakeOrders(all []*lapse.Order, calls *int) func(context.Context, *lapse.OrderListParams) ([]*lapse.Order, error) {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b *lapse.Order) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return int(b.ID - a.ID)
	})
	return func(_ context.Context, p *lapse.OrderListParams) ([]*lapse.Order, error) {
		*calls++
		var out []*lapse.Order
		for _, o := range all {
			switch {
			case p.CreatedFrom != nil && o.CreatedAt.Before(*p.CreatedFrom), p.CreatedTo != nil && !o.CreatedAt.Before(*p.CreatedTo):
			case p.Before != nil && (o.CreatedAt.After(p.Before.CreatedAt) || o.CreatedAt.Equal(p.Before.CreatedAt) && o.ID >= p.Before.ID):
			default:
				out = append(out, o)
			}
			if p.Limit > 0 && len(out) == p.Limit {
				break
			}
		}
		return out, nil
	}
}

func TestDashOrderHours(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return dashT0.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	var orders []*lapse.Order
	for i, ts := range []time.Time{at(-1, 30), at(0, 10), at(0, 20), at(1, 5), at(1, 5), at(2, 0), at(2, 59), at(3, 0)} {
		orders = append(orders, &lapse.Order{ID: int64(i + 1), CreatedAt: ts})
	}
	// Hours 0, 1 and 2 hold 2, 2 and 2 orders; one before, one after.
	var calls int
	per, hc, err := dashOrderHours(context.Background(), fakeOrders(orders, &calls), dashT0, 3, 100, 2)
	if err != nil || !slices.Equal(per, []int64{2, 2, 2}) || hc.N != 6 || !hc.Cut.IsZero() || calls != 4 {
		t.Errorf("unbounded: %v %+v after %d reads, %v", per, hc, calls, err)
	}
	// A bound of exactly six: everything, and not cut.
	calls = 0
	if per, hc, _ := dashOrderHours(context.Background(), fakeOrders(orders, &calls), dashT0, 3, 6, 2); !slices.Equal(per, []int64{2, 2, 2}) || !hc.Cut.IsZero() {
		t.Errorf("bound 6: %v %+v", per, hc)
	}
	// A bound of three: the newest three (2:59, 2:00, 1:05), cut at 1:05.
	calls = 0
	per, hc, _ = dashOrderHours(context.Background(), fakeOrders(orders, &calls), dashT0, 3, 3, 2)
	if !slices.Equal(per, []int64{0, 1, 2}) || hc.N != 3 || !hc.Cut.Equal(at(1, 5)) || calls != 2 {
		t.Errorf("bound 3: %v %+v after %d reads", per, hc, calls)
	}
	if hc.complete(at(1, 0)) || !hc.complete(at(2, 0)) {
		t.Errorf("cut at 1:05: the hour from 1:00 is not complete, the one from 2:00 is")
	}
}

func TestDashReviewHours(t *testing.T) {
	t.Parallel()
	rs := []*lapse.Review{ // newest first
		{ID: 5, CreatedAt: dashT0.Add(3 * time.Hour), Reason: "delivery 3 of order.closed to erp ran out of retries after 8 attempts: HTTP 500"},
		{ID: 4, CreatedAt: dashT0.Add(2*time.Hour + time.Minute), Reason: "payment T of p (0.01 CNY) is in review: amount differs"},
		{ID: 3, CreatedAt: dashT0.Add(2 * time.Hour), Reason: "payment T of p (0.01 CNY) is in review: refund refused: no"},
		{ID: 2, CreatedAt: dashT0.Add(30 * time.Minute), Reason: "why not"},
		{ID: 1, CreatedAt: dashT0.Add(-time.Minute), Reason: "too old"},
	}
	list := func(_ context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
		return rs[:min(p.Limit, len(rs))], nil
	}
	kinds := func(per [][]int64) map[string]int64 {
		out := map[string]int64{}
		for _, h := range per {
			for k, v := range h {
				if v > 0 {
					out[dashCategories[k]] += v
				}
			}
		}
		return out
	}
	// Three hours from 00:00: the one at 3:00 counts in the last (a clock
	// behind), the one before 00:00 not at all.
	per, hc, err := dashReviewHours(context.Background(), list, dashT0, 3, 100)
	want := map[string]int64{}
	for _, rv := range rs[:4] {
		want[dashCategory(rv.Reason)]++
	}
	at := func(reason string) int { return slices.Index(dashCategories, dashCategory(reason)) }
	if err != nil || hc.N != 4 || !hc.Cut.IsZero() || !maps.Equal(kinds(per), want) || per[2][at(rs[0].Reason)] != 1 || per[0][at(rs[3].Reason)] != 1 {
		t.Errorf("unbounded: %v %+v %v", per, hc, err)
	}
	// A bound of four: the fifth is before the window, so nothing is cut.
	if _, hc, _ := dashReviewHours(context.Background(), list, dashT0, 3, 4); hc.N != 4 || !hc.Cut.IsZero() {
		t.Errorf("bound 4: %+v", hc)
	}
	// A bound of two: cut at 2:01.
	if _, hc, _ := dashReviewHours(context.Background(), list, dashT0, 3, 2); hc.N != 2 || !hc.Cut.Equal(rs[1].CreatedAt) || hc.complete(dashT0.Add(2*time.Hour)) {
		t.Errorf("bound 2: %+v", hc)
	}
	if n, more, _ := dashOpenReviews(context.Background(), list, 3); n != 3 || !more {
		t.Errorf("open reviews bound 3: %d, more %v", n, more)
	}
	if n, more, _ := dashOpenReviews(context.Background(), list, 5); n != 5 || more {
		t.Errorf("open reviews bound 5: %d, more %v", n, more)
	}
}

func TestDashPayments(t *testing.T) {
	t.Parallel()
	var all []*lapse.Payment
	for i, c := range []string{"CNY", "USD", "CNY", "JPY", "CNY"} {
		all = append(all, &lapse.Payment{ID: int64(2*i + 1), Status: lapse.PaymentLate, Currency: c, Amount: 100})
		all = append(all, &lapse.Payment{ID: int64(2*i + 2), Status: lapse.PaymentApplied, Currency: c, Amount: 1})
	}
	list := func(_ context.Context, p *lapse.PaymentListParams) ([]*lapse.Payment, error) {
		var out []*lapse.Payment
		for _, pay := range all {
			if pay.ID > p.AfterID && (p.Status == "" || pay.Status == p.Status) && len(out) < p.Limit {
				out = append(out, pay)
			}
		}
		return out, nil
	}
	n, sums, more, err := dashPayments(context.Background(), list, lapse.PaymentLate, 100, 2)
	if err != nil || n != 5 || more || !maps.Equal(sums, map[string]int64{"CNY": 300, "USD": 100, "JPY": 100}) {
		t.Errorf("unbounded: %d %v more %v, %v", n, sums, more, err)
	}
	if got := dashSums(sums); got != "3.00 CNY, 100 JPY, 1.00 USD" {
		t.Errorf("dashSums = %q", got)
	}
	if n, _, more, _ := dashPayments(context.Background(), list, lapse.PaymentLate, 5, 2); n != 5 || more {
		t.Errorf("bound 5: %d more %v", n, more)
	}
	if n, sums, more, _ := dashPayments(context.Background(), list, lapse.PaymentLate, 3, 2); n != 3 || !more || sums["CNY"] != 200 {
		t.Errorf("bound 3: %d %v more %v", n, sums, more)
	}
}

func TestDashCategory(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		"delivery 12 of payment.late to refund ran out of retries after 5 attempts: HTTP 502":  catRefundFailed,
		"delivery 3 of membership.paid to issue ran out of retries after 6 attempts: HTTP 503": catCardIssueFailed,
		"payment T1 of alipay (1.00 CNY) is in review: refund refused: card cancelled":         catProviderRefused,
		"payment T1 of alipay (1.00 CNY) is in review: amount differs":                         catCallbackMismatch,
		"issuing failed: card service down":                                                    catOther,
		"":                                                                                     catOther,
	} {
		if got := dashCategory(reason); got != want {
			t.Errorf("dashCategory(%q) = %s, want %s", reason, got, want)
		}
	}
}

func TestDashFormats(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := dashNum(n); got != want {
			t.Errorf("dashNum(%d) = %q, want %q", n, got, want)
		}
	}
	for _, c := range []struct {
		d      time.Duration
		en, zh string
	}{
		{450 * time.Microsecond, "450 µs", "450 微秒"}, {12500 * time.Microsecond, "12.5 ms", "12.5 毫秒"}, {200 * time.Millisecond, "200 ms", "200 毫秒"},
		{1250 * time.Millisecond, "1.25 s", "1.25 秒"}, {20 * time.Second, "20 s", "20 秒"}, {100 * time.Second, "1 min 40 s", "1 分 40 秒"},
		{2*time.Hour + 5*time.Minute, "2 h 5 min", "2 小时 5 分"},
	} {
		if got := dashDuration(langEN, c.d); got != c.en {
			t.Errorf("dashDuration(en, %v) = %q, want %q", c.d, got, c.en)
		}
		if got := dashDuration(langZH, c.d); got != c.zh {
			t.Errorf("dashDuration(zh, %v) = %q, want %q", c.d, got, c.zh)
		}
	}
	if got := dashRate(1, 3); got != "33.3" {
		t.Errorf("dashRate(1, 3) = %q", got)
	}
	if got := dashRate(2, 3); got != "66.7" {
		t.Errorf("dashRate(2, 3) = %q", got)
	}
	if got, want := dashCount(langEN, "order", 1), "1 order"; got != want {
		t.Errorf("dashCount = %q, want %q", got, want)
	}
	if got, want := dashCountMore(langEN, "order", 10000), "10,000+ orders"; got != want {
		t.Errorf("dashCountMore = %q, want %q", got, want)
	}
	for _, c := range []struct{ from, to, gFrom, gTo time.Duration }{
		{0, 100 * time.Microsecond, 0, 100 * time.Microsecond},
		{time.Millisecond, 1250 * time.Microsecond, time.Millisecond, 2 * time.Millisecond},
		{1600 * time.Microsecond, 2 * time.Millisecond, time.Millisecond, 2 * time.Millisecond},
		{3150 * time.Microsecond, 4 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond},
		{8 * time.Second, 10 * time.Second, 5 * time.Second, 10 * time.Second},
		{1e14, 0, 1e14, 0},
	} {
		if f, to := dashLagGroup(engine.LagBin{From: c.from, To: c.to}); f != c.gFrom || to != c.gTo {
			t.Errorf("dashLagGroup(%v–%v) = %v–%v, want %v–%v", c.from, c.to, f, to, c.gFrom, c.gTo)
		}
	}
}
