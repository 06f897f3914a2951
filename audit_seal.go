package lapse

import "context"

// DefaultAuditSealBatch is how many rows AuditSeal seals per transaction
// when it is given no batch size.
const DefaultAuditSealBatch = 1000

// ErrAuditBusy: another transaction holds the audit log's head, most likely
// another sealer, which is sealing the rows.
var ErrAuditBusy = &Error{Code: ECONFLICT, Message: "another sealer holds the audit log's head"}

// ErrAuditHeadGone: the audit log's head, the record of the chain's last
// row that every store keeps from its first migration on, is not there,
// which only an edit of the database by hand can do. Nothing can be sealed
// onto a chain whose end is not known, and AuditVerify reports it as a
// break.
var ErrAuditHeadGone = &Error{Code: EINTERNAL, Message: "the audit log's head is gone: the database was edited by hand"}

// AuditSeal seals the unsealed rows of the audit log of s, which must also
// be an AccessStore, and returns how many it sealed. When it finds none
// (one query, outside a transaction) it is done. Otherwise each
// transaction takes the log's head without waiting (AuditHeadLock), reads
// up to batch unsealed rows in ID order (AuditUnsealedList: committed ones
// only), gives each the next Seq and chains its hash (AuditHash) onto the
// one before, and writes them with the head (AuditSealUpdate); it goes on
// while a transaction finds a full batch.
//
// Any number of sealers, in any number of processes, may run at once: the
// head's lock makes them take turns, and one that finds the head held by
// another returns at once, with what it sealed so far and ErrAuditBusy: the
// other is sealing. A row that commits after rows of higher IDs were sealed
// is sealed by the next pass, with the next Seq, so that every committed
// row is sealed once, and none is skipped. A row or head that moved under
// the lock (which only an edit of the database by hand can do) is the
// store's ErrStale, and nothing of that transaction is sealed; a head that
// is not there is ErrAuditHeadGone, and nothing is sealed.
func AuditSeal(ctx context.Context, s Store, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultAuditSealBatch
	}
	as, ok := s.(AccessStore)
	if !ok {
		return 0, Errorf(EINTERNAL, "the store %T keeps no audit log", s)
	}
	// A look outside a transaction first, so that a pass with nothing to
	// seal, the idle sealer's every pass, is one query.
	if rows, err := as.AuditUnsealedList(ctx, 1); err != nil || len(rows) == 0 {
		return 0, err
	}
	total := 0
	for {
		n, busy := 0, false
		err := s.Tx(ctx, func(tx Store) error {
			n, busy = 0, false // a retried transaction starts over
			as, ok := tx.(AccessStore)
			if !ok {
				return Errorf(EINTERNAL, "the store %T keeps no audit log", tx)
			}
			seq, prev, locked, err := as.AuditHeadLock(ctx)
			if err != nil || !locked {
				busy = !locked
				return err
			}
			rows, err := as.AuditUnsealedList(ctx, batch)
			if err != nil || len(rows) == 0 {
				return err
			}
			for _, e := range rows {
				seq++
				e.Seq, e.PrevHash = seq, prev
				e.Hash = AuditHash(prev, e)
				prev = e.Hash
			}
			if err := as.AuditSealUpdate(ctx, rows); err != nil {
				return err
			}
			n = len(rows)
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if busy {
			return total, ErrAuditBusy
		}
		if n < batch {
			return total, nil
		}
	}
}
