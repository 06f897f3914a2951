package lapse

import "time"

// CloseBatch is one manual close (seed 004's batch marker): the orders an
// operator chose, by order numbers, user or time range, closed through their
// flows. Its items are frozen when it is made, so that a confirmed close
// closes what was previewed and a re-run after a crash carries on with the
// items still pending.
type CloseBatch struct {
	ID       int64
	Selector []byte // the selection, as JSON, as it was asked for
	Reason   string
	// CreatedBy names who asked (an audit actor: "operator:alice", "key:…",
	// "cli:root").
	CreatedBy  string
	ApprovalID int64 // the approval it needed, 0 when none
	CreatedAt  time.Time
	Status     CloseBatchStatus
	Total      int64
	Closed     int64 // closed by this batch
	Skipped    int64 // already closed, or in a state with no deadline
	Failed     int64
	FinishedAt time.Time
}

// CloseBatchStatus is where a close batch stands.
type CloseBatchStatus string

// Close batch statuses.
const (
	CloseBatchRunning CloseBatchStatus = "running" // items are pending
	CloseBatchDone    CloseBatchStatus = "done"    // every item is closed, skipped or failed
)

// CloseItem is one order of a close batch.
type CloseItem struct {
	BatchID int64
	OrderNo string
	Status  CloseItemStatus
	Detail  string // why it was skipped or failed
}

// CloseItemStatus is where one order of a close batch stands.
type CloseItemStatus string

// Close item statuses.
const (
	CloseItemPending CloseItemStatus = "pending"
	CloseItemClosed  CloseItemStatus = "closed"
	CloseItemSkipped CloseItemStatus = "skipped"
	CloseItemFailed  CloseItemStatus = "failed"
)

// CloseBatchListParams filters CloseBatchList.
type CloseBatchListParams struct {
	Status CloseBatchStatus
	Before int64 // only batches with a smaller id; 0: from the newest
	Limit  int
}
