package postgres

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The outbox is partitioned by event id, a day of UUIDv7 ids a partition
// (migration 0025): the pruner drops a day whose events may go as a table,
// and nothing is left for VACUUM. This file holds the partitions' layout:
// listing them, making the days ahead, and dropping a day.

// outboxDaysAhead is how many days after today's the store makes ahead of
// time, so that a pruner that stops for a while (its interval is an hour
// by default) leaves no day without its partition. An event whose day has
// none goes to outbox_default, which is correct and only slower to prune.
const outboxDaysAhead = 3

// outboxDropMax is the most rows a day's partition may still hold when it
// is dropped: they move to outbox_default while the outbox is locked
// against every reader and writer. A day that holds more (a subscriber
// that was down for hours, say) waits for a later pass.
const outboxDropMax = 10_000

// outboxLockTimeout bounds the wait for the outbox's locks that making or
// dropping a partition takes: every close waits behind such a lock once it
// is queued. A change that cannot have it in time is left for the next
// pass.
const outboxLockTimeout = "100ms"

// Kinds and keys of the partitions. A partition's key orders the pruner's
// walk over them: the events before the cut first, the days in order, the
// default last. A position of the walk is key<<32 | page.
const (
	keyBefore  = 1
	keyDefault = 1 << 30
	dayKeyBase = 2 // a day's key is dayKeyBase + its number of days since 1970
	dropPage   = 1<<32 - 1
)

// outboxPart is a partition of the outbox.
type outboxPart struct {
	name string
	key  int64
	// day tells a day's partition; hi is where a range partition's ids end.
	day bool
	hi  time.Time
}

// outboxBound reads the bounds of a range partition as PostgreSQL prints
// them.
var outboxBound = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'([0-9a-f-]{36})')\) TO \('([0-9a-f-]{36})'\)$`)

// outboxParts lists the partitions of the outbox, in the order of their
// keys; none when the outbox is not partitioned (a schema before 0025).
func outboxParts(ctx context.Context, db db) ([]outboxPart, error) {
	rows, err := db.Query(ctx, `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass('outbox')`)
	if err != nil {
		return nil, err
	}
	var parts []outboxPart
	var name, bound string
	_, err = pgx.ForEachRow(rows, []any{&name, &bound}, func() error {
		p := outboxPart{name: name}
		if bound == "DEFAULT" {
			p.key = keyDefault
			parts = append(parts, p)
			return nil
		}
		m := outboxBound.FindStringSubmatch(bound)
		if m == nil {
			return fmt.Errorf("outbox partition %s: unexpected bound %q", name, bound)
		}
		hi, err := uuidTime(m[3])
		if err != nil {
			return fmt.Errorf("outbox partition %s: %w", name, err)
		}
		p.hi = hi
		if m[1] == "MINVALUE" {
			p.key = keyBefore
		} else {
			lo, err := uuidTime(m[2])
			if err != nil {
				return fmt.Errorf("outbox partition %s: %w", name, err)
			}
			p.key, p.day = dayKeyBase+lo.UnixMilli()/int64(24*time.Hour/time.Millisecond), true
		}
		parts = append(parts, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(parts, func(a, b outboxPart) int { return int(a.key - b.key) })
	return parts, nil
}

// uuidTime returns the time of the first 48 bits of a UUID, the
// milliseconds of a UUIDv7.
func uuidTime(u string) (time.Time, error) {
	if len(u) != 36 {
		return time.Time{}, fmt.Errorf("bad uuid %q", u)
	}
	var b [8]byte
	if _, err := hex.Decode(b[2:], []byte(u[:8]+u[9:13])); err != nil {
		return time.Time{}, fmt.Errorf("bad uuid %q", u)
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:]))).UTC(), nil
}

// timeUUID returns the first UUID of the millisecond of t.
func timeUUID(t time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMilli()))
	h := hex.EncodeToString(b[2:])
	return h[:8] + "-" + h[8:] + "-0000-0000-000000000000"
}

// ensureOutboxDays makes the partitions of the days from the end of the
// last one up to outboxDaysAhead days after now's. A day begins where the
// last partition ends, or after the newest event in outbox_default in its
// range when there is one (which had no partition when it was written):
// attaching a partition checks that the default holds none of its ids.
// Each attach reads outbox_default, which holds few events, under a lock
// that every reader of the outbox waits for; one that cannot have its
// locks within outboxLockTimeout is left for the next call. It does
// nothing on an outbox that is not partitioned.
func (s *Store) ensureOutboxDays(ctx context.Context, now time.Time) error {
	parts, err := outboxParts(ctx, s.db)
	if err != nil || len(parts) == 0 {
		return err
	}
	var end time.Time // where the last range partition ends
	for _, p := range parts {
		if p.key != keyDefault && p.hi.After(end) {
			end = p.hi
		}
	}
	day := 24 * time.Hour
	target := now.UTC().Truncate(day).Add((outboxDaysAhead + 1) * day)
	if !end.Before(target) {
		return nil
	}
	var newest string
	err = s.db.QueryRow(ctx, `SELECT id::text FROM outbox_default WHERE id >= $1::uuid AND id < $2::uuid ORDER BY id DESC LIMIT 1`,
		timeUUID(end), timeUUID(target)).Scan(&newest)
	lo := end
	switch {
	case err == nil:
		t, err := uuidTime(newest)
		if err != nil {
			return err
		}
		lo = t.Add(time.Millisecond)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	for lo.Before(target) {
		hi := lo.Truncate(day).Add(day)
		if err := s.attachOutboxDay(ctx, lo, hi); err != nil {
			if isLockTimeout(err) {
				return nil
			}
			return fmt.Errorf("outbox partition of %s: %w", lo.Format(time.DateOnly), err)
		}
		lo = hi
	}
	return nil
}

// attachOutboxDay makes the partition of the ids from lo to hi, named after
// lo's day, in a savepoint of its own. The table is made apart and then
// attached, which takes a lighter lock on the outbox than making it as a
// partition would.
func (s *Store) attachOutboxDay(ctx context.Context, lo, hi time.Time) error {
	name := pgx.Identifier{"outbox_d" + lo.Format("20060102")}.Sanitize()
	return s.savepoint(ctx, func(tx pgx.Tx) error {
		for _, q := range []string{
			`SELECT set_config('lock_timeout', '` + outboxLockTimeout + `', true)`,
			`CREATE TABLE ` + name + ` (LIKE outbox INCLUDING DEFAULTS INCLUDING STORAGE)`,
			fmt.Sprintf(`ALTER TABLE outbox ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, name, timeUUID(lo), timeUUID(hi)),
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// dropOutboxDay drops the partition of a day whose events have been
// pruned: what it still holds (events that must stay) moves to
// outbox_default, whose range the day's ids fall in once it is detached.
// It reports whether it dropped it: a day that holds more than
// outboxDropMax rows, or whose locks are not to be had within
// outboxLockTimeout, stays for a later pass.
func (s *Store) dropOutboxDay(ctx context.Context, p outboxPart) (bool, error) {
	name := pgx.Identifier{p.name}.Sanitize()
	var left int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+name+` LIMIT `+fmt.Sprint(outboxDropMax+1)+`) r`).Scan(&left); err != nil {
		return false, err
	}
	if left > outboxDropMax {
		return false, nil
	}
	err := s.savepoint(ctx, func(tx pgx.Tx) error {
		for _, q := range []string{
			`SELECT set_config('lock_timeout', '` + outboxLockTimeout + `', true)`,
			`ALTER TABLE outbox DETACH PARTITION ` + name,
			`INSERT INTO outbox (seq, id, order_id, order_no, type, payload, created_at)
			SELECT seq, id, order_id, order_no, type, payload, created_at FROM ` + name,
			`DROP TABLE ` + name,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case isLockTimeout(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("drop %s: %w", p.name, err)
	}
	return true, nil
}

// savepoint runs fn in a transaction of its own: a savepoint of the
// store's transaction, or a transaction on the pool. The lock_timeout that fn
// sets ends with the outermost transaction, or is undone with the
// savepoint when fn fails; on success it is set back to what it was.
func (s *Store) savepoint(ctx context.Context, fn func(tx pgx.Tx) error) error {
	var was string
	if err := s.db.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&was); err != nil {
		return err
	}
	var tx pgx.Tx
	var err error
	if s.tx != nil {
		tx, err = s.tx.Begin(ctx)
	} else {
		tx, err = s.pool.Begin(ctx)
	}
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, was); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// isLockTimeout reports whether err is 55P03 lock_not_available.
func isLockTimeout(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "55P03"
}
