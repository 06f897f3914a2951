package lapse

import "time"

// ApprovalStatus is where an approval request (four eyes) stands. A request
// is made pending by an operator's risky action above a threshold; a second
// operator approves or rejects it, or it expires, or it is cancelled when
// its maker may no longer act (disabled, or reset: their credentials
// changed). An approved request is carried out at once and ends executed
// or failed.
type ApprovalStatus string

// Approval request statuses.
const (
	ApprovalPending  ApprovalStatus = "pending"  // waiting for a second operator
	ApprovalApproved ApprovalStatus = "approved" // approved, being carried out
	ApprovalExecuted ApprovalStatus = "executed" // carried out; Result says how
	ApprovalFailed   ApprovalStatus = "failed"   // approved, but the action failed; Result says why
	ApprovalRejected ApprovalStatus = "rejected" // the second operator said no
	ApprovalExpired  ApprovalStatus = "expired"  // nobody decided before ExpiresAt
	// ApprovalCancelled: withdrawn because its maker was disabled or reset
	// before anyone decided it; Result says by whom.
	ApprovalCancelled ApprovalStatus = "cancelled"
)

// Approval is a risky action held for a second operator: what it is
// (Action, Target, the money or count that made it need approval), the
// request to carry out when approved (Request, as the API got it), and who
// made and who decided it.
type Approval struct {
	ID        int64
	Action    string // the audit action, e.g. "refund.create"
	Target    string // e.g. "order:A-1"
	Amount    int64  // money at stake, in minor units of Currency (0: none)
	Currency  string
	Count     int64  // orders at stake (a manual close)
	Request   []byte // the request to carry out, as JSON
	Reason    string
	MakerID   int64
	MakerName string
	CreatedAt time.Time
	ExpiresAt time.Time

	Status       ApprovalStatus
	ApproverID   int64
	ApproverName string
	DecidedAt    time.Time
	Result       string
}

// ApprovalListParams filters ApprovalList.
type ApprovalListParams struct {
	Status ApprovalStatus
	Before int64 // 0: from the newest
	Limit  int
}

// ApprovalDecideParams is one move of an approval request.
type ApprovalDecideParams struct {
	ID           int64
	From, To     ApprovalStatus
	ApproverID   int64
	ApproverName string
	DecidedAt    time.Time
	Result       string
}
