package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse"
)

// unavailable returns err wrapped with lapse.ErrStoreUnavailable when it says
// that the database cannot take work now, and err as it is otherwise. Every
// error of the store's statements, transactions and pings passes through it
// (see conn), so that no method can let a refused connection out as an
// internal error.
func unavailable(err error) error {
	if err == nil || errors.Is(err, lapse.ErrStoreUnavailable) {
		return err
	}
	if isBusy(err) {
		return fmt.Errorf("%w: %w", lapse.ErrStoreBusy, err)
	}
	if !isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", lapse.ErrStoreUnavailable, err)
}

// isBusy reports whether err is the server giving up on a statement rather
// than wait longer or run it against another transaction: lapse.ErrStoreBusy,
// which is lapse.ErrStoreUnavailable.
//
//   - 55P03 lock_not_available: a lock wait past lock_timeout (or NOWAIT);
//   - 40P01 deadlock_detected: the server broke a deadlock;
//   - 40001 serialization_failure: a conflict with another transaction
//     (or, on a standby, with recovery);
//   - 57014 query_canceled: a statement past statement_timeout, or one an
//     administrator cancelled (pg_cancel_backend). The store's own deadline
//     never ends in it: pgx cuts the connection for a cancelled context.
//
// PostgreSQL aborts the transaction the statement ran in, or the savepoint
// of a nested Tx and of a store method that runs in one: nothing the call
// wrote is kept.
func isBusy(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pe.Code {
		case "55P03", "40P01", "40001", "57014":
			return true
		}
	}
	return false
}

// isUnavailable reports whether err means the database is out of reach or
// refusing work, rather than refusing this statement:
//
//   - the server refused or ended the session: 53300 too_many_connections,
//     57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
//     class 08 connection exceptions;
//   - the server is no longer the primary: 25006 read_only_sql_transaction
//     on a session that was opened on a primary that was demoted since (the
//     store never asks for a read-only transaction itself);
//   - no connection could be made (pgconn.ConnectError: refused, unreachable,
//     the server turned the session down at start);
//   - the connection broke (closed, reset, cut short);
//   - the caller's deadline passed while it waited for a pool connection
//     (pgxpool returns the context's own error then; a deadline that passes
//     while a statement runs is a pgconn timeout, and is not counted).
//
// A statement that was running when its connection broke may have committed
// before the answer was lost: unavailable does not mean nothing was written.
func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false // the caller went away
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Before the net.Error test, which the context's error passes.
		return !pgconn.Timeout(err)
	}
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pe.Code {
		case "53300", "57P01", "57P02", "57P03", "25006":
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// isOutboxKey reports whether the unique key named is one that refuses an
// outbox event whose id exists, or a delivery that names a subscriber
// twice. The outbox is partitioned (migration 0025), and a violation names
// the key of the partition that holds the id: outbox_before_id_key,
// outbox_default_id_key, outbox_d20261203_id_key, made from outbox_id_key.
func isOutboxKey(name string) bool {
	return name == "deliveries_event_subscriber_key" ||
		strings.HasPrefix(name, "outbox_") && strings.HasSuffix(name, "_id_key")
}

// translate returns err as the store reports it: through unavailable, and,
// when outbox or deliveries refused a row that their unique key holds,
// wrapped with lapse.ErrEventExists. Every statement that writes events goes
// through it, in whichever method it runs.
func translate(err error) error {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "23505" && isOutboxKey(pe.ConstraintName) {
		return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrEventExists, "outbox: %s", pe.Detail), err)
	}
	return unavailable(err)
}

// conn is a db whose errors go through translate: the pool, or the
// transaction of a Store bound to one.
type conn struct{ db db }

func (c conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := c.db.Exec(ctx, sql, args...)
	return tag, translate(err)
}

func (c conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := c.db.Query(ctx, sql, args...)
	return mappedRows{rows}, translate(err)
}

func (c conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return mappedRow{c.db.QueryRow(ctx, sql, args...)}
}

func (c conn) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := c.db.CopyFrom(ctx, table, columns, src)
	return n, translate(err)
}

// mappedRows reports the errors of pgx.Rows through translate: a
// connection can break between rows, and a statement's error comes with
// its rows.
type mappedRows struct{ pgx.Rows }

func (r mappedRows) Err() error             { return translate(r.Rows.Err()) }
func (r mappedRows) Scan(dest ...any) error { return translate(r.Rows.Scan(dest...)) }

// mappedRow reports the error of a pgx.Row, which comes with Scan, through
// translate.
type mappedRow struct{ pgx.Row }

func (r mappedRow) Scan(dest ...any) error { return translate(r.Row.Scan(dest...)) }
