package lapse_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

func TestParseEventID(t *testing.T) {
	id := lapse.NewEventID(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	u, err := lapse.ParseEventID(id)
	if err != nil || hex.EncodeToString(u[:]) != strings.ReplaceAll(id, "-", "") {
		t.Errorf("ParseEventID(%s) = %x, %v", id, u, err)
	}
	if _, err := lapse.ParseEventID("0f8fad5b-d9cb-469f-a165-70867728950e"); err != nil {
		t.Errorf("a version 4 UUID: %v", err)
	}
	for _, bad := range []string{
		"", "evt-1", "0F8FAD5B-D9CB-469F-A165-70867728950E", "0f8fad5bd9cb469fa16570867728950e",
		"0f8fad5b-d9cb-469f-a165-70867728950", "0f8fad5b-d9cb-469f-a165-70867728950e0",
		"0f8fad5b+d9cb-469f-a165-70867728950e", "0f8fad5b-d9cb-469f-a165-7086772895ge", "{f8fad5b-d9cb-469f-a165-70867728950}",
	} {
		if _, err := lapse.ParseEventID(bad); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("ParseEventID(%q) = %v, want invalid", bad, err)
		}
	}
}

func TestOutboxEventValidate(t *testing.T) {
	o := &lapse.Order{ID: 1, OrderNo: "O-1", UpdatedAt: at}
	ok := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	ok.Subscribers = []string{"stock", "webhook"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", ok, err)
	}
	for name, change := range map[string]func(ev *lapse.OutboxEvent){
		"id not a UUID":    func(ev *lapse.OutboxEvent) { ev.ID = "evt-1" },
		"id in upper case": func(ev *lapse.OutboxEvent) { ev.ID = strings.ToUpper(ev.ID) },
		"no type":          func(ev *lapse.OutboxEvent) { ev.Type = "" },
		"no payload":       func(ev *lapse.OutboxEvent) { ev.Payload = nil },
		"payload not JSON": func(ev *lapse.OutboxEvent) { ev.Payload = []byte("{") },
		"empty subscriber": func(ev *lapse.OutboxEvent) { ev.Subscribers = []string{"stock", ""} },
		"subscriber twice": func(ev *lapse.OutboxEvent) { ev.Subscribers = []string{"stock", "webhook", "stock"} },
	} {
		ev := ok
		change(&ev)
		if err := ev.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s: Validate = %v, want invalid", name, err)
		}
	}
	two := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	if err := lapse.ValidateOutbox([]lapse.OutboxEvent{ok, two}); err != nil {
		t.Errorf("ValidateOutbox of two events = %v", err)
	}
	if err := lapse.ValidateOutbox([]lapse.OutboxEvent{ok, ok}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("ValidateOutbox of one id twice = %v, want invalid", err)
	}
}

// TestOutboxEventItems: an event shows an order without items with
// "items": [], as the API does, and leaves the order it was given alone.
func TestOutboxEventItems(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	o := &lapse.Order{OrderNo: "A-1", Flow: "checkout", State: "UNPAID", CreatedAt: at, UpdatedAt: at}
	for _, ev := range []lapse.OutboxEvent{
		lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil),
		lapse.NewDeadlineChangedEvent(o, lapse.DeadlineMove{}),
		lapse.NewPaymentEvent("payment.late", o, &lapse.Payment{UpdatedAt: at}),
	} {
		if !strings.Contains(string(ev.Payload), `"items":[]`) {
			t.Errorf("%s payload %s, want items []", ev.Type, ev.Payload)
		}
	}
	if o.Items != nil {
		t.Errorf("the order was changed: items %v", o.Items)
	}
}

// TestOutboxEventStorable: what every store refuses of an event before
// writing (an id that is not a UUID, a payload that is not JSON) is the
// EINVALID error naming outbox; an event the engine made passes.
func TestOutboxEventStorable(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ok := lapse.OutboxEvent{ID: lapse.NewEventID(at), Type: "order.created", Payload: []byte(`{}`)}
	if err := ok.Storable(); err != nil {
		t.Errorf("Storable of a valid event: %v", err)
	}
	badID, badPayload, noPayload, longType, longSub, longRelay := ok, ok, ok, ok, ok, ok
	badID.ID = "ev-1"
	badPayload.Payload = []byte("not json")
	noPayload.Payload = nil
	long := strings.Repeat("x", lapse.MaxEventNameLen+1)
	longType.Type = long
	longSub.Subscribers = []string{long}
	longRelay.Relays = []string{long}
	for name, ev := range map[string]lapse.OutboxEvent{"id": badID, "payload": badPayload, "no payload": noPayload,
		"type": longType, "subscriber": longSub, "relay": longRelay} {
		if err := ev.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("Validate with a bad %s = %v, want EINVALID", name, err)
		}
		if err := ev.Storable(); lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "outbox") {
			t.Errorf("Storable with a bad %s = %v, want an EINVALID error naming outbox", name, err)
		}
	}
}
