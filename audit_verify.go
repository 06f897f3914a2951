package lapse

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// AuditBreak is where AuditVerify found the chain broken.
type AuditBreak struct {
	Seq    int64 // the first row that does not match (or the missing one)
	Reason string
}

func (b *AuditBreak) Error() string {
	return fmt.Sprintf("audit log broken at row %d: %s", b.Seq, b.Reason)
}

// AuditCheck is what AuditVerify found.
type AuditCheck struct {
	// Rows is how many sealed rows are verified: rows 1 to Rows of the
	// chain (those before the break, when there is one).
	Rows int64
	// Unsealed counts the rows appended but not sealed yet. They are in
	// the log (AuditList shows them), but the chain covers them only once
	// a sealer has run (AuditSeal), so until then an edit of one is not
	// found.
	Unsealed int64
	// OldestUnsealed is the At of the oldest unsealed row; zero when there
	// is none.
	OldestUnsealed time.Time
	// Head is the hash of row Rows: the chain's head when it is whole.
	Head []byte
}

// Checkpoint is the last row verified, to keep outside the database and
// give to AuditCheckpointHolds later.
func (c AuditCheck) Checkpoint() AuditCheckpoint { return AuditCheckpoint{Seq: c.Rows, Hash: c.Head} }

// AuditCheckpoint names a row of the sealed chain by its number and hash.
// The chain shows a row changed, removed or inserted, but not the newest
// rows removed together with the head that names them: the head lives in
// the same database. A checkpoint kept elsewhere (a ticket, a log shipper,
// a printout) shows that too, up to its row.
type AuditCheckpoint struct {
	Seq  int64
	Hash []byte
}

// String is the checkpoint as ParseAuditCheckpoint reads it: ROW:HASH, the
// hash in hex.
func (c AuditCheckpoint) String() string { return fmt.Sprintf("%d:%x", c.Seq, c.Hash) }

// ParseAuditCheckpoint reads ROW:HASH, as AuditCheckpoint.String writes
// it; anything else is EINVALID.
func ParseAuditCheckpoint(s string) (AuditCheckpoint, error) {
	bad := FieldError("checkpoint", "must be ROW:HASH as lapse audit verify prints it: a row number and 64 hex digits")
	seq, hash, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n < 1 || len(hash) != 2*sha256.Size {
		return AuditCheckpoint{}, bad
	}
	h, err := hex.DecodeString(hash)
	if err != nil {
		return AuditCheckpoint{}, bad
	}
	return AuditCheckpoint{Seq: n, Hash: h}, nil
}

// AuditCheckpointHolds checks, after AuditVerify found the chain c whole,
// that it still holds the row of cp with cp's hash: then every row up to
// it is as it was when cp was taken, since each row's hash covers the one
// before. It returns an *AuditBreak when the chain ends before cp's row
// (rows were removed from its end, head and all) or that row has another
// hash (the log was rewritten up to it).
func AuditCheckpointHolds(ctx context.Context, s AccessStore, c AuditCheck, cp AuditCheckpoint) error {
	if cp.Seq > c.Rows {
		return &AuditBreak{Seq: c.Rows + 1, Reason: fmt.Sprintf("the checkpoint names row %d, but the chain ends at row %d: rows were removed from its end", cp.Seq, c.Rows)}
	}
	rows, err := s.AuditChainList(ctx, cp.Seq-1, 1)
	if err != nil {
		return err
	}
	if len(rows) == 0 || rows[0].Seq != cp.Seq || !bytes.Equal(rows[0].Hash, cp.Hash) {
		return &AuditBreak{Seq: cp.Seq, Reason: "its hash is not the checkpoint's: the log was rewritten up to it"}
	}
	return nil
}

// UnsealedAge is how long the oldest unsealed row has waited for its seal
// at now; 0 when there is none.
func (c AuditCheck) UnsealedAge(now time.Time) time.Duration {
	if c.Unsealed == 0 || c.OldestUnsealed.IsZero() {
		return 0
	}
	return max(0, now.Sub(c.OldestUnsealed))
}

// AuditVerify walks the sealed chain of the audit log of s, pageSize rows
// at a time, and checks that rows are numbered 1, 2, 3, … with none
// missing and none numbered below 1, that each chains to the one before it, that each row's hash
// matches its content, and that the last row is the head; then it counts
// the rows not sealed yet. Rows a sealer seals while it walks are walked
// too. It returns what it checked and, when the chain is broken, an
// *AuditBreak naming the first row that does not match; a head that is not
// there (ErrAuditHeadGone) is a break at the last row walked.
func AuditVerify(ctx context.Context, s AccessStore, pageSize int) (AuditCheck, error) {
	if pageSize <= 0 {
		pageSize = 1000
	}
	var (
		c    AuditCheck
		prev []byte
	)
	// The chain is numbered from 1, and the walk reads from there: a row
	// numbered 0 or below is in the log (AuditList shows it) but outside
	// the chain, so that no hash covers it. No sealer numbers one so.
	switch low, err := s.AuditChainList(ctx, math.MinInt64, 1); {
	case err != nil:
		return c, err
	case len(low) > 0 && low[0].Seq < 1:
		return c, &AuditBreak{Seq: low[0].Seq, Reason: fmt.Sprintf("a row is numbered %d, outside the chain (1, 2, 3, …): it was added to the log, not sealed into it", low[0].Seq)}
	}
	// walk checks the rows after c.Rows up to a short page, and returns how
	// many it read.
	walk := func() (int, error) {
		read := 0
		for {
			rows, err := s.AuditChainList(ctx, c.Rows, pageSize)
			if err != nil {
				return read, err
			}
			for _, e := range rows {
				want := c.Rows + 1
				switch {
				case e.Seq != want:
					return read, &AuditBreak{Seq: want, Reason: fmt.Sprintf("row %d is missing: the next row is %d", want, e.Seq)}
				case !bytes.Equal(e.PrevHash, prev):
					return read, &AuditBreak{Seq: e.Seq, Reason: "its previous hash is not the hash of the row before it"}
				case !bytes.Equal(e.Hash, AuditHash(prev, e)):
					return read, &AuditBreak{Seq: e.Seq, Reason: "its content does not match its hash: the row was changed"}
				}
				prev, c.Rows = e.Hash, want
			}
			read += len(rows)
			if len(rows) < pageSize {
				return read, nil
			}
		}
	}
	if _, err := walk(); err != nil {
		return c, err
	}
	// A sealer moves the head and seals its rows in one transaction, and
	// the head is read after the rows: a head past the rows walked is rows
	// sealed meanwhile, which are walked in turn, unless there are none.
	for {
		seq, hash, err := s.AuditHead(ctx)
		if errors.Is(err, ErrAuditHeadGone) {
			return c, &AuditBreak{Seq: max(c.Rows, 1), Reason: "the log's head is gone: nothing names the chain's last row, " +
				"so rows removed from its end, or added after it, cannot be told"}
		}
		if err != nil {
			return c, err
		}
		if seq == c.Rows && bytes.Equal(hash, prev) {
			break
		}
		if seq == c.Rows {
			return c, &AuditBreak{Seq: max(seq, 1), Reason: "its hash is not the log's head: the row, or the head, was replaced"}
		}
		if seq < c.Rows {
			return c, &AuditBreak{Seq: seq + 1, Reason: fmt.Sprintf("the log's head is row %d, but the rows go on to %d: rows were added after its end", seq, c.Rows)}
		}
		n, err := walk()
		if err != nil {
			return c, err
		}
		if n == 0 {
			return c, &AuditBreak{Seq: c.Rows + 1, Reason: fmt.Sprintf("the log's head is row %d, but the rows end at %d: rows were removed from its end", seq, c.Rows)}
		}
	}
	c.Head = prev
	var err error
	c.Unsealed, c.OldestUnsealed, err = s.AuditUnsealedCount(ctx)
	return c, err
}
