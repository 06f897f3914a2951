package lapse

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// OutboxEvent is an event row written in the same transaction as the change
// that caused it (order.created, order.closed, order.paid, …). Its ID is the
// idempotency key downstream consumers deduplicate on.
type OutboxEvent struct {
	Seq       int64           `json:"seq"` // store-assigned, increasing in commit order per store
	ID        string          `json:"id"`  // UUIDv7, in the form ParseEventID takes
	OrderID   int64           `json:"-"`
	OrderNo   string          `json:"order_no"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`

	// Subscribers, when writing an event, name the subscribers it fans out
	// to, each once: the store creates one pending delivery per name, due at
	// CreatedAt, in the same transaction as the event. Not read back.
	Subscribers []string `json:"-"`
	// Relays, when writing an event, name the subscribers it is relayed to
	// without a delivery row (a Relayer's): the store records them on the
	// event, and each reads it from the outbox in commit order. Not read
	// back. A name is in Subscribers or in Relays, not both.
	Relays []string `json:"-"`

	// made is the payload as newOutboxEvent marshalled it: JSON, which
	// Validate does not parse again while Payload is that same slice.
	made []byte
}

// Outbox event types emitted by the built-in flows and the engine.
const (
	EventOrderCreated         = "order.created"
	EventOrderDeadlineChanged = "order.deadline_changed"
)

// EngineEvents returns the event types the engine writes itself, whatever
// its flows: an order created, a deadline moved, a payment its order could
// not take, the refund of one, one given to an operator, and a delivery
// given up. No flow emits them (Flow.Validate): a subscriber of one, such
// as a merchant's stock port of order.created, would take a transition's
// event for the engine's.
func EngineEvents() []string {
	return []string{EventOrderCreated, EventOrderDeadlineChanged, EventPaymentLate, EventPaymentRefunded,
		EventPaymentReview, EventDeliveryDead}
}

// eventPayload is the JSON body of every order event: what happened and the
// order as it stands after it.
type eventPayload struct {
	ID         string        `json:"id"`
	Type       string        `json:"type"`
	OccurredAt time.Time     `json:"occurred_at"`
	Order      *Order        `json:"order"`
	Transition *payloadHop   `json:"transition,omitempty"`
	Deadline   *DeadlineMove `json:"deadline,omitempty"`
	Payment    *Payment      `json:"payment,omitempty"`
}

// DeadlineMove describes a changed deadline in an order.deadline_changed event.
type DeadlineMove struct {
	Previous *time.Time `json:"previous"`
	Next     *time.Time `json:"next"`
	FiredBy  FiredBy    `json:"fired_by"`
	Actor    string     `json:"actor"`
	Reason   string     `json:"reason,omitempty"`
	// Key is the Idempotency-Key the change was asked with, and ExtendBy
	// or DeadlineAt what it asked for (as the caller sent it: a move later
	// by a duration, or to a time); all three are left out of a change
	// asked without a key. The same key again on the order is the same
	// change, which the engine finds here and does not make twice.
	Key        string     `json:"idempotency_key,omitempty"`
	ExtendBy   string     `json:"extend_by,omitempty"`
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
}

type payloadHop struct {
	From    State   `json:"from"`
	To      State   `json:"to"`
	Event   Event   `json:"event"`
	FiredBy FiredBy `json:"fired_by"`
	Reason  string  `json:"reason,omitempty"`
}

// NewOutboxEvent builds an event of type typ about order o, which must be the
// order as it will be after the change. tr, when not nil, is the transition
// that emitted it.
func NewOutboxEvent(typ string, o *Order, tr *OrderTransitionParams) OutboxEvent {
	p := eventPayload{Type: typ, Order: o}
	if tr != nil {
		p.Transition = &payloadHop{From: tr.FromState, To: tr.ToState, Event: tr.Event, FiredBy: tr.FiredBy, Reason: tr.Reason}
	}
	return newOutboxEvent(p, o.UpdatedAt)
}

// NewPaymentEvent builds an event of type typ about payment p of order o, as
// they will be after the change; it occurs at p.UpdatedAt.
func NewPaymentEvent(typ string, o *Order, p *Payment) OutboxEvent {
	return newOutboxEvent(eventPayload{Type: typ, Order: o, Payment: p}, p.UpdatedAt)
}

// NewDeadlineChangedEvent builds the order.deadline_changed event of order o,
// which must be the order as it will be after the change.
func NewDeadlineChangedEvent(o *Order, m DeadlineMove) OutboxEvent {
	return newOutboxEvent(eventPayload{Type: EventOrderDeadlineChanged, Order: o, Deadline: &m}, o.UpdatedAt)
}

func newOutboxEvent(p eventPayload, at time.Time) OutboxEvent {
	o, typ := p.Order, p.Type
	p.ID, p.OccurredAt = NewEventID(at), at
	if o.Items == nil {
		// A list, as the API shows it, also to subscribers: [] for none.
		shown := *o
		shown.Items = []Item{}
		p.Order = &shown
	}
	body, ok := appendEventJSON(make([]byte, 0, 768), &p)
	if !ok {
		var err error
		if body, err = json.Marshal(p); err != nil {
			panic("lapse: order event does not marshal: " + err.Error()) // every field is marshalable
		}
	}
	return OutboxEvent{ID: p.ID, OrderID: o.ID, OrderNo: o.OrderNo, Type: typ, Payload: body, CreatedAt: at, made: body}
}

// NewEventID returns a random UUID version 7 whose leading bits are the
// milliseconds of t, so that ids sort roughly by time.
func NewEventID(t time.Time) string {
	var u [16]byte
	if _, err := rand.Read(u[6:]); err != nil {
		panic("lapse: no randomness: " + err.Error())
	}
	ms := uint64(t.UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[:6], ts[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// ParseEventID returns the 16 bytes of the event id id, for a store that
// keeps ids as binary UUIDs, or an EINVALID error naming outbox when id is
// not one: a UUID in its canonical form, 36 characters of lower-case hex
// digits in groups of 8-4-4-4-12, as NewEventID makes them (of any version).
// A store that keeps ids as text writes them as they are.
func ParseEventID(id string) ([16]byte, error) {
	var u [16]byte
	if len(id) != 36 {
		return [16]byte{}, badEventID(id)
	}
	n := 0 // hex digits read
	for i := 0; i < len(id); i++ {
		c := id[i]
		var v byte
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return [16]byte{}, badEventID(id)
			}
			continue
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		default:
			return [16]byte{}, badEventID(id)
		}
		u[n/2] |= v << (4 * (1 - n%2))
		n++
	}
	return u, nil
}

func badEventID(id string) error {
	return FieldError("outbox", "event id %q is not a UUID in lower-case hex", id)
}

// Validate reports an event that no store may be given, as an EINVALID
// error naming outbox: an id that ParseEventID refuses, no type, a payload
// that is not JSON, and a subscriber that is empty or named twice.
func (ev *OutboxEvent) Validate() error {
	if err := ev.Storable(); err != nil {
		return err
	}
	if ev.Type == "" {
		return FieldError("outbox", "event %s has no type", ev.ID)
	}
	for i, sub := range ev.Subscribers {
		switch {
		case sub == "":
			return FieldError("outbox", "event %s names an empty subscriber", ev.ID)
		case strings.HasPrefix(sub, ">"):
			return FieldError("outbox", "event %s names subscriber %q: a name does not start with >", ev.ID, sub)
		case slices.Contains(ev.Subscribers[:i], sub):
			return FieldError("outbox", "event %s names subscriber %s twice", ev.ID, sub)
		}
	}
	for i, sub := range ev.Relays {
		switch {
		case sub == "" || strings.Trim(sub, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "":
			return FieldError("outbox", "event %s names relayed subscriber %q: lower case letters, digits, - and _", ev.ID, sub)
		case slices.Contains(ev.Relays[:i], sub) || slices.Contains(ev.Subscribers, sub):
			return FieldError("outbox", "event %s names subscriber %s twice", ev.ID, sub)
		}
	}
	return nil
}

// MaxEventNameLen bounds an event's type and the names of its subscribers,
// in bytes: what every store keeps (MySQL's columns hold no more).
const MaxEventNameLen = 1024

// Storable reports an event that a store cannot keep as given, as the
// EINVALID error naming outbox that Validate gives for it: an id that
// ParseEventID refuses (not a UUID), a payload that is not JSON, or a type
// or subscriber longer than MaxEventNameLen. Every store calls it on each
// event before it writes anything, whatever was checked above it (Validate
// checks it too), so that all of them refuse alike what PostgreSQL's uuid
// and json columns, or MySQL's lengths, would, rather than one refuse it
// as an internal error and the others keep it.
func (ev *OutboxEvent) Storable() error {
	if _, err := ParseEventID(ev.ID); err != nil {
		return err
	}
	if !ev.madeHere() && !json.Valid(ev.Payload) {
		return FieldError("outbox", "the payload of event %s is not JSON", ev.ID)
	}
	if len(ev.Type) > MaxEventNameLen {
		return FieldError("outbox", "the type of event %s is longer than %d bytes", ev.ID, MaxEventNameLen)
	}
	for _, names := range [][]string{ev.Subscribers, ev.Relays} {
		for _, sub := range names {
			if len(sub) > MaxEventNameLen {
				return FieldError("outbox", "event %s names a subscriber longer than %d bytes", ev.ID, MaxEventNameLen)
			}
		}
	}
	return nil
}

// madeHere reports whether the payload is the one newOutboxEvent made.
func (ev *OutboxEvent) madeHere() bool {
	return len(ev.Payload) > 0 && len(ev.made) == len(ev.Payload) && &ev.made[0] == &ev.Payload[0]
}

// ValidateOutbox validates the events of one change (OutboxEvent.Validate),
// and that no id is given twice.
func ValidateOutbox(evs []OutboxEvent) error {
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			return err
		}
		for j := range i {
			if evs[j].ID == evs[i].ID {
				return FieldError("outbox", "event id %s is given twice", evs[i].ID)
			}
		}
	}
	return nil
}

// ErrEventExists: an outbox event with that id is written already, or an
// event names one subscriber twice (its delivery to that subscriber exists).
// The stores' unique keys refuse both.
var ErrEventExists = &Error{Code: ECONFLICT, Message: "the outbox event, or its delivery to that subscriber, exists"}

// EventOrder returns the order carried in an order event's payload, as it was
// after the change. Its ID is not part of the payload and is zero.
func EventOrder(ev *OutboxEvent) (*Order, error) {
	var p struct {
		Order *Order `json:"order"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return nil, err
	}
	if p.Order == nil {
		return nil, Errorf(EINVALID, "event %s carries no order", ev.ID)
	}
	return p.Order, nil
}

// EventPayment returns the payment carried in a payment event's payload.
func EventPayment(ev *OutboxEvent) (*Payment, error) {
	var p struct {
		Payment *Payment `json:"payment"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return nil, err
	}
	if p.Payment == nil {
		return nil, Errorf(EINVALID, "event %s carries no payment", ev.ID)
	}
	return p.Payment, nil
}
