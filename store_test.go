package lapse_test

import (
	"encoding/json"
	"testing"

	"github.com/lapsehq/lapse"
)

// badOutbox is an outbox that ValidateOutbox refuses.
var badOutbox = []lapse.OutboxEvent{{ID: "evt-1", Type: "order.created", Payload: json.RawMessage(`{}`)}}

func TestOrderParamsValidate(t *testing.T) {
	o := &lapse.Order{ID: 1, OrderNo: "O-1", UpdatedAt: at}
	ev := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	valid := []interface{ Validate() error }{
		&lapse.OrderCreateParams{Order: o, Outbox: []lapse.OutboxEvent{ev}},
		&lapse.OrderTransitionParams{OrderID: 1, Outbox: []lapse.OutboxEvent{ev}},
		&lapse.OrderDeadlineSetParams{OrderID: 1, DeadlineAt: at, At: at},
	}
	for _, p := range valid {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	invalid := []interface{ Validate() error }{
		&lapse.OrderCreateParams{Order: nil},
		&lapse.OrderCreateParams{Order: &lapse.Order{}},
		&lapse.OrderCreateParams{Order: &lapse.Order{OrderNo: "O-1", Metadata: json.RawMessage(`{"a":`)}},
		&lapse.OrderCreateParams{Order: o, Outbox: badOutbox},
		&lapse.OrderTransitionParams{OrderID: 0},
		&lapse.OrderTransitionParams{OrderID: 1, Outbox: badOutbox},
		&lapse.OrderDeadlineSetParams{OrderID: 0},
		&lapse.OrderDeadlineSetParams{OrderID: 1, Outbox: badOutbox},
	}
	for _, p := range invalid {
		if err := p.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("Validate(%+v) = %v, want invalid", p, err)
		}
	}
	batch := []*lapse.OrderTransitionParams{{OrderID: 1}, {OrderID: 2}}
	if err := lapse.ValidateOrderTransitions(batch); err != nil {
		t.Errorf("ValidateOrderTransitions of two orders = %v", err)
	}
	if err := lapse.ValidateOrderTransitions(append(batch, &lapse.OrderTransitionParams{OrderID: 1})); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("ValidateOrderTransitions of one order twice = %v, want invalid", err)
	}
}

func TestPaymentParamsValidate(t *testing.T) {
	pay := &lapse.Payment{OrderID: 1, OrderNo: "O-1"}
	review := &lapse.Review{OrderID: 1, OrderNo: "O-1", Reason: "x", CreatedAt: at}
	for _, c := range []struct {
		p     interface{ Validate() error }
		valid bool
	}{
		{&lapse.PaymentCreateParams{Payment: pay, Review: review}, true},
		{&lapse.PaymentCreateParams{Payment: nil}, false},
		{&lapse.PaymentCreateParams{Payment: pay, Review: &lapse.Review{OrderID: 2, OrderNo: "O-2"}}, false},
		{&lapse.PaymentCreateParams{Payment: pay, Outbox: badOutbox}, false},
		{&lapse.PaymentUpdateParams{ID: 1, Review: review}, true},
		{&lapse.PaymentUpdateParams{ID: 1, Review: &lapse.Review{Reason: "x"}}, false},
		{&lapse.PaymentUpdateParams{ID: 1, Outbox: badOutbox}, false},
	} {
		if err := c.p.Validate(); (err == nil) != c.valid || err != nil && lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("Validate(%+v) = %v, want valid %v", c.p, err, c.valid)
		}
	}
}

func TestDeliveryFinishParamsValidate(t *testing.T) {
	for _, c := range []struct {
		p     lapse.DeliveryFinishParams
		valid bool
	}{
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: lapse.DeliveryDone}, true},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: lapse.DeliveryPending}, true},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: lapse.DeliveryDead, Review: &lapse.Review{OrderID: 1, OrderNo: "O-1"}}, true},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: "lost"}, false},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "", Attempt: 1, Status: lapse.DeliveryDone}, false},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 0, Status: lapse.DeliveryDone}, false},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: lapse.DeliveryDead, Review: &lapse.Review{}}, false},
		{lapse.DeliveryFinishParams{ID: 1, Owner: "w", Attempt: 1, Status: lapse.DeliveryDead, Outbox: badOutbox}, false},
	} {
		if err := c.p.Validate(); (err == nil) != c.valid || err != nil && lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("Validate(%+v) = %v, want valid %v", c.p, err, c.valid)
		}
	}
}

func TestClaimParamsValidate(t *testing.T) {
	for _, c := range []struct {
		p     interface{ Validate() error }
		valid bool
	}{
		{&lapse.OrderClaimDueParams{DueBy: at, Flows: []string{"checkout"}, Limit: 1}, true},
		{&lapse.OrderClaimDueParams{DueBy: at, Flows: []string{"checkout"}, Limit: 0}, false},
		{&lapse.OrderClaimDueParams{DueBy: at, Flows: nil, Limit: 10}, false},
		{&lapse.OrderClaimDueParams{DueBy: at, Flows: []string{"checkout", ""}, Limit: 10}, false},
		{&lapse.OrderClaimDueParams{DueBy: at, Flows: []string{"checkout", "checkout"}, Limit: 10}, false},
		{&lapse.OrderDeadlineListParams{Limit: 1}, true},
		{&lapse.OrderDeadlineListParams{Limit: 0}, false},
		{&lapse.DeliveryClaimParams{Now: at, Owner: "w", LeaseUntil: at.Add(1), Subscribers: []string{"stock"}, Limit: 1}, true},
		{&lapse.DeliveryClaimParams{Now: at, Owner: "w", LeaseUntil: at.Add(1), Subscribers: []string{"stock"}, Limit: 0}, false},
		{&lapse.DeliveryClaimParams{Now: at, Owner: "w", LeaseUntil: at.Add(1), Subscribers: nil, Limit: 1}, false},
		{&lapse.DeliveryClaimParams{Now: at, Owner: "", LeaseUntil: at.Add(1), Subscribers: []string{"stock"}, Limit: 1}, false},
		{&lapse.DeliveryClaimParams{Now: at, Owner: "w", LeaseUntil: at, Subscribers: []string{"stock"}, Limit: 1}, false},
	} {
		if err := c.p.Validate(); (err == nil) != c.valid || err != nil && lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("Validate(%+v) = %v, want valid %v", c.p, err, c.valid)
		}
	}
	if err := lapse.ValidateFlows([]string{"checkout"}); err != nil {
		t.Errorf("ValidateFlows = %v", err)
	}
	if err := lapse.ValidateFlows(nil); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("ValidateFlows(nil) = %v, want invalid", err)
	}
}
