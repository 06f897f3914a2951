package lapse_test

import (
	"testing"

	"github.com/lapsehq/lapse"
)

func TestCardIssueParamsValidate(t *testing.T) {
	card := func(orderID int64, visits int) *lapse.Card {
		return &lapse.Card{OrderID: orderID, OrderNo: "M-1", UserID: "u", Product: "gym", Visits: visits, IssuedAt: at}
	}
	for _, c := range []struct {
		name  string
		p     lapse.CardIssueParams
		valid bool
	}{
		{"a bundle", lapse.CardIssueParams{OrderID: 1, Cards: []*lapse.Card{card(1, 10), card(1, 0)}}, true},
		{"no order", lapse.CardIssueParams{OrderID: 0, Cards: []*lapse.Card{card(0, 10)}}, false},
		{"no cards", lapse.CardIssueParams{OrderID: 1}, false},
		{"a nil card", lapse.CardIssueParams{OrderID: 1, Cards: []*lapse.Card{card(1, 10), nil}}, false},
		{"two orders", lapse.CardIssueParams{OrderID: 1, Cards: []*lapse.Card{card(1, 10), card(2, 10)}}, false},
		{"another order", lapse.CardIssueParams{OrderID: 1, Cards: []*lapse.Card{card(2, 10)}}, false},
		{"negative visits", lapse.CardIssueParams{OrderID: 1, Cards: []*lapse.Card{card(1, -1)}}, false},
	} {
		if err := c.p.Validate(); (err == nil) != c.valid || err != nil && lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s: Validate = %v, want valid %v", c.name, err, c.valid)
		}
	}
}
