package engine_test

import (
	"fmt"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestMembershipRevokeKeysNameOneOrder: the key under which an issuing
// attempt revokes the cards a refund overtook is no other order's revoke
// key. Order numbers may hold '-' and letters, so when that key was
// lapse-revoke-<order_no>-issue-<delivery>-<attempt>, an order numbered
// <order_no>-issue-<delivery>-<attempt> had it as its refund's key: a card
// service that revokes once per key answered that refund's revoke as a
// replay, and the refunded order kept its cards.
func TestMembershipRevokeKeysNameOneOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		release := make(chan struct{})
		cards := &flakyCards{keyed: true, early: true, hold: release, held: make(chan struct{})}
		e := memberEngine(t, open(), clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		paidMembership(t, e, clk, "M-8")
		issuing := make(chan error, 1)
		go func() {
			_, err := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "w-issue"}).RunOnce(ctx)
			issuing <- err
		}()
		<-cards.held
		if _, _, err := e.RefundOrder(ctx, "M-8", engine.RefundRequest{Amount: 1000, By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{Owner: "w-refund"}))
		cards.mu.Lock()
		cards.hold = nil
		cards.mu.Unlock()
		close(release)
		if err := <-issuing; err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		wantCards(t, e, "M-8", 2, lapse.CardVoided)

		// The orders whose number the attempt's key once ended with.
		ds, err := e.Deliveries(ctx, "M-8")
		if err != nil {
			t.Fatal(err)
		}
		var others []string
		for _, d := range ds {
			if d.Subscriber == engine.IssueSubscriber {
				for a := range d.Attempts + 2 {
					others = append(others, fmt.Sprintf("M-8-issue-%d-%d", d.ID, a))
				}
			}
		}
		if len(others) == 0 {
			t.Fatal("no issue delivery of M-8")
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		for _, no := range others {
			paidMembership(t, e, clk, no)
			drain(t, d)
			wantCards(t, e, no, 2, lapse.CardActive)
			if _, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: 1000, By: app}); err != nil {
				t.Fatal(err)
			}
			drain(t, d)
			if st := orderState(t, e, no); st != flows.MembershipRefunded {
				t.Fatalf("%s after its refund: %s", no, st)
			}
			wantCards(t, e, no, 2, lapse.CardVoided)
		}
	})
}
