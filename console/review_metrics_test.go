package console_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/console"
	"github.com/lapsehq/lapse/engine"
)

// openReviews returns lapse_reviews_open by category, and
// lapse_reviews_open_truncated.
func openReviews(t *testing.T, reg prometheus.Gatherer) (map[string]float64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	by, truncated := map[string]float64{}, -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "lapse_reviews_open":
				by[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			case "lapse_reviews_open_truncated":
				truncated = m.GetGauge().GetValue()
			}
		}
	}
	return by, truncated
}

// TestReviewMetrics: the open reviews are counted by the category the
// console gives them, every category starting at zero, and a resolved
// review no longer counts.
func TestReviewMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	reg := prometheus.NewRegistry()
	if _, err := console.New(console.Config{Engine: e.engine, Access: e.access, API: http.NotFoundHandler(), Store: e.store, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	by, truncated := openReviews(t, reg)
	if len(by) < 5 || by["callback_mismatch"] != 0 || by["other"] != 0 || truncated != 0 {
		t.Fatalf("before any review: %v, truncated %v; want every category at 0", by, truncated)
	}
	var reviews []*lapse.Payment
	for i, reason := range []string{
		"payment T0 of alipay (10.00 CNY) is in review: the payment is 9.00 CNY; order R-0 is 10.00 CNY",
		"payment T1 of alipay (10.00 CNY) is in review: the payment was made to merchant \"x\", not \"m1\"",
		"payment T2 of alipay (10.00 CNY) is in review: refund refused: card cancelled",
	} {
		o, _, err := e.engine.CreateOrder(e.ctx, &lapse.OrderCreate{OrderNo: fmt.Sprintf("R-%d", i), Flow: "checkout", UserID: "u1",
			Amount: 1000, Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: 1}}, TTL: time.Hour}, engine.Actor{FiredBy: lapse.FiredByAPI, Name: "test"})
		if err != nil {
			t.Fatal(err)
		}
		pay, _, err := e.store.PaymentCreate(e.ctx, &lapse.PaymentCreateParams{
			Payment: &lapse.Payment{Provider: "alipay", TxnID: fmt.Sprintf("T%d", i), OrderID: o.ID, OrderNo: o.OrderNo, Amount: 1000,
				Currency: "CNY", Merchant: "m1", PaidAt: t0, Status: lapse.PaymentReview, Reason: reason, CreatedAt: t0},
			Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: reason, CreatedAt: t0}})
		if err != nil {
			t.Fatal(err)
		}
		reviews = append(reviews, pay)
	}
	by, _ = openReviews(t, reg)
	if by["callback_mismatch"] != 2 || by["provider_refused"] != 1 || by["other"] != 0 {
		t.Errorf("open reviews by category = %v; want callback_mismatch 2, provider_refused 1", by)
	}
	if _, err := e.store.ReviewResolve(e.ctx, &lapse.ReviewResolveParams{OrderID: reviews[0].OrderID, At: t0, By: "test"}); err != nil {
		t.Fatal(err)
	}
	if by, _ = openReviews(t, reg); by["callback_mismatch"] != 1 {
		t.Errorf("after one is resolved: %v; want callback_mismatch 1", by)
	}
}
