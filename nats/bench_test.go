package nats_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/nats"
)

// orderEvent returns a delivery of an order.closed event with the payload the
// engine writes, so that message sizes are realistic.
func orderEvent(n int64) *lapse.Delivery {
	now := time.Now()
	o := &lapse.Order{
		OrderNo: fmt.Sprintf("B-%d", n), Flow: "checkout", State: "CLOSED", Amount: 1999, Currency: "CNY",
		UserID: "u-42", Items: []lapse.Item{{SKU: "tea", Qty: 2}}, Metadata: []byte(`{}`), Version: 2,
		CreatedAt: now, UpdatedAt: now, ClosedAt: &now, CloseReason: "TIMEOUT", FiredBy: "timer",
	}
	ev := lapse.NewOutboxEvent("order.closed", o, nil)
	return &lapse.Delivery{ID: n, EventID: ev.ID, EventType: ev.Type, OrderNo: ev.OrderNo, Event: &ev}
}

// BenchmarkDeliver measures Deliver throughput with 1 caller (the latency of
// a publish and its PubAck), 8 (a subscription's default concurrency) and 64.
func BenchmarkDeliver(b *testing.B) {
	for _, callers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			cfg, _ := testConfig(b)
			benchDeliver(b, newSink(b, cfg), callers)
		})
	}
}

// BenchmarkDeliverMany measures DeliverMany throughput with batches of 32
// (the nats subscription's Concurrency in lapse serve) and 256, from one
// caller and from 4.
func BenchmarkDeliverMany(b *testing.B) {
	for _, size := range []int{32, 256} {
		for _, callers := range []int{1, 4} {
			b.Run(fmt.Sprintf("batch=%d/callers=%d", size, callers), func(b *testing.B) {
				cfg, _ := testConfig(b)
				s := newSink(b, cfg)
				var n atomic.Int64
				b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					ds := make([]*lapse.Delivery, size)
					for pb.Next() {
						for i := range ds {
							ds[i] = orderEvent(n.Add(1))
						}
						for _, err := range s.DeliverMany(context.Background(), ds) {
							if err != nil {
								b.Errorf("DeliverMany: %v", err)
								return
							}
						}
					}
				})
				b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "events/s")
			})
		}
	}
}

// benchDeliver runs Deliver from callers goroutines and reports events/s.
func benchDeliver(b *testing.B, s *nats.Sink, callers int) {
	var n atomic.Int64
	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Deliver(context.Background(), orderEvent(n.Add(1))); err != nil {
				b.Errorf("Deliver: %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64(len(orderEvent(0).Event.Payload)), "payload-bytes")
}
