package lapse

import (
	"context"
	"time"
)

// Store is the storage seam. A store only translates these calls to its
// database; every business rule lives above it. Both built-in stores (sqlite,
// postgres) pass the conformance suite in storetest.
//
// Params. A store may assume that what it is given passes the Validate
// method of its params (StockMoveParams.Validate, ValidateOutbox, …): the
// engine validates every call before it reaches its store, so no store
// decides, refuses or repairs anything of its own. Where a store's schema
// must still refuse something for integrity (a unique key, a check), the
// store reports it as the sentinel the method names, so that the same input
// gets the same answer from every store.
//
// Methods that change an order are guarded compare-and-swaps: they name the
// state and version they expect and return ErrStale when the row has moved on.
// A change, its transition log row and its outbox rows commit together.
//
// Outbox rows. A method that takes events (OutboxEvent) writes each as an
// event of the order it changes (the event's own OrderID is not read), in
// the order given, with one pending delivery per subscriber it names, due
// at the event's CreatedAt and chained after the order's last delivery to
// that subscriber, all in the change's transaction. An event whose id is
// taken, or that names a subscriber twice, is ErrEventExists, and one that
// OutboxEvent.Storable refuses (an id that is not a UUID, a payload that is
// not JSON) is that EINVALID error; either way the change writes nothing.
//
// Times. A store keeps every time to the microsecond, truncating a finer
// one, and returns times in UTC: a time from a Clock (see Truncate) comes
// back equal to the one written.
type Store interface {
	// OrderCreate inserts the order at version 1 with its creation log row
	// (p.Log, at version 1 whatever it says) and outbox rows in one
	// transaction and returns it as stored, with created=true. If an order
	// with the same order_no exists it writes nothing and returns that order
	// with created=false; of concurrent creators of one order_no exactly one
	// creates. Items and Metadata come back as written, byte for byte, and
	// empty ones as nil. p is valid (OrderCreateParams.Validate).
	OrderCreate(ctx context.Context, p *OrderCreateParams) (o *Order, created bool, err error)

	// OrderCreateMany inserts many new orders, each as OrderCreate would, in
	// one transaction. It is for bulk loads (imports, benchmarks, the demo):
	// if any order_no exists, or appears twice in ps, it returns an
	// ECONFLICT error and writes nothing. Each p is valid.
	OrderCreateMany(ctx context.Context, ps []*OrderCreateParams) error

	// OrderGet returns the order with order_no, or ErrOrderNotFound.
	OrderGet(ctx context.Context, orderNo string) (*Order, error)

	// OrderLock is OrderGet that, inside Tx, also locks the order's row
	// until the transaction ends: no other transaction changes the order
	// meanwhile, and a claimer skips it. A change decided on what it read,
	// at a time read after it, takes effect as of that time. Outside Tx it
	// is OrderGet.
	OrderLock(ctx context.Context, orderNo string) (*Order, error)

	// OrderList returns orders matching p, newest first (created_at, then id,
	// descending), at most p.Limit of them; a Limit of zero or less does not
	// limit.
	OrderList(ctx context.Context, p *OrderListParams) ([]*Order, error)

	// OrderTransition applies one planned transition: an update guarded by
	// id, state and version, one log row (at the new version), and its
	// outbox rows, atomically. It returns the order as updated, or ErrStale
	// and writes nothing. p is valid (OrderTransitionParams.Validate).
	OrderTransition(ctx context.Context, p *OrderTransitionParams) (*Order, error)

	// OrderTransitionMany applies many planned transitions in one transaction,
	// each as OrderTransition would, and returns the ids of the orders that
	// moved, in no particular order; a stale one is skipped and writes
	// nothing.
	// ps is valid (ValidateOrderTransitions): no order has two, so a store
	// may apply them in any order, or all in one statement.
	OrderTransitionMany(ctx context.Context, ps []*OrderTransitionParams) ([]int64, error)

	// OrderDeadlineSet moves the deadline of an order that is still in
	// p.FromState at p.FromVersion to the next version and writes p.Outbox
	// (and, when p says so, the intent and PayBy), or returns ErrStale and
	// writes nothing. It writes no log row: the state does not change. p is
	// valid (OrderDeadlineSetParams.Validate).
	OrderDeadlineSet(ctx context.Context, p *OrderDeadlineSetParams) (*Order, error)

	// OrderClaimDue returns up to p.Limit orders of p.Flows whose deadline is
	// at or before p.DueBy, from p.From and p.FromID on, in (deadline, id)
	// order. Inside Tx, the rows stay locked
	// until the transaction ends and rows locked by others are skipped (FOR
	// UPDATE SKIP LOCKED, or the single writer of SQLite). p is valid
	// (OrderClaimDueParams.Validate): it asks for at least one order of at
	// least one flow.
	OrderClaimDue(ctx context.Context, p *OrderClaimDueParams) ([]*Order, error)

	// OrderNextDeadline returns the earliest deadline at or after from
	// among orders of flows (the zero from: of all), and false when none
	// has one. It reads only the deadline index, from from on. flows is
	// valid (ValidateFlows): it names at least one.
	OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error)

	// OrderDeadlineList returns up to p.Limit orders that have a deadline,
	// in (deadline, id) order after p.After, reading only the deadline
	// index: what a precise trigger is seeded with. p is valid
	// (OrderDeadlineListParams.Validate).
	OrderDeadlineList(ctx context.Context, p *OrderDeadlineListParams) ([]OrderDeadline, error)

	// OrderCountDue counts orders whose deadline is at or before now.
	OrderCountDue(ctx context.Context, now time.Time) (int64, error)

	// OrderCountOpen counts the orders that have not ended (closed_at is
	// not set) by flow and state, in (flow, state) order, with how many
	// of them have a deadline and how many have items or a coupon: what the
	// flows a process runs must still know. It reads every open order.
	OrderCountOpen(ctx context.Context) ([]OrderStateCount, error)

	// OrderDeadlineMin returns the earliest deadline among the orders ids
	// (those of them that have one), and false when none has. It reads
	// each by its key.
	OrderDeadlineMin(ctx context.Context, ids []int64) (time.Time, bool, error)

	// TransitionList returns the transition log of an order, oldest first.
	TransitionList(ctx context.Context, orderID int64) ([]*TransitionRecord, error)

	// OutboxList returns the outbox events of an order, oldest (lowest Seq)
	// first, with their ids and payloads as written.
	OutboxList(ctx context.Context, orderID int64) ([]*OutboxEvent, error)

	// DeliveryClaim leases up to p.Limit pending deliveries of p.Subscribers
	// whose next attempt is due at p.Now, earliest first, skipping rows other
	// transactions hold. A delivery waits while an earlier delivery (smaller
	// id) of the same order to the same subscriber is pending, so that each
	// subscriber receives an order's events in order; a dead one does not
	// hold the next back. Each claimed delivery has Attempts and Unfinished
	// incremented (the attempt it now runs), LeaseOwner p.Owner, LeaseUntil
	// and NextAttemptAt p.LeaseUntil (so that an expired lease makes it due
	// again), and Event loaded. p is valid (DeliveryClaimParams.Validate).
	DeliveryClaim(ctx context.Context, p *DeliveryClaimParams) ([]*Delivery, error)

	// DeliveryFinish records the outcome of attempt p.Attempt of a delivery
	// leased by p.Owner: its new status, its attempt row, and, when it dies,
	// the review and outbox rows given (events of the delivery's order). It
	// returns ErrLeaseLost, writing nothing, when the delivery is no longer
	// pending under that lease and attempt. Unfinished stays as it is when
	// p.CutShort, and is 0 otherwise. p is valid
	// (DeliveryFinishParams.Validate).
	DeliveryFinish(ctx context.Context, p *DeliveryFinishParams) (*Delivery, error)

	// DeliveryDoneMany records many attempts that delivered, each as
	// DeliveryFinish would with status done and no review or events: every
	// delivery of p.Attempts still pending under p.Owner and the attempt
	// named becomes done at p.At, with its lease given up, Unfinished 0 and
	// the attempt row as given. It returns the ids of the others, whose
	// leases are lost, in the order p names them, and writes nothing for them. It is one
	// transaction (one statement where the store can), so that a batch costs
	// one commit: an error records none of them. p is valid
	// (DeliveryDoneManyParams.Validate).
	DeliveryDoneMany(ctx context.Context, p *DeliveryDoneManyParams) (lost []int64, err error)

	// DeliveryRenew extends the leases of attempts in flight, in one
	// statement: every delivery of p.Leases that is still pending under
	// p.Owner and that attempt gets LeaseUntil and NextAttemptAt p.LeaseUntil
	// (never earlier than they were). It returns the ids of the others,
	// whose leases are lost: the delivery was finished, or its lease ran out
	// and another attempt claimed it. A lost lease is never extended again,
	// since the attempt number is the lease token; its attempt must stop,
	// and its finish would return ErrLeaseLost. An error extends nothing.
	DeliveryRenew(ctx context.Context, p *DeliveryRenewParams) (lost []int64, err error)

	// DeliveryRetry makes a dead delivery pending again, due at p.At, with
	// its schedule counted from its current attempts (RetryBase) and
	// Unfinished 0. It returns ErrDeliveryNotFound, or an ECONFLICT error when it is not dead.
	DeliveryRetry(ctx context.Context, p *DeliveryRetryParams) (*Delivery, error)

	// DeliveryGet returns a delivery, or ErrDeliveryNotFound.
	DeliveryGet(ctx context.Context, id int64) (*Delivery, error)

	// DeliveryList returns the deliveries of an order, oldest first.
	DeliveryList(ctx context.Context, orderID int64) ([]*Delivery, error)

	// DeliveryAttemptList returns the attempt rows of an order's deliveries,
	// by delivery then attempt.
	DeliveryAttemptList(ctx context.Context, orderID int64) ([]*DeliveryAttempt, error)

	// DeliveryCount counts pending and dead deliveries.
	DeliveryCount(ctx context.Context) (*DeliveryCounts, error)

	// DeliveryCountBySubscriber counts pending and dead deliveries per
	// subscriber and status, by subscriber then status; a subscriber with
	// none of a status has no row for it. It reads only the backlogs.
	DeliveryCountBySubscriber(ctx context.Context) ([]*DeliveryStatusCount, error)

	// OutboxPrune deletes outbox events that nothing needs any more, with
	// what hangs from them, reading on from p.From: each event created
	// before p.Before whose deliveries are all done (or that has none), of
	// an order that never went to review, goes with its deliveries, their
	// attempt rows and the effect rows (EffectClaim) of its deliveries. It
	// reads about p.Limit events and returns how many it deleted and where
	// the next call reads on (0 once it has read to the end). The positions
	// are the store's own, such that calls from 0 until Next is 0 read every
	// event that was there at the start. Events that another transaction
	// holds are left for a later call. One transaction. p is valid
	// (OutboxPruneParams.Validate).
	OutboxPrune(ctx context.Context, p *OutboxPruneParams) (*OutboxPruned, error)

	// EffectClaim records that consumer handled the event eventID and
	// reports whether this is the first time. Used inside Tx with the
	// effect, it makes the effect happen once.
	EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (first bool, err error)

	// StockSet sets the on-hand quantity of a SKU, creating its ledger line
	// (with nothing reserved) if needed, and returns the line. p is valid
	// (StockSetParams.Validate). An on-hand below what the line has reserved
	// is StockSetRefusal (ErrStockReserved) and writes nothing.
	StockSet(ctx context.Context, p *StockSetParams) (*Stock, error)

	// StockGet returns the ledger line of a SKU, or ErrStockNotFound.
	StockGet(ctx context.Context, sku string) (*Stock, error)

	// StockMove applies the move p.Kind to every line of p, all or nothing,
	// and journals each line, in the order given. p is valid
	// (StockMoveParams.Validate): its lines are in SKU order, one per SKU,
	// so a store may take the ledger's rows in the order given without
	// deadlocking. Each line's on-hand and reserved change by p.Kind.Delta()
	// times its quantity, which the line must allow: 0 ≤ reserved ≤ on-hand
	// afterwards. Otherwise nothing is written and the error is StockRefusal
	// of the first line, in the order given, that has no ledger line
	// (ErrStockNotFound) or not enough (ErrStockShort).
	StockMove(ctx context.Context, p *StockMoveParams) error

	// StockMoveList returns the stock journal of an order, oldest first.
	StockMoveList(ctx context.Context, orderID int64) ([]*StockMove, error)

	// StockCountReserved returns how many SKUs have stock reserved (a
	// ledger line with reserved > 0): 0 when no order holds stock.
	StockCountReserved(ctx context.Context) (int64, error)

	// CouponCreate adds an available coupon and returns it, or returns
	// ErrCouponExists and writes nothing. p is valid
	// (CouponCreateParams.Validate).
	CouponCreate(ctx context.Context, p *CouponCreateParams) (*Coupon, error)

	// CouponGet returns a coupon, or ErrCouponNotFound.
	CouponGet(ctx context.Context, code string) (*Coupon, error)

	// CouponMove applies the guarded update p.Change() to the coupon (a lock
	// needs it available, an unlock or a consume locked by p.OrderNo),
	// journals the move with p.OrderID and p.OrderNo, and returns the coupon
	// as updated. p is valid (CouponMoveParams.Validate). When the coupon is
	// not as the change needs, nothing is written and the error is
	// CouponRefusal of the coupon found: ErrCouponNotFound, or
	// ErrCouponUnavailable.
	CouponMove(ctx context.Context, p *CouponMoveParams) (*Coupon, error)

	// CouponMoveList returns the journal of a coupon, oldest first.
	CouponMoveList(ctx context.Context, code string) ([]*CouponMove, error)

	// CouponCountLocked returns how many coupons are CouponLocked: 0 when no
	// order holds a coupon.
	CouponCountLocked(ctx context.Context) (int64, error)

	// PaymentCreate records a captured payment with p.Outbox and their
	// deliveries (and p.Review, when set, as given), unless a payment with
	// its provider and txn id exists: then it writes nothing and returns
	// that one with created=false. Of concurrent creators of one payment
	// exactly one creates. p is valid (PaymentCreateParams.Validate).
	//
	// With p.Transition, the payment and the transition of its order commit
	// together or not at all, the transition applied as OrderTransition
	// applies it: a payment that exists is returned with created=false and
	// the order is not moved; otherwise, when the order has moved on, it
	// is ErrStale and nothing is written.
	//
	// A payment whose transaction is held without its order (HeldPayment)
	// and that HeldTakes says the held payment takes is ErrPaymentHeld,
	// nothing written and no order moved: one capture is never counted
	// both as held and as a payment (S3). The check is in the write's own
	// statement (or transaction), not a read of its own.
	PaymentCreate(ctx context.Context, p *PaymentCreateParams) (pay *Payment, created bool, err error)

	// PaymentGet returns the payment of a provider's transaction, or
	// ErrPaymentNotFound.
	PaymentGet(ctx context.Context, provider, txnID string) (*Payment, error)

	// PaymentList returns the payments matching p, by id.
	PaymentList(ctx context.Context, p *PaymentListParams) ([]*Payment, error)

	// PaymentUpdate moves a payment from status p.From to p.To, setting the
	// fields p names, and writes p.Outbox with their deliveries (and
	// p.Review, when set, as given), all in one transaction. It returns the
	// payment as updated; ErrStale, writing nothing, when the payment is no
	// longer in p.From; ErrPaymentNotFound. p is valid
	// (PaymentUpdateParams.Validate).
	PaymentUpdate(ctx context.Context, p *PaymentUpdateParams) (*Payment, error)

	// HeldPaymentCreate records h, a payment held without its order, with
	// UpdatedAt its CreatedAt, and returns it with created=true, unless one
	// of its provider and txn id exists: then it writes nothing and returns
	// that one with created=false, whatever else it says (the engine
	// compares them). Of concurrent creators exactly one creates. h is valid
	// (HeldPayment.Validate).
	HeldPaymentCreate(ctx context.Context, h *HeldPayment) (got *HeldPayment, created bool, err error)

	// HeldPaymentGet returns the held payment with id, or
	// ErrHeldPaymentNotFound.
	HeldPaymentGet(ctx context.Context, id int64) (*HeldPayment, error)

	// HeldPaymentList returns the held payments matching p, by id.
	HeldPaymentList(ctx context.Context, p *HeldPaymentListParams) ([]*HeldPayment, error)

	// HeldPaymentUpdate moves a held payment from status p.From to p.To,
	// setting the fields p sets, and returns it as updated; ErrStale,
	// writing nothing, when it is no longer in p.From;
	// ErrHeldPaymentNotFound. p is valid (HeldPaymentUpdateParams.Validate).
	HeldPaymentUpdate(ctx context.Context, p *HeldPaymentUpdateParams) (*HeldPayment, error)

	// OrderRefundCreate records a merchant refund as given (the engine
	// records it requested), with UpdatedAt its CreatedAt, and returns it
	// with created=true, unless one with its Key exists: then it writes
	// nothing and returns that one with created=false, whatever else it
	// says (the engine compares them).
	OrderRefundCreate(ctx context.Context, r *OrderRefund) (ref *OrderRefund, created bool, err error)

	// OrderRefundList returns the refunds of an order, oldest first.
	OrderRefundList(ctx context.Context, orderID int64) ([]*OrderRefund, error)

	// OrderRefundUpdate moves a refund from p.From to p.To, and writes
	// p.Review, when set, open and holding the refund (OrderRefundID p.ID),
	// in one transaction. It returns the refund as updated, or ErrStale,
	// writing nothing, when the refund is not in p.From (or does not
	// exist). p is valid (OrderRefundUpdateParams.Validate).
	OrderRefundUpdate(ctx context.Context, p *OrderRefundUpdateParams) (*OrderRefund, error)

	// GroupMemberAdd records a member of a group, pending, with no attempts
	// and UpdatedAt its JoinedAt, and returns it with created=true, unless
	// the group has a member with its UserID: then it writes nothing and
	// returns that one with created=false. A Key that another member holds
	// is an ECONFLICT error and writes nothing.
	GroupMemberAdd(ctx context.Context, m *GroupMember) (got *GroupMember, created bool, err error)

	// GroupMemberList returns the members of a group, by id.
	GroupMemberList(ctx context.Context, orderID int64) ([]*GroupMember, error)

	// ChargeSaltKeep records salt (not empty) as the salt of the database's
	// charge keys unless it keeps one already, and returns the one it
	// keeps: the first kept, for good, whoever asks, however many ask at
	// once.
	ChargeSaltKeep(ctx context.Context, salt string) (string, error)

	// GroupMemberGet returns the member whose charge has idempotency key
	// key (the order number its provider knows the charge by), or
	// ErrGroupMemberNotFound.
	GroupMemberGet(ctx context.Context, key string) (*GroupMember, error)

	// GroupMemberGetByTxn returns the member whose charge is provider's
	// transaction txnID (the first, by id, should several say so), or
	// ErrGroupMemberNotFound; an empty txnID is no member's.
	GroupMemberGetByTxn(ctx context.Context, provider, txnID string) (*GroupMember, error)

	// GroupMemberUpdate moves a member's charge from p.From to p.To, setting
	// the fields p names (one more attempt when p.Attempt; TxnID and
	// ChargedAt when set; CapturedAmount and CapturedCurrency when
	// CapturedCurrency is set; LastError always, to p.Error) and UpdatedAt
	// to p.At, and writes p.Review, when set, as given (once: Review), in
	// one transaction. It returns the member as updated, or ErrStale,
	// writing nothing, when the member is not in p.From (or does not
	// exist).
	GroupMemberUpdate(ctx context.Context, p *GroupMemberUpdateParams) (*GroupMember, error)

	// CardIssue records the cards of order p.OrderID, all active and unused,
	// in one transaction, and returns them by id, which follows the order
	// given, with created=true; unless the order has cards already (active
	// or voided): then it writes nothing and returns those, by id, with
	// created=false, so that issuing is idempotent per order and an order
	// whose cards were revoked never gets new ones. Of concurrent issuers
	// for one order exactly one creates. An order that does not exist is
	// ErrOrderNotFound. p is valid (CardIssueParams.Validate).
	CardIssue(ctx context.Context, p *CardIssueParams) (got []*Card, created bool, err error)

	// CardList returns the cards of an order, by id.
	CardList(ctx context.Context, orderID int64) ([]*Card, error)

	// CardGet returns a card, or ErrCardNotFound.
	CardGet(ctx context.Context, id int64) (*Card, error)

	// CardRevoke voids every active card of an order, deducting the visits
	// each count card has left, and returns the cards it voided, by id (none
	// when there were none, which is not an error).
	CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*Card, error)

	// CardUse counts one visit of active card p.CardID (a count card only
	// while visits are left) and records it as a CardVisit of p.Key (none
	// when "") at p.At, in one transaction. It returns the card as updated.
	// Errors, writing nothing: ErrStale when the card is voided or used up;
	// ErrCardNotFound; ErrCardVisitExists when a visit holds p.Key, whatever
	// card it was of (the engine tells a retry from a clash). p is valid
	// (CardUseParams.Validate).
	CardUse(ctx context.Context, p *CardUseParams) (*Card, error)

	// CardVisitGet returns the visit counted under idempotency key key, or
	// ErrCardVisitNotFound.
	CardVisitGet(ctx context.Context, key string) (*CardVisit, error)

	// ReviewList returns reviews matching p, newest first (created_at, then
	// id, descending), at most p.Limit of them; a Limit of zero or less does
	// not limit. With p.Before it returns only those strictly older than
	// that position, (created_at, id) < (p.Before.CreatedAt, p.Before.ID),
	// so that a caller pages through every review by passing the last one
	// it was given, each once.
	ReviewList(ctx context.Context, p *ReviewListParams) ([]*Review, error)

	// ReviewGet returns a review, or ErrReviewNotFound.
	ReviewGet(ctx context.Context, id int64) (*Review, error)

	// ReviewCreate creates r, open, and returns it with its id: a review
	// that no change of a payment, refund, member or delivery carries (a
	// verified callback Lapse cannot read, on the desk of its order). When
	// an open review of its order and delivery has its reason, it writes
	// nothing and returns that one (an open review is one per order,
	// delivery and reason). r is valid (Review.Validate).
	ReviewCreate(ctx context.Context, r *Review) (*Review, error)

	// ReviewResolve resolves, in one transaction, the open reviews p names:
	// the review p.ID, or every open review of the delivery p.DeliveryID,
	// or of the order p.OrderID, that holds no refund (OrderRefundID 0).
	// Each gets ResolvedAt p.At, ResolvedBy p.By and Note p.Note (byte for
	// byte), and it returns them as resolved, by id. Of concurrent resolvers of one review exactly one resolves it; the
	// others find it resolved. By p.ID, a review that does not exist is
	// ErrReviewNotFound, and one that is resolved already is
	// ErrReviewResolved, refined with when and by whom, and nothing is
	// written; by delivery or order, none open is not an error, and it
	// returns none. p is valid (ReviewResolveParams.Validate).
	ReviewResolve(ctx context.Context, p *ReviewResolveParams) ([]*Review, error)

	// Tx runs fn in one transaction on a Store bound to it, committing when
	// fn returns nil and rolling back otherwise (a panic in fn rolls back
	// and panics on). It returns fn's error as it is.
	//
	// On a Store that is already a transaction, Tx runs fn in a savepoint of
	// it: an error from fn undoes what fn wrote, and only that, and leaves
	// the outer transaction usable even when a statement inside fn failed;
	// a nil keeps fn's writes for the outer transaction to commit or roll
	// back.
	//
	// Inside Tx, a method that fails has written nothing. After a refusal
	// that a method documents with a sentinel (ErrStale, ErrStockShort, …)
	// the transaction goes on as before; after any other error it may be
	// aborted (PostgreSQL aborts a transaction at a failed statement): fn
	// must return an error, or have made the call in a nested Tx to go on
	// without it.
	Tx(ctx context.Context, fn func(tx Store) error) error

	// Ping checks that the database answers.
	Ping(ctx context.Context) error

	// ServerTime returns the time by the database's clock, UTC, as precise
	// as the database tells it (microseconds; milliseconds on SQLite, whose
	// clock is its process's). Lapse decides by its processes' clocks
	// (Clock), which must agree: the database's is the one clock that every
	// process of a deployment reaches, against which each checks its own.
	ServerTime(ctx context.Context) (time.Time, error)

	// Close releases the store's connections.
	Close() error
}

// OrderDeadlineListParams pages through the orders that have a deadline.
type OrderDeadlineListParams struct {
	After *OrderDeadline // exclusive; nil from the start (only DeadlineAt and ID are read)
	Limit int
}

// OrderStateCount is how many open orders of a flow are in a state (N),
// how many of those have a deadline (Timed), and how many have items or a
// coupon (Holding): what a flow that holds reserved and locked for them.
type OrderStateCount struct {
	Flow              string
	State             State
	N, Timed, Holding int64
}

// OrderDeadline is an order's pending deadline.
type OrderDeadline struct {
	ID         int64
	OrderNo    string
	DeadlineAt time.Time
}

// OrderCreateParams is a new order, its creation log row and its outbox rows,
// all computed above the seam.
type OrderCreateParams struct {
	Order  *Order           // ID, Version are assigned by the store; Version starts at 1
	Log    TransitionRecord // ID, OrderID and Version are assigned by the store, as the order's
	Outbox []OutboxEvent
}

// OrderCreateWith is what a creation holds and records besides its order,
// for an OrderCreateWither.
type OrderCreateWith struct {
	// Reserve, when set, is reserved for the new order in the stock
	// ledger, as StockMove of kind StockReserve at the order's CreatedAt:
	// one line per SKU, in SKU order (StockLines).
	Reserve []Item
	// Audit, when set, is the creation's row of the audit log, appended as
	// AuditAppend appends it (At truncated, unsealed); its Batch is 0.
	Audit *AuditEntry
}

// OrderCreateWither is a store whose creations can hold stock and append
// their audit row without a transaction of the caller's, so that the store
// may write concurrent creations together, sharing statements and commits.
// The engine uses it when the store has it (PostgreSQL does; the other
// stores take a transaction per creation, Tx with OrderCreate, StockMove
// and AuditAppend in it).
//
// OrderCreateWith is OrderCreate, and, only when it creates the order, in
// the same transaction: the reservation of w.Reserve and the row w.Audit.
// A reservation that is refused is StockMove's error (ErrStockNotFound,
// ErrStockShort, as StockRefusal says) and writes nothing at all: no order,
// no row. When the order_no exists it returns that order, created=false,
// and writes nothing. Outside Tx only; params are valid (Validate).
type OrderCreateWither interface {
	OrderCreateWith(ctx context.Context, p *OrderCreateParams, w OrderCreateWith) (*Order, bool, error)
}

// OrderListParams filters OrderList. Zero values do not filter.
type OrderListParams struct {
	State  State
	UserID string
	Flow   string
	// CreatedFrom (inclusive) and CreatedTo (exclusive) bound created_at
	// at the time as given, finer than a store keeps times or not: a store
	// compares with Ceil of each.
	CreatedFrom *time.Time
	CreatedTo   *time.Time
	// Before continues a listing: only orders older than this position
	// (created_at, id) are returned.
	Before *OrderCursor
	Limit  int
	// Probes includes the synthetic probe's orders (ProbeOrderPrefix),
	// which are left out otherwise.
	Probes bool
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
	// ClosedDeadlineAt, set with ClosedAt, is the deadline the order had
	// (Order.ClosedDeadlineAt).
	ClosedDeadlineAt *time.Time
	CloseReason      string
	FiredBy          FiredBy
	Actor            string
	Reason           string
	At               time.Time
	Outbox           []OutboxEvent
}

// OrderDeadlineSetParams moves an order's deadline.
type OrderDeadlineSetParams struct {
	OrderID     int64
	FromState   State
	FromVersion int64
	DeadlineAt  time.Time
	At          time.Time
	Outbox      []OutboxEvent
	// IntentAt and IntentProvider, when IntentAt is set, record a payment
	// intent with the move (the order's IntentAt and IntentProvider).
	IntentAt       *time.Time
	IntentProvider string
	// PayBy, when set, becomes the order's PayBy.
	PayBy *time.Time
}

// OrderClaimDueParams selects due orders.
type OrderClaimDueParams struct {
	DueBy time.Time
	Flows []string
	Limit int

	// From and FromID, when set, skip orders before them in (deadline, id)
	// order: those whose deadline is before From, and, due at From itself,
	// those whose id is at or below FromID. The claim reads the due index
	// from there. A claimer that burns a backlog passes the deadline and id
	// of the last order of its last claim, so that each claim starts where
	// the last one stopped instead of stepping again over the index entries
	// of orders it closed, which vacuum removes only later (and a
	// long-running transaction elsewhere keeps it from removing), even when
	// they all share one deadline. Zero reads from the start.
	From   time.Time
	FromID int64
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

// DeliveryClaimParams selects and leases due deliveries.
type DeliveryClaimParams struct {
	Now         time.Time
	Owner       string
	LeaseUntil  time.Time
	Subscribers []string
	Limit       int
}

// DeliveryFinishParams is the outcome of one attempt.
type DeliveryFinishParams struct {
	ID      int64
	Owner   string
	Attempt int            // the lease token: must equal the delivery's Attempts
	Status  DeliveryStatus // done, pending (retry at NextAttemptAt) or dead
	// NextAttemptAt is when a pending delivery is due again.
	NextAttemptAt time.Time
	Unknown       bool // the outcome of this attempt is unknown
	// CutShort marks an attempt that did not end through its subscriber
	// (cut short by a stop, or by a lease lost or in doubt): the
	// delivery's Unfinished stays as it is. Any other finish sets it to 0.
	CutShort bool
	Error    string // "" when done
	At       time.Time
	Record   DeliveryAttempt // the attempt row
	Review   *Review         // created when the delivery dies
	Outbox   []OutboxEvent   // events written with it (delivery.dead)
}

// DeliveryDoneManyParams records attempts of one worker that delivered.
type DeliveryDoneManyParams struct {
	Owner string
	At    time.Time
	// Attempts are the attempt rows, one per delivery: DeliveryID and
	// Attempt (the lease token) name the lease each finishes under.
	Attempts []DeliveryAttempt
}

// DeliveryRenewParams extends the leases of one worker's attempts in flight.
type DeliveryRenewParams struct {
	Owner      string
	Leases     []DeliveryLease
	LeaseUntil time.Time
}

// DeliveryLease names the lease of one attempt: the delivery and the attempt
// it runs, which is the lease token (the delivery's Attempts when claimed).
type DeliveryLease struct {
	ID      int64
	Attempt int
}

// DeliveryRetryParams retries a dead delivery.
type DeliveryRetryParams struct {
	ID int64
	At time.Time
}

// DeliveryCounts are the delivery backlogs.
type DeliveryCounts struct {
	Pending       int64
	Dead          int64
	OldestPending *time.Time // the earliest next attempt of a pending delivery
}

// DeliveryStatusCount is how many deliveries of one subscriber have one
// status.
type DeliveryStatusCount struct {
	Subscriber string
	Status     DeliveryStatus
	N          int64
}

// StockSetParams sets a SKU's on-hand quantity.
type StockSetParams struct {
	SKU    string
	OnHand int64
	At     time.Time
}

// StockMoveParams is one kind of move over the lines of an order.
type StockMoveParams struct {
	OrderID int64
	Kind    StockMoveKind
	Lines   []Item // one line per SKU, in SKU order, as StockLines makes them
	At      time.Time
}

// CouponCreateParams adds a coupon.
type CouponCreateParams struct {
	Code string
	At   time.Time
}

// CouponMoveParams moves a coupon for an order.
type CouponMoveParams struct {
	Code    string
	OrderID int64
	OrderNo string // the order that holds (or takes) the coupon
	Kind    CouponMoveKind
	At      time.Time
}

// EventCreate is the event of the creation row of the transition log.
const EventCreate Event = "CREATE"

// PaymentCreateParams records a payment. Payment.ID, CreatedAt and UpdatedAt
// are set by the store (the latter two from Payment.CreatedAt when set).
type PaymentCreateParams struct {
	Payment *Payment
	Outbox  []OutboxEvent
	Review  *Review // created, open, with the payment when set (a payment an operator must look at)
	// Transition, when set, is the transition of the payment's order that
	// the payment makes (a payment applied): it carries the events, so
	// Outbox and Review are empty.
	Transition *OrderTransitionParams
}

// PaymentListParams filters payments. Zero fields do not filter; a Limit of
// zero or less does not limit.
type PaymentListParams struct {
	OrderID int64
	Status  PaymentStatus
	AfterID int64 // only payments with a greater id
	Limit   int
}

// PaymentUpdateParams is a guarded change of a payment's status.
type PaymentUpdateParams struct {
	ID         int64
	From, To   PaymentStatus
	Reason     string     // kept unless set
	RefundID   string     // kept unless set
	RefundedAt *time.Time // kept unless set
	At         time.Time
	Outbox     []OutboxEvent
	Review     *Review // created, open, with the change when set
}
