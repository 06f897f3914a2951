package http_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestReviveIssueInReviewRefused: the dead issue delivery of a membership
// in manual review is not revived (409, naming the order's retry): the
// issuer issues nothing for an order there, and the revive would resolve
// its review. The order stays on the desk, and its retry still works.
func TestReviveIssueInReviewRefused(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{})
	g.membershipInReview("M-1", 19900)
	ops := bearer(g.key("ops", access.ScopeOperationsWrite))
	hs, err := g.engine.Deliveries(context.Background(), "M-1")
	if err != nil {
		t.Fatal(err)
	}
	var dead int64
	for _, h := range hs {
		if h.Subscriber == engine.IssueSubscriber && h.Status == lapse.DeliveryDead {
			dead = h.ID
		}
	}
	if dead == 0 {
		t.Fatalf("no dead issue delivery: %+v", hs)
	}
	p := g.call("POST", "/v1/deliveries/"+strconv.FormatInt(dead, 10)+"/retry", "", ops).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if !strings.Contains(p.Detail, "/v1/orders/{order_no}/retry") {
		t.Errorf("refusal %q does not name the order's retry", p.Detail)
	}
	rs, err := g.engine.Reviews(context.Background(), &lapse.ReviewListParams{Open: true})
	if err != nil || len(rs) != 1 || rs[0].DeliveryID != dead {
		t.Errorf("open reviews after the refused revive: %+v, %v", rs, err)
	}
	g.call("POST", "/v1/orders/M-1/retry", `{"reason":"card service is back"}`, ops).want(t, http.StatusOK)
	if st := g.state("M-1"); st != flows.Compensating {
		t.Errorf("retried membership is %s, want COMPENSATING", st)
	}
}
