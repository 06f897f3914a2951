package lapse

import (
	"context"
	"time"
)

// Store is the storage seam. A store only translates these calls to its
// database; every business rule lives above it. Both built-in stores (sqlite,
// postgres) pass the conformance suite in storetest.
//
// Methods that change an order are guarded compare-and-swaps: they name the
// state and version they expect and return ErrStale when the row has moved on.
// A change, its transition log row and its outbox rows commit together.
type Store interface {
	// OrderCreate inserts the order with its creation log row and outbox rows
	// in one transaction and returns it with created=true. If an order with
	// the same order_no exists it writes nothing and returns that order with
	// created=false.
	OrderCreate(ctx context.Context, p *OrderCreateParams) (o *Order, created bool, err error)

	// OrderCreateMany inserts many new orders, each with its creation log row
	// and outbox rows, in one transaction. It is for bulk loads (imports,
	// benchmarks, the demo): if any order_no exists it returns an ECONFLICT
	// error and writes nothing.
	OrderCreateMany(ctx context.Context, ps []*OrderCreateParams) error

	// OrderGet returns the order with order_no, or ErrOrderNotFound.
	OrderGet(ctx context.Context, orderNo string) (*Order, error)

	// OrderList returns orders matching p, newest first (created_at, then id,
	// descending), at most p.Limit of them.
	OrderList(ctx context.Context, p *OrderListParams) ([]*Order, error)

	// OrderTransition applies one planned transition: an update guarded by
	// id, state and version, one log row, and its outbox rows, atomically. It
	// returns the order as updated, or ErrStale and writes nothing.
	OrderTransition(ctx context.Context, p *OrderTransitionParams) (*Order, error)

	// OrderTransitionMany applies many planned transitions in one transaction
	// and returns the ids of the orders that moved; a stale one is skipped
	// and writes nothing.
	OrderTransitionMany(ctx context.Context, ps []*OrderTransitionParams) ([]int64, error)

	// OrderDeadlineSet moves the deadline of an order that is still in
	// p.FromState at p.FromVersion and writes p.Outbox, or returns ErrStale.
	OrderDeadlineSet(ctx context.Context, p *OrderDeadlineSetParams) (*Order, error)

	// OrderClaimDue returns up to p.Limit orders of p.Flows whose deadline is
	// at or before p.DueBy, earliest first. Inside Tx, the rows stay locked
	// until the transaction ends and rows locked by others are skipped (FOR
	// UPDATE SKIP LOCKED, or the single writer of SQLite).
	OrderClaimDue(ctx context.Context, p *OrderClaimDueParams) ([]*Order, error)

	// OrderNextDeadline returns the earliest deadline among orders of flows,
	// and false when none has one. It reads only the deadline index.
	OrderNextDeadline(ctx context.Context, flows []string) (time.Time, bool, error)

	// OrderCountDue counts orders whose deadline is at or before now.
	OrderCountDue(ctx context.Context, now time.Time) (int64, error)

	// TransitionList returns the transition log of an order, oldest first.
	TransitionList(ctx context.Context, orderID int64) ([]*TransitionRecord, error)

	// OutboxList returns the outbox events of an order, oldest first.
	OutboxList(ctx context.Context, orderID int64) ([]*OutboxEvent, error)

	// Tx runs fn in one transaction on a Store bound to it, committing when
	// fn returns nil and rolling back otherwise. On a Store that is already a
	// transaction, Tx runs fn in that same transaction.
	Tx(ctx context.Context, fn func(tx Store) error) error

	// Ping checks that the database answers.
	Ping(ctx context.Context) error

	// Close releases the store's connections.
	Close() error
}

// OrderCreateParams is a new order, its creation log row and its outbox rows,
// all computed above the seam.
type OrderCreateParams struct {
	Order  *Order // ID, Version are assigned by the store; Version starts at 1
	Log    TransitionRecord
	Outbox []OutboxEvent
}

// OrderListParams filters OrderList. Zero values do not filter.
type OrderListParams struct {
	State       State
	UserID      string
	Flow        string
	CreatedFrom *time.Time // inclusive
	CreatedTo   *time.Time // exclusive
	// Before continues a listing: only orders older than this position
	// (created_at, id) are returned.
	Before *OrderCursor
	Limit  int
}

// OrderCursor is a position in a newest-first listing of orders.
type OrderCursor struct {
	CreatedAt time.Time
	ID        int64
}

// OrderTransitionParams is a planned transition, made by Flow.Plan.
type OrderTransitionParams struct {
	OrderID     int64
	FromState   State
	FromVersion int64
	ToState     State
	Event       Event
	DeadlineAt  *time.Time // the new state's deadline, or nil
	ClosedAt    *time.Time // set when ToState is terminal
	CloseReason string
	FiredBy     FiredBy
	Actor       string
	Reason      string
	At          time.Time
	Outbox      []OutboxEvent
}

// OrderDeadlineSetParams moves an order's deadline.
type OrderDeadlineSetParams struct {
	OrderID     int64
	FromState   State
	FromVersion int64
	DeadlineAt  time.Time
	At          time.Time
	Outbox      []OutboxEvent
}

// OrderClaimDueParams selects due orders.
type OrderClaimDueParams struct {
	DueBy time.Time
	Flows []string
	Limit int
}

// TransitionRecord is one row of an order's transition log: who moved it,
// why, from where to where, when, and by which path.
type TransitionRecord struct {
	ID        int64     `json:"id"`
	OrderID   int64     `json:"-"`
	FromState State     `json:"from"` // "" for the creation row
	ToState   State     `json:"to"`
	Event     Event     `json:"event"`
	Version   int64     `json:"version"` // the order's version after the transition
	FiredBy   FiredBy   `json:"fired_by"`
	Actor     string    `json:"actor"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"at"`
}

// EventCreate is the event of the creation row of the transition log.
const EventCreate Event = "CREATE"
