package lapse

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
)

// AuditEntry is one row of the audit log: an action by a service's key, an
// operator or the command line, what it was about and how it ended, chained
// to the row before it by hash so that an edited, removed or inserted row is
// found (AuditVerify).
type AuditEntry struct {
	Seq       int64 // 1, 2, 3, … in the order rows were appended
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
	PrevHash     []byte // the previous row's Hash; nil for the first row
	Hash         []byte // AuditHash of this row
}

// AuditListParams filters AuditList; empty fields match every row.
type AuditListParams struct {
	Cursor     int64 // rows after this Seq (before it, when Descending)
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

// AuditAppend appends e to the audit log of s, which must be a transaction
// (a Store given to Tx): it takes the log's head, numbers and chains e to
// it, and inserts it, so that e commits or rolls back with whatever else the
// transaction wrote. e.At is truncated as stored.
func AuditAppend(ctx context.Context, s AccessStore, e *AuditEntry) error {
	seq, prev, err := s.AuditHead(ctx)
	if err != nil {
		return err
	}
	e.Seq, e.PrevHash, e.At = seq+1, prev, Truncate(e.At)
	e.Hash = AuditHash(prev, e)
	return s.AuditInsert(ctx, e)
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

// AuditBreak is where AuditVerify found the chain broken.
type AuditBreak struct {
	Seq    int64 // the first row that does not match (or the missing one)
	Reason string
}

func (b *AuditBreak) Error() string {
	return fmt.Sprintf("audit log broken at row %d: %s", b.Seq, b.Reason)
}

// AuditVerify walks the whole audit log of s, pageSize rows at a time, and
// checks that rows are numbered 1, 2, 3, … with none missing, that each
// chains to the one before it, that each row's hash matches its content,
// and that the last row is the head. It returns the number of rows checked
// and, when the chain is broken, an *AuditBreak naming the first row that
// does not match.
func AuditVerify(ctx context.Context, s AccessStore, pageSize int) (int64, error) {
	if pageSize <= 0 {
		pageSize = 1000
	}
	var (
		want int64 = 1
		prev []byte
	)
	for {
		rows, err := s.AuditList(ctx, &AuditListParams{Cursor: want - 1, Limit: pageSize})
		if err != nil {
			return want - 1, err
		}
		for _, e := range rows {
			switch {
			case e.Seq != want:
				return want - 1, &AuditBreak{Seq: want, Reason: fmt.Sprintf("row %d is missing: the next row is %d", want, e.Seq)}
			case !bytes.Equal(e.PrevHash, prev):
				return want - 1, &AuditBreak{Seq: e.Seq, Reason: "its previous hash is not the hash of the row before it"}
			case !bytes.Equal(e.Hash, AuditHash(prev, e)):
				return want - 1, &AuditBreak{Seq: e.Seq, Reason: "its content does not match its hash: the row was changed"}
			}
			prev, want = e.Hash, want+1
		}
		if len(rows) < pageSize {
			break
		}
	}
	seq, hash, err := s.AuditHead(ctx)
	if err != nil {
		return want - 1, err
	}
	if seq != want-1 || !bytes.Equal(hash, prev) {
		return want - 1, &AuditBreak{Seq: want, Reason: fmt.Sprintf("the log's head is row %d, but the rows end at %d: rows were removed from its end", seq, want-1)}
	}
	return want - 1, nil
}
