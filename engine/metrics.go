package engine

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// metrics are the engine's Prometheus metrics.
type metrics struct {
	closeLag    *prometheus.HistogramVec
	firings     *prometheus.CounterVec
	transitions *prometheus.CounterVec
	batch       prometheus.Histogram
	errors      *prometheus.CounterVec

	deliveries      *prometheus.CounterVec
	deliverySeconds *prometheus.HistogramVec
	deliveryHeld    *prometheus.CounterVec // closes first (close_hold.go)

	payments *prometheus.CounterVec
	refunds  *prometheus.CounterVec

	// The shared trigger's (trigger.go), registered with or without one,
	// so that an alert on them reads 0 rather than nothing.
	triggerDegraded prometheus.Gauge
	triggerErrors   prometheus.Counter
	triggerDropped  prometheus.Counter

	lags *lagWindow // the close lags of the last day, for CloseLag
}

// knownLabels are the label values known when the engine starts, whose
// series start at zero: a rate or an alert on them then reads 0 before the
// first event rather than nothing.
type knownLabels struct {
	subscribers []string
	providers   []string
	trigger     bool     // a shared trigger is configured
	timed       []string // the flows with deadlines, which this engine fires
}

func newMetrics(reg prometheus.Registerer, store, work lapse.Store, clock lapse.Clock, known knownLabels) (*metrics, error) {
	m := &metrics{
		lags: &lagWindow{},
		closeLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lapse_close_lag_seconds",
			Help:    "Time from an order's deadline to the transition its deadline fired (close time - deadline).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"flow"}),
		firings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_deadline_firings_total",
			Help: "Deadlines fired, by the path that fired them (timer: the precise path; sweep: the safety net).",
		}, []string{"path"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_transitions_total",
			Help: "Transitions applied by this process, by flow, event and path.",
		}, []string{"flow", "event", "fired_by"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lapse_claim_batch_seconds",
			Help:    "Time to claim and fire one batch of due orders.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_claimer_errors_total",
			Help: "Failed claim passes, by path.",
		}, []string{"path"}),
	}
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lapse_delivery_attempts_total",
		Help: "Delivery attempts by subscriber and outcome (ok, applied, error, refused, unknown).",
	}, []string{"subscriber", "outcome"})
	m.deliverySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lapse_delivery_attempt_seconds",
		Help:    "Duration of delivery attempts by subscriber.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"subscriber"})
	m.deliveryHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lapse_delivery_held_seconds_total",
		Help: "Time a subscriber's delivery loop claimed nothing because this process's claimer was burning down a backlog of due orders (closes first), by subscriber.",
	}, []string{"subscriber"})
	for _, sub := range known.subscribers {
		m.deliveryHeld.WithLabelValues(sub)
	}
	m.payments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lapse_payments_total",
		Help: "Payments recorded or moved by this process, by provider and the status they reached (applied, late, refunding, refunded, review; held: held without its order).",
	}, []string{"provider", "status"})
	m.refunds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lapse_refunds_total",
		Help: "Refunds that reached an end in this process, by kind (late_payment: a payment that came after its order closed; held_payment: one held without its order, refunded by an operator; order: a merchant's refund of a paid order) and result (succeeded, failed: the provider refused and the order is paid again, review: handed to an operator).",
	}, []string{"kind", "result"})
	m.triggerDegraded = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lapse_trigger_degraded",
		Help: "1 while a configured shared trigger (Redis) is not in charge and the database sweep fires on its faster beat; 0 without one."})
	m.triggerErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "lapse_trigger_errors_total",
		Help: "Errors and timeouts of the shared trigger (Redis)."})
	m.triggerDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "lapse_trigger_dropped_total",
		Help: "Deadlines not handed to the shared trigger because its queue was full (it is seeded again from the database)."})
	paths := []lapse.FiredBy{lapse.FiredByTimer, lapse.FiredBySweep}
	if known.trigger {
		paths = append(paths, lapse.FiredByRedis)
	}
	for _, p := range paths {
		m.errors.WithLabelValues(string(p))
		m.firings.WithLabelValues(string(p))
	}
	for _, kr := range [][2]string{{refundLatePayment, refundSucceeded}, {refundLatePayment, refundReview},
		{refundOrder, refundSucceeded}, {refundOrder, refundFailed}, {refundOrder, refundReview}} {
		m.refunds.WithLabelValues(kr[0], kr[1])
	}
	for _, p := range known.providers {
		for _, st := range []lapse.PaymentStatus{lapse.PaymentApplied, lapse.PaymentLate, lapse.PaymentRefunded, lapse.PaymentReview} {
			m.payments.WithLabelValues(p, string(st))
		}
	}
	if reg == nil {
		return m, nil
	}
	due := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lapse_due_open_orders",
		Help: "Orders whose deadline has passed but that have not been moved on yet (-1 when the database did not answer).",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := store.OrderCountDue(ctx, clock.Now())
		if err != nil {
			return -1
		}
		return float64(n)
	})
	// The count says that orders are due, not whether one of them stays
	// due while the others close (S8): the most overdue one's age does. It
	// reads the first entry of the deadline index.
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lapse_due_oldest_seconds",
		Help: "How long the most overdue order of a flow this process fires has been past its deadline (0: none is due; -1 when the database did not answer).",
	}, func() float64 {
		if len(known.timed) == 0 {
			return 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		at, ok, err := store.OrderNextDeadline(ctx, known.timed, time.Time{})
		if err != nil {
			return -1
		}
		now := clock.Now()
		if !ok || at.After(now) {
			return 0
		}
		return now.Sub(at).Seconds()
	})
	// A clock that drifts after the start (CheckClock) fires deadlines
	// early or late by as much; read at each scrape.
	skew := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lapse_clock_skew_seconds",
		Help: "This process's clock minus its database's (positive: ahead), as read at the scrape (NaN when the database did not answer). Past 1 s either way, deadlines fire early or late by as much.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := clockSkew(ctx, store, clock)
		if err != nil {
			return math.NaN()
		}
		return s.Offset.Seconds()
	})
	backlog := newBacklogCollector(store, known.subscribers)
	cs := []prometheus.Collector{m.closeLag, m.firings, m.transitions, m.batch, m.errors, due, oldest, skew, m.deliveries, m.deliverySeconds, m.deliveryHeld, m.payments, m.refunds, backlog,
		m.triggerDegraded, m.triggerErrors, m.triggerDropped}
	if pools := newPoolCollector(store, work); pools != nil {
		cs = append(cs, pools)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) transition(flow string, p *lapse.OrderTransitionParams) {
	m.transitions.WithLabelValues(flow, string(p.Event), string(p.FiredBy)).Inc()
}

// Kinds and results of lapse_refunds_total.
const (
	refundLatePayment = "late_payment"
	refundHeldPayment = "held_payment"
	refundOrder       = "order"

	refundSucceeded = "succeeded"
	refundFailed    = "failed"
	refundReview    = "review"
)

// backlogCollector reports the delivery backlogs at scrape time.
type backlogCollector struct {
	store   lapse.Store
	subs    []string // reported at zero when they have nothing pending or dead
	pending *prometheus.Desc
	dead    *prometheus.Desc
	oldest  *prometheus.Desc
	bySub   *prometheus.Desc
}

func newBacklogCollector(store lapse.Store, subs []string) *backlogCollector {
	return &backlogCollector{
		store:   store,
		subs:    subs,
		pending: prometheus.NewDesc("lapse_deliveries_pending", "Deliveries waiting for their next attempt, and relayed events their relay has yet to hand over.", nil, nil),
		dead:    prometheus.NewDesc("lapse_deliveries_dead", "Deliveries that were refused or ran out of retries, and wait for an operator.", nil, nil),
		oldest:  prometheus.NewDesc("lapse_deliveries_oldest_pending_timestamp_seconds", "Next attempt time of the most overdue pending delivery.", nil, nil),
		bySub: prometheus.NewDesc("lapse_deliveries_by_subscriber", "Pending and dead deliveries by subscriber and status.",
			[]string{"subscriber", "status"}, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.dead
	ch <- c.oldest
	ch <- c.bySub
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := c.store.DeliveryCount(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.pending, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(n.Pending))
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(n.Dead))
	if n.OldestPending != nil {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, float64(n.OldestPending.UnixMicro())/1e6)
	}
	counts, err := c.store.DeliveryCountBySubscriber(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.bySub, err)
		return
	}
	type key struct{ sub, status string }
	byKey := map[key]int64{}
	for _, sub := range c.subs {
		byKey[key{sub, string(lapse.DeliveryPending)}] = 0
		byKey[key{sub, string(lapse.DeliveryDead)}] = 0
	}
	// Deliveries of a subscriber no longer configured are counted too.
	for _, n := range counts {
		byKey[key{n.Subscriber, string(n.Status)}] = n.N
	}
	for k, n := range byKey {
		ch <- prometheus.MustNewConstMetric(c.bySub, prometheus.GaugeValue, float64(n), k.sub, k.status)
	}
}
