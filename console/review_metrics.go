package console

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// reviewCollector reports the open reviews by category at scrape time, the
// categories read from each review's reason as the dashboard reads them. It
// reads at most dashBound reviews; lapse_reviews_open_truncated says when
// there are more.
type reviewCollector struct {
	store     lapse.Store
	open      *prometheus.Desc
	truncated *prometheus.Desc
}

func newReviewCollector(store lapse.Store) *reviewCollector {
	return &reviewCollector{
		store: store,
		open: prometheus.NewDesc("lapse_reviews_open", "Open reviews (orders and payments waiting for an operator) by category, as the console categorizes them.",
			[]string{"category"}, nil),
		truncated: prometheus.NewDesc("lapse_reviews_open_truncated", "1 when there are more open reviews than lapse_reviews_open counts (10,000).", nil, nil),
	}
}

func (c *reviewCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.truncated
}

func (c *reviewCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rs, err := c.store.ReviewList(ctx, &lapse.ReviewListParams{Open: true, Limit: dashBound + 1})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.open, err)
		return
	}
	more := 0.0
	if len(rs) > dashBound {
		rs, more = rs[:dashBound], 1
	}
	by := make(map[string]int, len(categories))
	for _, rv := range rs {
		by[dashCategory(rv.Reason)]++
	}
	for _, cat := range categories {
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(by[cat]), cat)
	}
	ch <- prometheus.MustNewConstMetric(c.truncated, prometheus.GaugeValue, more)
}
