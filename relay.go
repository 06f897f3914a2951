package lapse

import (
	"context"
	"time"
)

// Relayer is a store that relays events to a subscriber without a delivery
// row per event: an event names its relayed subscribers (OutboxEvent.Relays)
// when it is written, and each such subscriber reads the events it is owed
// from the outbox in the order their transactions committed, keeping only its
// place (a cursor, one row a subscriber). An event that its subscriber did
// not take gets a delivery row then (RelayDefer), and is retried, dies and is
// reviewed as any delivery is. The engine uses it for the subscriptions that
// ask for it (engine.Subscription.Relay) when the store has it (PostgreSQL
// does); the other stores write a delivery row for every event.
//
// Its methods run inside Tx, in this order: RelayLock, RelayRead, then
// RelayDefer for the events not taken, then RelayAdvance; the cursor's lock
// keeps the relays of one subscriber on many processes from reading the
// same events, and the transaction makes the deferred rows and the new
// place one.
//
// A store that is not a Relayer refuses an event that names relayed
// subscribers (NotRelayed), so that no event is written that nothing would
// ever read.
type Relayer interface {
	// RelayLock locks the cursor of subscriber for this transaction,
	// making it at the start of the outbox (at time at) if it has none,
	// and returns it. When another transaction holds it, it returns nil and
	// no error.
	RelayLock(ctx context.Context, subscriber string, at time.Time) (*RelayCursor, error)

	// RelayRead returns, after p.Cursor, up to p.Limit events that name
	// p.Subscriber in their Relays and whose transactions had committed
	// when it looked, in commit order and within a transaction in the
	// order they were written, and the cursor past the last of them (past
	// every event that had committed, when it returns fewer than p.Limit).
	// Each event is returned as the delivery it would be (ID 0, status
	// pending, Event set); Blocked says which of them follow a delivery of
	// their order to p.Subscriber that is still pending, and so must wait
	// behind it.
	RelayRead(ctx context.Context, p *RelayReadParams) (*RelayBatch, error)

	// RelayDefer writes a delivery row to p.Subscriber for each event of
	// p.Events, pending, each chained after the newest delivery of its
	// order to the subscriber (one written earlier in p.Events included).
	// Those with Attempted set were attempted once and failed: they are
	// written leased to p.Owner until p.LeaseUntil with 1 attempt (and
	// Unfinished 1, as a claim leaves it), for the caller to record that
	// attempt's outcome as any failed attempt's (DeliveryFinish); the
	// others are due at once with none. It returns the rows written, in
	// the order of p.Events.
	RelayDefer(ctx context.Context, p *RelayDeferParams) ([]*Delivery, error)

	// RelayAdvance moves the cursor locked by RelayLock to c and adds
	// relayed to its count of events relayed.
	RelayAdvance(ctx context.Context, c *RelayCursor, relayed int64) error

	// RelayList returns the cursors of every subscriber, by name.
	RelayList(ctx context.Context) ([]*RelayCursor, error)

	// RelayedEvents returns the events of the order with id orderID that
	// are relayed to a subscriber and have no delivery row for it, in the
	// order they were written, each with whether the subscriber's relay
	// has handed it over.
	RelayedEvents(ctx context.Context, orderID int64) ([]*RelayedEvent, error)
}

// RelayedEvent is an event relayed to Subscriber, which its relay has
// handed over (Passed) or not yet.
type RelayedEvent struct {
	Event      *OutboxEvent
	Subscriber string
	Passed     bool
}

// RelayCursor is a subscriber's place in the outbox.
type RelayCursor struct {
	Subscriber string
	// Position is the store's own description of the place, opaque to the
	// engine.
	Position  string
	Relayed   int64 // events relayed through it in all
	UpdatedAt time.Time
}

// RelayReadParams reads the events a subscriber is owed after Cursor.
type RelayReadParams struct {
	Subscriber string
	Cursor     *RelayCursor
	Limit      int
}

// Validate reports params that no store may be given.
func (p *RelayReadParams) Validate() error {
	switch {
	case p.Cursor == nil:
		return FieldError("cursor", "is required")
	case p.Limit < 1:
		return FieldError("limit", "must be at least 1, not %d", p.Limit)
	}
	return validateNames("subscriber", []string{p.Subscriber})
}

// RelayBatch is what RelayRead read.
type RelayBatch struct {
	Events  []*Delivery
	Blocked []bool       // parallel to Events
	Next    *RelayCursor // the place after them
}

// RelayDeferParams are the events of a relay batch that get delivery rows.
type RelayDeferParams struct {
	Subscriber string
	Events     []*Delivery // as RelayRead returned them
	Attempted  []bool      // parallel to Events
	Owner      string
	At         time.Time
	LeaseUntil time.Time
}

// Validate reports params that no store may be given.
func (p *RelayDeferParams) Validate() error {
	switch {
	case len(p.Attempted) != len(p.Events):
		return FieldError("attempted", "has %d entries for %d events", len(p.Attempted), len(p.Events))
	case p.At.IsZero():
		return FieldError("at", "is required")
	}
	for i, d := range p.Events {
		if d == nil || d.Event == nil {
			return FieldError("events", "entry %d has no event", i)
		}
		if p.Attempted[i] && (p.Owner == "" || !p.LeaseUntil.After(p.At)) {
			return FieldError("lease_until", "an attempted event needs an owner and a lease after at")
		}
	}
	return validateNames("subscriber", []string{p.Subscriber})
}

// NotRelayed is the error with which a store that is not a Relayer refuses
// ev when it names relayed subscribers, and nil when it names none: the
// change it belongs to fails whole and writes nothing.
func NotRelayed(ev *OutboxEvent) error {
	if len(ev.Relays) == 0 {
		return nil
	}
	return FieldError("outbox", "event %s names relayed subscribers %v: this store does not relay events (PostgreSQL does); name them in Subscribers", ev.ID, ev.Relays)
}
