package lapse

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AuditEntry is one row of the audit log: an action by a service's key, an
// operator or the command line, what it was about and how it ended.
//
// A row is appended unsealed, in the transaction of the action's effect
// (AuditAppend), so that appenders never wait for each other; a sealer
// (AuditSeal) then numbers it, chains it by hash to the row sealed before
// it, and moves the log's head, so that an edited, removed or inserted row
// is found (AuditVerify). The chain's order is the order rows were sealed
// in, which need not be the order of their IDs: a row whose transaction
// commits late is sealed by the next pass after it commits.
type AuditEntry struct {
	// ID numbers rows in the order they were inserted (not the order they
	// committed in); lists page by it. The hash does not cover it.
	ID int64
	// Seq is the row's place in the chain, 1, 2, 3, … in the order rows
	// were sealed; 0 while the row is unsealed.
	Seq       int64
	At        time.Time
	ActorKind string // key, operator, cli or system
	ActorID   string // the key's prefix, the operator's id, the OS user
	ActorName string
	Role      string // the operator's role, or the key's scopes
	Action    string // e.g. "refund.create", "order.close", "login"
	Target    string // e.g. "order:A-1", "delivery:7", "apikey:lk_…"
	Params    []byte // the action's parameters as JSON, kept byte for byte
	Result    string // "ok", or the error the action ended with
	Reason    string
	// SecondFactor is "totp" when the actor gave a fresh TOTP code for the
	// action, "" otherwise.
	SecondFactor string
	Approver     string // the second operator of a four-eyes action
	ApprovalID   int64
	Batch        int64 // the manual close batch the action belongs to
	ClientAddr   string
	PrevHash     []byte // the previous row's Hash; nil for the first row, and while unsealed
	Hash         []byte // AuditHash of this row; nil while unsealed
}

// Sealed reports whether e has its place in the chain (Seq and Hash).
func (e *AuditEntry) Sealed() bool { return e.Seq != 0 }

// AuditListParams filters AuditList; empty fields match every row, sealed
// or not.
type AuditListParams struct {
	Cursor     int64 // rows after this ID (before it, when Descending)
	Descending bool
	Limit      int
	ActorName  string
	Action     string
	Target     string
	Batch      int64
}

// AuditHash returns the hash of e chained to prev: SHA-256 over prev and an
// unambiguous encoding of every field of e but PrevHash and Hash, each
// length-prefixed, in a fixed order.
func AuditHash(prev []byte, e *AuditEntry) []byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	num := func(v int64) { field(strconv.AppendInt(nil, v, 10)) }
	field(prev)
	num(e.Seq)
	num(e.At.UnixMicro())
	for _, s := range []string{e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target} {
		field([]byte(s))
	}
	field(e.Params)
	for _, s := range []string{e.Result, e.Reason, e.SecondFactor, e.Approver} {
		field([]byte(s))
	}
	num(e.ApprovalID)
	num(e.Batch)
	field([]byte(e.ClientAddr))
	return h.Sum(nil)
}

// AuditAppend appends e to the audit log of s, unsealed: it inserts the row
// and sets e.ID, leaving its Seq, PrevHash and Hash for a sealer
// (AuditSeal). s is normally a transaction (a Store given to Tx), so that e
// commits or rolls back with whatever else the transaction wrote; it takes
// no lock that other appenders wait for, but one: the row of a manual close
// batch (e.Batch set) first takes a shared lock of the batch's row
// (CloseBatchLock), so that a batch's rows and an exclusive holder of its
// lock (package closes, settling an item) take turns. e.At is truncated as
// stored.
func AuditAppend(ctx context.Context, s AccessStore, e *AuditEntry) error {
	if e.Batch != 0 {
		if err := s.CloseBatchLock(ctx, e.Batch, true); err != nil {
			return err
		}
	}
	e.Seq, e.PrevHash, e.Hash, e.At = 0, nil, nil, Truncate(e.At)
	e.Params = AuditMaskParams(e.Action, e.Params)
	return s.AuditInsert(ctx, e)
}

// auditMasked names, for each action, the fields of its parameters that
// are credentials of someone's money, which the audit log keeps and shows
// only masked (MaskMethod): anyone who may read the log may read them.
var auditMasked = map[string][]string{
	"group.join": {"method"}, // a member's card token or wallet id
}

// AuditMaskParams returns params, the parameters of an audit row of action,
// with the fields auditMasked names for it masked (MaskMethod), matched in
// any case, as a request refused for a key not exactly as named is recorded
// too. Parameters of such an action that are not a JSON object are kept as
// their length and SHA-256 only, since what they hold cannot be told.
// AuditAppend masks what it writes; whoever shows a row masks it again, for
// rows written before it did (their hash covers them as they were written).
func AuditMaskParams(action string, params []byte) []byte {
	fields := auditMasked[action]
	if len(fields) == 0 || len(params) == 0 {
		return params
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(params, &obj); err != nil || obj == nil {
		sum := sha256.Sum256(params)
		out, _ := json.Marshal(map[string]any{"omitted_bytes": len(params), "sha256": hex.EncodeToString(sum[:])})
		return out
	}
	changed := false
	for k, raw := range obj {
		if !slices.ContainsFunc(fields, func(f string) bool { return strings.EqualFold(f, k) }) {
			continue
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			v = ""
		}
		if masked := MaskMethod(v); masked != v || json.Unmarshal(raw, new(string)) != nil {
			obj[k], _ = json.Marshal(masked)
			changed = true
		}
	}
	if !changed {
		return params
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return params
	}
	return out
}

// AuditRecord appends e to the audit log of s in a transaction of its own
// (or in the transaction s is bound to): for actions that changed nothing
// else, or failed. s must also be an AccessStore.
func AuditRecord(ctx context.Context, s Store, e *AuditEntry) error {
	return s.Tx(ctx, func(tx Store) error {
		as, ok := tx.(AccessStore)
		if !ok {
			return Errorf(EINTERNAL, "the store %T keeps no audit log", tx)
		}
		return AuditAppend(ctx, as, e)
	})
}
