package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testOutboxSubscriberTwice hands the store an event that names one
// subscriber twice, which lapse.ValidateOutbox refuses above the seam: the
// deliveries' unique key refuses it too, as lapse.ErrEventExists, and the
// whole change writes nothing.
func testOutboxSubscriberTwice(t *testing.T, s lapse.Store) {
	p := newOrder("OS-1", base.Add(time.Hour), base)
	p.Outbox[0].Subscribers = []string{"stock", "webhook", "stock"}
	if _, _, err := s.OrderCreate(ctxT(t), p); !errors.Is(err, lapse.ErrEventExists) || lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("OrderCreate naming stock twice = %v, want ErrEventExists", err)
	}
	if _, err := s.OrderGet(ctxT(t), "OS-1"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("the order of a refused create exists: %v", err)
	}

	o := mustCreate(t, s, "OS-2", base.Add(time.Hour), base)
	tr := plan(t, o, flows.Cancel, base.Add(time.Second))
	tr.Outbox[0].Subscribers = []string{"stock", "stock"}
	if _, err := s.OrderTransition(ctxT(t), tr); !errors.Is(err, lapse.ErrEventExists) {
		t.Errorf("OrderTransition naming stock twice = %v, want ErrEventExists", err)
	}
	if got := mustGet(t, s, "OS-2"); got.State != o.State || got.Version != o.Version {
		t.Errorf("a refused transition moved the order to %s v%d", got.State, got.Version)
	}
	if ds, err := s.DeliveryList(ctxT(t), o.ID); err != nil || len(ds) != 0 {
		t.Errorf("a refused transition wrote %d deliveries, %v", len(ds), err)
	}
	if trs, evs := counts(t, s, o); trs != 1 || evs != 1 {
		t.Errorf("a refused transition wrote log rows or events: %d and %d, want 1 and 1", trs, evs)
	}
}

// testOutboxRelays checks that a store that is not a lapse.Relayer refuses
// an event that names relayed subscribers, as lapse.NotRelayed, in a
// create, a bulk create and a transition, and that the refused change
// writes nothing: no relay would ever read such an event. A
// Relayer writes it (its own tests check what it relays).
func testOutboxRelays(t *testing.T, s lapse.Store) {
	_, relays := s.(lapse.Relayer)
	refused := func(what string, err error) bool {
		t.Helper()
		if relays {
			if err != nil {
				t.Errorf("%s naming a relayed subscriber on a Relayer: %v", what, err)
			}
			return false
		}
		if lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s naming a relayed subscriber on a store that does not relay = %v, want it refused", what, err)
		}
		return true
	}
	p := newOrder("OR-1", base.Add(time.Hour), base)
	p.Outbox[0].Relays = []string{"nats"}
	_, _, err := s.OrderCreate(ctxT(t), p)
	if refused("OrderCreate", err) {
		if _, err := s.OrderGet(ctxT(t), "OR-1"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("the order of a refused create exists: %v", err)
		}
	}
	bulk := []*lapse.OrderCreateParams{newOrder("OR-2", base.Add(time.Hour), base), newOrder("OR-3", base.Add(time.Hour), base)}
	bulk[1].Outbox[0].Relays = []string{"nats"}
	if refused("OrderCreateMany", s.OrderCreateMany(ctxT(t), bulk)) {
		if _, err := s.OrderGet(ctxT(t), "OR-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("an order of a refused bulk create exists: %v", err)
		}
	}
	o := mustCreate(t, s, "OR-4", base.Add(time.Hour), base)
	tr := plan(t, o, flows.Cancel, base.Add(time.Second))
	tr.Outbox[0].Relays = []string{"nats"}
	_, err = s.OrderTransition(ctxT(t), tr)
	if refused("OrderTransition", err) {
		if got := mustGet(t, s, "OR-4"); got.State != o.State || got.Version != o.Version {
			t.Errorf("a refused transition moved the order to %s v%d", got.State, got.Version)
		}
		if trs, evs := counts(t, s, o); trs != 1 || evs != 1 {
			t.Errorf("a refused transition wrote log rows or events: %d and %d, want 1 and 1", trs, evs)
		}
	}
}

// testOutboxEventIDs checks that an event id, a UUID in the form
// lapse.ParseEventID takes, of any version, comes back as it was written,
// on the event and on its deliveries, and that an id that exists is
// lapse.ErrEventExists.
func testOutboxEventIDs(t *testing.T, s lapse.Store) {
	const v4 = "0f8fad5b-d9cb-469f-a165-70867728950e"
	p := newOrder("OE-1", base.Add(time.Hour), base)
	p.Outbox[0].ID = v4
	p.Outbox[0].Subscribers = []string{"webhook"}
	o, _, err := s.OrderCreate(ctxT(t), p)
	if err != nil {
		t.Fatalf("OrderCreate with a version 4 event id: %v", err)
	}
	if evs, err := s.OutboxList(ctxT(t), o.ID); err != nil || len(evs) != 1 || evs[0].ID != v4 {
		t.Errorf("OutboxList = %+v, %v; want the event %s", evs, err, v4)
	}
	if ds, err := s.DeliveryList(ctxT(t), o.ID); err != nil || len(ds) != 1 || ds[0].EventID != v4 {
		t.Errorf("DeliveryList = %+v, %v; want a delivery of %s", ds, err, v4)
	}
	if ds := claim(t, s, base, "w", 10, "webhook"); len(ds) != 1 || ds[0].EventID != v4 || ds[0].Event == nil || ds[0].Event.ID != v4 {
		t.Errorf("DeliveryClaim = %+v; want the delivery of %s with its event", ds, v4)
	}

	again := newOrder("OE-2", base.Add(time.Hour), base)
	again.Outbox[0].ID = v4
	if _, _, err := s.OrderCreate(ctxT(t), again); !errors.Is(err, lapse.ErrEventExists) {
		t.Errorf("OrderCreate with an event id that exists = %v, want ErrEventExists", err)
	}
	if _, err := s.OrderGet(ctxT(t), "OE-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("the order of a refused create exists: %v", err)
	}
	bulk := []*lapse.OrderCreateParams{newOrder("OE-3", base.Add(time.Hour), base), again}
	if err := s.OrderCreateMany(ctxT(t), bulk); !errors.Is(err, lapse.ErrEventExists) {
		t.Errorf("OrderCreateMany with an event id that exists = %v, want ErrEventExists", err)
	}
	if _, err := s.OrderGet(ctxT(t), "OE-3"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("an order of a refused bulk create exists: %v", err)
	}
}

// testOutboxBadEventID hands the store events whose ids are not UUIDs in
// the form lapse.ParseEventID takes (which lapse.ValidateOutbox refuses
// above the seam): every store refuses them as that function does, an
// EINVALID error naming outbox, in a create, a bulk create and a
// transition, and the refused change writes nothing, as PostgreSQL, whose
// ids are uuid, always did.
func testOutboxBadEventID(t *testing.T, s lapse.Store) {
	for i, id := range []string{"ev-1", "", "0F8FAD5B-D9CB-469F-A165-70867728950E", "0f8fad5bd9cb469fa16570867728950e", "{0f8fad5b-d9cb-469f-a165-70867728950e}"} {
		refused := func(what string, err error) {
			t.Helper()
			if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "outbox") {
				t.Errorf("%s with the event id %q = %v, want an EINVALID error naming outbox", what, id, err)
			}
		}
		no := fmt.Sprintf("OB-%d-", i)
		p := newOrder(no+"1", base.Add(time.Hour), base)
		p.Outbox[0].ID = id
		_, _, err := s.OrderCreate(ctxT(t), p)
		refused("OrderCreate", err)
		if _, err := s.OrderGet(ctxT(t), no+"1"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("the order of a refused create exists: %v", err)
		}
		bulk := []*lapse.OrderCreateParams{newOrder(no+"2", base.Add(time.Hour), base), newOrder(no+"3", base.Add(time.Hour), base)}
		bulk[1].Outbox[0].ID = id
		refused("OrderCreateMany", s.OrderCreateMany(ctxT(t), bulk))
		if _, err := s.OrderGet(ctxT(t), no+"2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("an order of a refused bulk create exists: %v", err)
		}
		o := mustCreate(t, s, no+"4", base.Add(time.Hour), base)
		tr := plan(t, o, flows.Cancel, base.Add(time.Second))
		tr.Outbox[0].ID = id
		tr.Outbox[0].Subscribers = []string{"webhook"}
		_, err = s.OrderTransition(ctxT(t), tr)
		refused("OrderTransition", err)
		if got := mustGet(t, s, no+"4"); got.State != o.State || got.Version != o.Version {
			t.Errorf("a refused transition moved the order to %s v%d", got.State, got.Version)
		}
		if trs, evs := counts(t, s, o); trs != 1 || evs != 1 {
			t.Errorf("a refused transition wrote log rows or events: %d and %d, want 1 and 1", trs, evs)
		}
		if ds, err := s.DeliveryList(ctxT(t), o.ID); err != nil || len(ds) != 0 {
			t.Errorf("a refused transition wrote %d deliveries, %v", len(ds), err)
		}
	}
}

// testOutboxBadPayload hands the store events whose payload is not JSON
// (which lapse.ValidateOutbox refuses above the seam): every store refuses
// them as PostgreSQL's json column does, here an EINVALID error naming
// outbox, in a create, a bulk create and a transition, and the refused
// change writes nothing.
func testOutboxBadPayload(t *testing.T, s lapse.Store) {
	for i, payload := range []string{"", "not json", `{"order":`, "{}{}"} {
		refused := func(what string, err error) {
			t.Helper()
			if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "outbox") {
				t.Errorf("%s with the payload %q = %v, want an EINVALID error naming outbox", what, payload, err)
			}
		}
		no := fmt.Sprintf("OP-%d-", i)
		p := newOrder(no+"1", base.Add(time.Hour), base)
		p.Outbox[0].Payload = []byte(payload)
		_, _, err := s.OrderCreate(ctxT(t), p)
		refused("OrderCreate", err)
		if _, err := s.OrderGet(ctxT(t), no+"1"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("the order of a refused create exists: %v", err)
		}
		bulk := []*lapse.OrderCreateParams{newOrder(no+"2", base.Add(time.Hour), base), newOrder(no+"3", base.Add(time.Hour), base)}
		bulk[1].Outbox[0].Payload = []byte(payload)
		refused("OrderCreateMany", s.OrderCreateMany(ctxT(t), bulk))
		if _, err := s.OrderGet(ctxT(t), no+"2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("an order of a refused bulk create exists: %v", err)
		}
		o := mustCreate(t, s, no+"4", base.Add(time.Hour), base)
		tr := plan(t, o, flows.Cancel, base.Add(time.Second))
		tr.Outbox[0].Payload = []byte(payload)
		_, err = s.OrderTransition(ctxT(t), tr)
		refused("OrderTransition", err)
		if got := mustGet(t, s, no+"4"); got.State != o.State || got.Version != o.Version {
			t.Errorf("a refused transition moved the order to %s v%d", got.State, got.Version)
		}
		if trs, evs := counts(t, s, o); trs != 1 || evs != 1 {
			t.Errorf("a refused transition wrote log rows or events: %d and %d, want 1 and 1", trs, evs)
		}
	}
}

// testOutboxLongNames hands the store an event whose type, or one of whose
// subscribers, is longer than lapse.MaxEventNameLen bytes (which
// lapse.ValidateOutbox refuses above the seam): every store refuses it as
// the MySQL store's columns do, here an EINVALID error naming outbox, and
// the refused change writes nothing.
func testOutboxLongNames(t *testing.T, s lapse.Store) {
	long := strings.Repeat("x", lapse.MaxEventNameLen+1)
	for i, set := range []func(ev *lapse.OutboxEvent){
		func(ev *lapse.OutboxEvent) { ev.Type = long },
		func(ev *lapse.OutboxEvent) { ev.Subscribers = []string{"webhook", long} },
	} {
		no := fmt.Sprintf("OL-%d-", i)
		p := newOrder(no+"1", base.Add(time.Hour), base)
		set(&p.Outbox[0])
		if _, _, err := s.OrderCreate(ctxT(t), p); lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "outbox") {
			t.Errorf("OrderCreate with a name of %d bytes (%d) = %v, want an EINVALID error naming outbox", len(long), i, err)
		}
		if _, err := s.OrderGet(ctxT(t), no+"1"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("the order of a refused create exists: %v", err)
		}
		o := mustCreate(t, s, no+"2", base.Add(time.Hour), base)
		tr := plan(t, o, flows.Cancel, base.Add(time.Second))
		set(&tr.Outbox[0])
		if _, err := s.OrderTransition(ctxT(t), tr); lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "outbox") {
			t.Errorf("OrderTransition with a name of %d bytes (%d) = %v, want an EINVALID error naming outbox", len(long), i, err)
		}
		if got := mustGet(t, s, no+"2"); got.State != o.State || got.Version != o.Version {
			t.Errorf("a refused transition moved the order to %s v%d", got.State, got.Version)
		}
	}
	// At the bound, every store keeps both.
	p := newOrder("OL-3", base.Add(time.Hour), base)
	p.Outbox[0].Type = long[1:]
	p.Outbox[0].Subscribers = []string{long[1:]}
	if _, _, err := s.OrderCreate(ctxT(t), p); err != nil {
		t.Errorf("OrderCreate with names of %d bytes: %v", len(long)-1, err)
	}
}

// testOutboxOrder checks that the events of a change are written as events
// of the order it changes, whatever order id the events carry: a delivery
// that dies writes its delivery.dead event for the delivery's order.
func testOutboxOrder(t *testing.T, s lapse.Store) {
	o := createWithSubs(t, s, "OO-1", base, "webhook")
	other := mustCreate(t, s, "OO-2", base.Add(time.Hour), base)
	tr := plan(t, o, flows.Cancel, base.Add(time.Second))
	tr.Outbox[0].OrderID = other.ID
	if _, err := s.OrderTransition(ctxT(t), tr); err != nil {
		t.Fatal(err)
	}
	ds := claim(t, s, base.Add(time.Minute), "w", 1, "webhook")
	if len(ds) != 1 {
		t.Fatalf("claimed %d deliveries, want 1", len(ds))
	}
	dead := lapse.NewDeliveryDeadEvent(ds[0], "gone", base.Add(time.Minute))
	dead.OrderID = other.ID
	_, err := s.DeliveryFinish(ctxT(t), &lapse.DeliveryFinishParams{ID: ds[0].ID, Owner: "w", Attempt: ds[0].Attempts,
		Status: lapse.DeliveryDead, Error: "gone", At: base.Add(time.Minute),
		Record: lapse.DeliveryAttempt{Worker: "w", StartedAt: base.Add(time.Minute), Outcome: lapse.OutcomeRefused, Error: "gone"},
		Outbox: []lapse.OutboxEvent{dead}})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.OutboxList(ctxT(t), o.ID)
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if err != nil || !slices.Equal(types, []string{lapse.EventOrderCreated, flows.EventOrderClosed, lapse.EventDeliveryDead}) {
		t.Errorf("events of %s = %q, %v; want its creation, its close and its delivery's death", o.OrderNo, types, err)
	}
	if evs, _ := s.OutboxList(ctxT(t), other.ID); len(evs) != 1 {
		t.Errorf("%s has %d events, want only its own creation", other.OrderNo, len(evs))
	}
}
