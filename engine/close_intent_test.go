package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// hookedGet is a store that runs hook once, after the first read of an
// order by number that hook chooses to act on.
type hookedGet struct {
	lapse.Store
	once sync.Once
	hook func()
}

func (s *hookedGet) OrderGet(ctx context.Context, no string) (*lapse.Order, error) {
	o, err := s.Store.OrderGet(ctx, no)
	if s.hook != nil {
		s.once.Do(s.hook)
	}
	return o, err
}

// TestCloseOrderIntentStartedMeanwhile: a manual close asks the provider
// first when the customer started paying, as the closer does. One whose
// customer starts paying after the close looked (and pays) is not closed
// on what it saw: it asks the provider, finds the payment and applies it.
func TestCloseOrderIntentStartedMeanwhile(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{paidAt: map[string]time.Time{}}
		s := &hookedGet{Store: open()}
		e := paymentEngine(t, s, clk, prov)
		ctx := ctxT(t)
		create(t, e, checkout("CI-1", 15*time.Minute))
		s.hook = func() {
			if _, err := e.StartPayment(ctx, "CI-1", "sandbox", app); err != nil {
				t.Error(err)
			}
			prov.mu.Lock()
			prov.paidAt["CI-1"] = clk.Now()
			prov.mu.Unlock()
		}
		o, err := e.CloseOrder(ctx, "CI-1", "stuck", operator)
		if !errors.Is(err, engine.ErrNotClosable) {
			t.Errorf("CloseOrder of an order whose customer started paying meanwhile = %v, %v; want ErrNotClosable (paid)", o, err)
		}
		if got, err := e.Order(ctx, "CI-1"); err != nil || got.State != flows.Paid {
			t.Errorf("CI-1 after the close: %v, %v; want PAID", got, err)
		}
	})
}
