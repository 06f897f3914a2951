package nats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestDeliverManyPublishesEach checks a batch: every event is in the stream
// once, with its subject and headers, and a batch sent again (a retry) adds
// nothing.
func TestDeliverManyPublishesEach(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	s := newSink(t, cfg)
	var ds []*lapse.Delivery
	for i := range 200 {
		ds = append(ds, delivery([]string{"order.created", "order.closed", "order.paid"}[i%3], i))
	}
	for round := range 2 {
		for i, err := range s.DeliverMany(context.Background(), ds) {
			if err != nil {
				t.Fatalf("round %d, delivery %d: %v", round, i, err)
			}
		}
	}
	checkOncePerID(t, js, cfg, ds)
}

// TestDeliverManyRefusesEach checks that an event that cannot be published
// is refused alone: the rest of its batch goes out.
func TestDeliverManyRefusesEach(t *testing.T) {
	t.Parallel()
	cfg, js := testConfig(t)
	s := newSink(t, cfg)
	good := []*lapse.Delivery{delivery("order.created", 1), delivery("order.closed", 2)}
	noEvent := &lapse.Delivery{ID: 3}
	badType := delivery("order.*", 4)
	errs := s.DeliverMany(context.Background(), []*lapse.Delivery{good[0], noEvent, badType, good[1]})
	if len(errs) != 4 || errs[0] != nil || errs[3] != nil || !errors.Is(errs[1], lapse.ErrRefused) || !errors.Is(errs[2], lapse.ErrRefused) {
		t.Fatalf("DeliverMany = %v; want the two bad ones refused and the rest delivered", errs)
	}
	checkOncePerID(t, js, cfg, good)
}

// TestDeliverManyDuringOutage checks that a batch sent while the server is
// away fails, each delivery with an error to be retried (not refused),
// within the publish timeout, and that the retry after the server is back
// stores each event once, whatever the failed batch left behind.
func TestDeliverManyDuringOutage(t *testing.T) {
	t.Parallel()
	cfg, p, js := proxied(t)
	cfg.PublishTimeout = time.Second
	s := newSink(t, cfg)
	var ds []*lapse.Delivery
	for i := range 20 {
		ds = append(ds, delivery("order.closed", i))
	}
	for name, fault := range map[string]func(){"down": p.Down, "blackhole": p.Blackhole} {
		fault()
		start := time.Now()
		errs := s.DeliverMany(context.Background(), ds)
		took := time.Since(start)
		for i, err := range errs {
			if err == nil || errors.Is(err, lapse.ErrRefused) {
				t.Errorf("%s: delivery %d = %v; want an error to retry", name, i, err)
			}
		}
		if took > cfg.PublishTimeout+500*time.Millisecond {
			t.Errorf("%s: DeliverMany took %v; want at most the publish timeout, %v", name, took, cfg.PublishTimeout)
		}
		p.Up()
		deadline := time.Now().Add(30 * time.Second)
		for {
			failed := 0
			for _, err := range s.DeliverMany(context.Background(), ds) {
				if err != nil {
					failed++
				}
			}
			if failed == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d not delivered 30 s after the server came back", name, failed, len(ds))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	checkOncePerID(t, js, cfg, ds)
}
