package lapse

import (
	"context"
	"time"
)

// AccessStore keeps who may do what: the API keys of services, the
// operators (people) with their sessions, the requests waiting for a second
// operator's approval, the audit log and the batches of manual closes. A
// store only reads and writes these records; the rules (hashing, scopes,
// second factor, lockout, four eyes, the audit chain) live above it, in
// package access and in AuditAppend, AuditSeal and AuditVerify. All three
// built-in stores implement it, on their transactions too (a Store given
// to a Tx function is also an AccessStore), and pass storetest.RunAccess.
//
// Lookups that find nothing, and updates, revokes and decisions of a record
// that is not there, return an error wrapping ErrAccessNotFound; deletes of
// one that is not there do nothing. Times are kept as Store keeps them: UTC
// microseconds; a zero time is stored as absent and comes back zero. Byte
// and string slices (Hash, Scopes in their order, Request, Selector, Params)
// come back as written, byte for byte; an empty one may come back nil.
type AccessStore interface {
	// APIKeyCreate records k (ID is ignored) and returns it with its ID.
	// A key whose Prefix is taken is ErrAccessExists.
	APIKeyCreate(ctx context.Context, k *APIKey) (*APIKey, error)
	// APIKeyGet returns the key with prefix, revoked or not.
	APIKeyGet(ctx context.Context, prefix string) (*APIKey, error)
	// APIKeyList returns every key, revoked ones too, by ID.
	APIKeyList(ctx context.Context) ([]*APIKey, error)
	// APIKeyRevoke sets the RevokedAt of the key with prefix to at unless it
	// is already revoked, and returns the key as it is now.
	APIKeyRevoke(ctx context.Context, prefix string, at time.Time) (*APIKey, error)

	// OperatorCreate records o (ID is ignored) and returns it with its ID.
	// A taken Name is ErrAccessExists.
	OperatorCreate(ctx context.Context, o *Operator) (*Operator, error)
	// OperatorGet returns the operator named name.
	OperatorGet(ctx context.Context, name string) (*Operator, error)
	// OperatorLock is OperatorGet that, inside Tx, also locks the
	// operator's row until the transaction ends, so that a read, a decision
	// and an OperatorUpdate are one step (a login counting its failures).
	// Outside Tx it is OperatorGet.
	OperatorLock(ctx context.Context, name string) (*Operator, error)
	// OperatorList returns every operator, by ID.
	OperatorList(ctx context.Context) ([]*Operator, error)
	// OperatorUpdate writes every field of o but ID, Name and CreatedAt to
	// the operator with o.ID.
	OperatorUpdate(ctx context.Context, o *Operator) error
	// OperatorCount counts the operators that are not disabled (whose
	// DisabledAt is zero).
	OperatorCount(ctx context.Context) (int64, error)

	// SessionCreate records s.
	SessionCreate(ctx context.Context, s *Session) error
	// SessionGet returns the session whose ID (the hash of its token) is id.
	SessionGet(ctx context.Context, id []byte) (*Session, error)
	// SessionUpdate writes s.ExpiresAt and s.SecondFactorAt to the session
	// with s.ID. (The TOTP step last accepted is the operator's,
	// Operator.LastTOTPStep, not the session's.)
	SessionUpdate(ctx context.Context, s *Session) error
	// SessionDelete deletes the session with id, if there is one.
	SessionDelete(ctx context.Context, id []byte) error
	// SessionEndOperator ends every session of an operator in force at at:
	// their ExpiresAt becomes at. Sessions ended already are left as they
	// are.
	SessionEndOperator(ctx context.Context, operatorID int64, at time.Time) error

	// StakeCreate records st (ID is ignored).
	StakeCreate(ctx context.Context, st *Stake) error
	// StakeSum returns the sum of the Count of the stakes of the operator
	// with operatorID whose At is after since (0 when there is none).
	StakeSum(ctx context.Context, operatorID int64, since time.Time) (int64, error)

	// ApprovalCreate records a (ID is ignored) and returns it with its ID.
	ApprovalCreate(ctx context.Context, a *Approval) (*Approval, error)
	// ApprovalGet returns the approval request with id.
	ApprovalGet(ctx context.Context, id int64) (*Approval, error)
	// ApprovalList returns approval requests of p.Status (every status when
	// empty), newest first (highest ID), with IDs below p.Before when it is
	// not zero, at most p.Limit (no limit when zero or less).
	ApprovalList(ctx context.Context, p *ApprovalListParams) ([]*Approval, error)
	// ApprovalDecide moves the request p.ID from p.From to p.To, writing
	// the approver, decision time and result p gives, and returns it as it
	// is now; a request that is not in p.From is ErrStale and is not
	// written, so that of concurrent deciders exactly one moves it. It is
	// the only way a request changes.
	ApprovalDecide(ctx context.Context, p *ApprovalDecideParams) (*Approval, error)

	// AuditInsert appends e to the audit log unsealed (with no Seq,
	// PrevHash or Hash, whatever e says) and sets e.ID to the row's ID,
	// which is higher than that of every row inserted before it. It takes
	// no lock that another AuditInsert waits for. Use AuditAppend.
	AuditInsert(ctx context.Context, e *AuditEntry) error
	// AuditList returns rows matching p (each filter that is set equal to
	// the row's field), sealed or not, in ID order (descending when
	// p.Descending), after (or, descending, before) the ID p.Cursor when
	// it is not zero, at most p.Limit (no limit when zero or less).
	AuditList(ctx context.Context, p *AuditListParams) ([]*AuditEntry, error)

	// AuditHead returns the sequence number and hash of the last row
	// sealed (0 and nil when none is). Inside Tx it locks the head until
	// the transaction ends, waiting for a transaction that holds it;
	// outside Tx it only reads. A head that is not there (removed by hand:
	// every migrated store has one) is an error wrapping
	// ErrAuditHeadGone.
	AuditHead(ctx context.Context) (seq int64, hash []byte, err error)
	// AuditHeadLock is AuditHead, inside Tx, that does not wait: when
	// another transaction holds the head it returns locked false (and
	// locks nothing), otherwise it locks the head until the transaction
	// ends and returns it with locked true. A head that is not there is
	// not one another transaction holds: it is AuditHead's
	// ErrAuditHeadGone. Outside Tx it is an EINVALID error.
	AuditHeadLock(ctx context.Context) (seq int64, hash []byte, locked bool, err error)
	// AuditUnsealedList returns up to limit (at least one) unsealed rows
	// that have committed, lowest ID first.
	AuditUnsealedList(ctx context.Context, limit int) ([]*AuditEntry, error)
	// AuditUnsealedCount counts the unsealed rows that have committed, and
	// returns the earliest At among them (zero when there is none).
	AuditUnsealedCount(ctx context.Context) (n int64, oldest time.Time, err error)
	// AuditSealUpdate seals rows: it writes the Seq, PrevHash and Hash of
	// each onto the unsealed row with its ID, and makes the last of them
	// the head. Only inside Tx, after AuditHeadLock (use AuditSeal), with
	// rows numbered on from the head one after the other, each chained to
	// the one before it, as AuditSeal numbers them. Outside Tx it is an
	// EINVALID error; a first row whose Seq and PrevHash do not follow the
	// head as it is now, or a row that is sealed already or not there, is
	// ErrStale; neither writes anything.
	AuditSealUpdate(ctx context.Context, rows []*AuditEntry) error
	// AuditChainList returns up to limit sealed rows (every one when zero
	// or less) with a Seq above after, in Seq order.
	AuditChainList(ctx context.Context, after int64, limit int) ([]*AuditEntry, error)

	// CloseBatchCreate records b (ID is ignored) and its items, one per
	// order number (a number given twice is one item), pending, in one
	// transaction, and returns b with its ID.
	CloseBatchCreate(ctx context.Context, b *CloseBatch, orderNos []string) (*CloseBatch, error)
	// CloseBatchGet returns the batch with id.
	CloseBatchGet(ctx context.Context, id int64) (*CloseBatch, error)
	// CloseBatchList returns batches of p.Status (every status when empty),
	// newest first (highest ID), at most p.Limit (no limit when zero or
	// less).
	CloseBatchList(ctx context.Context, p *CloseBatchListParams) ([]*CloseBatch, error)
	// CloseBatchLock locks the row of batch id until the transaction ends:
	// shared when share is set (holders of shared locks do not wait for one
	// another) and exclusive otherwise, waiting for holders whose lock
	// conflicts. A batch that is not there locks nothing and is no error.
	// Outside Tx it does nothing. (On SQLite a transaction holds the whole
	// database's write lock, which does as well.)
	CloseBatchLock(ctx context.Context, id int64, share bool) error
	// CloseBatchUpdate writes b's Status, counts (Total, Closed, Skipped,
	// Failed) and FinishedAt to the batch with b.ID.
	CloseBatchUpdate(ctx context.Context, b *CloseBatch) error
	// CloseItemList returns up to limit items (every one when zero or less)
	// of a batch in status (every status when empty) with order numbers
	// after after, by order number: "after" and the order agree, so that
	// paging on with the last number returned visits each item once.
	CloseItemList(ctx context.Context, batchID int64, status CloseItemStatus, after string, limit int) ([]*CloseItem, error)
	// CloseItemUpdate writes it.Status and it.Detail to the item of
	// it.BatchID and it.OrderNo.
	CloseItemUpdate(ctx context.Context, it *CloseItem) error
	// CloseItemCount counts a batch's items by status; a status of no item
	// may be absent from the map.
	CloseItemCount(ctx context.Context, batchID int64) (map[CloseItemStatus]int64, error)
}

// ErrAccessNotFound: no API key, operator, session, approval request or
// close batch by that name or id.
var ErrAccessNotFound = &Error{Code: ENOTFOUND, Message: "no such key, operator, session, approval or batch"}

// ErrAccessExists: an API key prefix or an operator name is taken.
var ErrAccessExists = &Error{Code: ECONFLICT, Message: "an API key or operator by that name exists"}

// APIKey is a service's credential. The key itself is shown once, when it
// is made; what is kept is its Prefix (the part before the secret, by which
// it is found) and the SHA-256 of the whole key.
type APIKey struct {
	ID        int64
	Prefix    string
	Name      string
	Scopes    []string
	Hash      []byte
	CreatedAt time.Time
	CreatedBy string
	RevokedAt time.Time // zero: the key is in force
}

// Operator is a person who logs in (with a password and a TOTP code) to the
// console or the API, with a role. PasswordHash is an encoded memory-hard
// hash (argon2id); TOTPSecret is the base32 secret of their authenticator.
type Operator struct {
	ID           int64
	Name         string
	Role         string // viewer, operator or admin
	PasswordHash string
	TOTPSecret   string
	// FailedLogins counts failed logins since the last good one;
	// LockedUntil refuses logins until then.
	FailedLogins int
	LockedUntil  time.Time
	// LastTOTPStep is the time step of the last code accepted, so that a
	// code is never accepted twice.
	LastTOTPStep int64
	Lang         string // the console's language: en or zh
	TimeZone     string // an IANA zone for the console's times
	CreatedAt    time.Time
	DisabledAt   time.Time // zero: the operator may log in
}

// Session is an operator's login. Its ID is the SHA-256 of the token in the
// operator's cookie, which is never kept.
type Session struct {
	ID         []byte
	OperatorID int64
	CreatedAt  time.Time
	ExpiresAt  time.Time
	// SecondFactorAt is when the operator last gave a TOTP code in this
	// session (zero: never since login); risky actions need it recent.
	SecondFactorAt time.Time
	ClientAddr     string
}

// Stake is what an operator's risky action put at stake on their own word,
// carried out without a second operator's approval: the orders of a manual
// close, the members of a group buy cancelled while open, an order ended by
// an event or whose deadline was brought earlier (an open group buy's: its
// members). Such actions add
// up toward the approval threshold over a window (access.Config), so that
// an operator cannot go past it in pieces.
type Stake struct {
	ID         int64
	OperatorID int64
	Action     string // the audit action, e.g. "close.batch"
	Target     string // the audit target
	Count      int64  // orders
	At         time.Time
}
