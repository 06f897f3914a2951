package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse"
)

// unavailable returns err wrapped with lapse.ErrStoreUnavailable when it says
// that the database cannot take work now, and err as it is otherwise. Every
// error of the store's statements, transactions and pings passes through it
// or through unavailableWait (see Store.on), so that no method can let a
// refused connection out as an internal error.
func unavailable(err error) error { return translate(err, false) }

// unavailableWait is unavailable for the error of getting a connection, from
// the pool or a new one: there, the caller's deadline passing means that the
// pool had none to give in time. A deadline that passes while a statement
// runs is the caller's, and is not counted.
func unavailableWait(err error) error { return translate(err, true) }

func translate(err error, waiting bool) error {
	if err == nil || errors.Is(err, lapse.ErrStoreUnavailable) {
		return err
	}
	if busyCodes[errorNumber(err)] {
		return fmt.Errorf("%w: %w", lapse.ErrStoreBusy, err)
	}
	if !isUnavailable(err, waiting) {
		return err
	}
	return fmt.Errorf("%w: %w", lapse.ErrStoreUnavailable, err)
}

// busyCodes are the server's errors that give up on a statement, or on its
// whole transaction, rather than wait longer: lapse.ErrStoreBusy, which is
// lapse.ErrStoreUnavailable. InnoDB rolls back the statement (and, for a
// deadlock or with innodb_rollback_on_timeout, the transaction: see
// server.endsTransaction), and the store's write, a transaction or a
// savepoint of its own, undoes the rest of the method, so that nothing of
// the call is left written. They are not isUnavailable's: a lock wait
// timeout does not break a transaction that the server kept.
var busyCodes = map[uint16]bool{
	1205: true, // ER_LOCK_WAIT_TIMEOUT: innodb_lock_wait_timeout, or lock_wait_timeout for a table's lock
	1213: true, // ER_LOCK_DEADLOCK: InnoDB rolled the transaction back
	1969: true, // ER_STATEMENT_TIMEOUT (MariaDB): max_statement_time
	3024: true, // ER_QUERY_TIMEOUT (MySQL): max_execution_time
	1317: true, // ER_QUERY_INTERRUPTED: KILL QUERY (the driver closes the connection for a cancelled context instead)
}

// unavailableCodes are the server's errors that refuse or end the session
// rather than a statement: too many connections, an account or host refused
// at login (or locked out), a server shutting down, a connection killed or
// timed out, or a server that takes no writes now, as a primary demoted in
// a failover does (PostgreSQL's read_only_sql_transaction, 25006, in its
// store; the store never asks for a read-only transaction itself).
var unavailableCodes = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1203: true, // ER_TOO_MANY_USER_CONNECTIONS: max_user_connections
	1226: true, // ER_USER_LIMIT_REACHED: an account's resource limit
	1044: true, // ER_DBACCESS_DENIED_ERROR, at login
	1045: true, // ER_ACCESS_DENIED_ERROR, at login
	1049: true, // ER_BAD_DB_ERROR, at login
	1129: true, // ER_HOST_IS_BLOCKED
	1130: true, // ER_HOST_NOT_PRIVILEGED
	3118: true, // ER_ACCOUNT_HAS_BEEN_LOCKED (MySQL)
	4151: true, // ER_ACCOUNT_HAS_BEEN_LOCKED (MariaDB)
	1053: true, // ER_SERVER_SHUTDOWN
	1077: true, // ER_NORMAL_SHUTDOWN
	1078: true, // ER_GOT_SIGNAL
	1079: true, // ER_SHUTDOWN_COMPLETE
	1080: true, // ER_FORCING_CLOSE
	1152: true, // ER_ABORTING_CONNECTION
	1184: true, // ER_NEW_ABORTING_CONNECTION
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	3032: true, // ER_SERVER_OFFLINE_MODE (MySQL)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL): the server closed an idle session
	1290: true, // ER_OPTION_PREVENTS_STATEMENT: read_only or super_read_only, the store's only such options
	1792: true, // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: SQLSTATE 25006
	1836: true, // ER_READ_ONLY_MODE
	1874: true, // ER_INNODB_READ_ONLY: innodb_read_only
}

// isUnavailable reports whether err means the database is out of reach or
// refusing work, rather than refusing this statement:
//
//   - the server refused or ended the session, or takes no writes
//     (unavailableCodes);
//   - no connection could be made (a dial error: refused, unreachable);
//   - the connection broke (closed, reset, cut short, out of sync), which
//     the driver reports as driver.ErrBadConn before anything was sent and
//     as mysql.ErrInvalidConn after;
//   - with waiting, the caller's deadline passed while it waited for a
//     connection.
//
// A statement that was running when its connection broke may have committed
// before the answer was lost: unavailable does not mean nothing was written.
func isUnavailable(err error, waiting bool) bool {
	if errors.Is(err, context.Canceled) {
		return false // the caller went away
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Before the net.Error test, which the context's error passes.
		return waiting
	}
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return unavailableCodes[me.Number]
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	for _, broken := range []error{driver.ErrBadConn, mysql.ErrInvalidConn, mysql.ErrPktSync, mysql.ErrPktSyncMul,
		mysql.ErrMalformPkt, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, broken) {
			return true
		}
	}
	return false
}

// errorNumber returns the server's error number in err, or 0.
func errorNumber(err error) uint16 {
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return me.Number
	}
	return 0
}

// isDuplicate reports whether err is a duplicate entry (ER_DUP_ENTRY) for
// any unique key.
func isDuplicate(err error) bool { return errorNumber(err) == 1062 }

// isDuplicateKey reports whether err is a duplicate entry for the named
// unique key: "Duplicate entry '…' for key 'name'", or 'table.name' from
// MySQL 8.0.19 on.
func isDuplicateKey(err error, key string) bool {
	me, ok := errors.AsType[*mysql.MySQLError](err)
	return ok && me.Number == 1062 && (strings.HasSuffix(me.Message, "'"+key+"'") || strings.HasSuffix(me.Message, "."+key+"'"))
}

// errorMessage is the server's message in err, or err's text.
func errorMessage(err error) string {
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return me.Message
	}
	return err.Error()
}

// isCheckViolation reports whether err is a violation of the named CHECK
// constraint: MySQL's ER_CHECK_CONSTRAINT_VIOLATED, "Check constraint 'name'
// is violated.", or MariaDB's ER_CONSTRAINT_FAILED, "CONSTRAINT `name`
// failed for `db`.`table`".
func isCheckViolation(err error, name string) bool {
	me, ok := errors.AsType[*mysql.MySQLError](err)
	if !ok || (me.Number != 3819 && me.Number != 4025) {
		return false
	}
	return strings.Contains(me.Message, "'"+name+"'") || strings.Contains(me.Message, "`"+name+"`")
}

// isDeadlock reports whether err is ER_LOCK_DEADLOCK: InnoDB chose the
// transaction as a deadlock's victim and rolled all of it back.
func isDeadlock(err error) bool { return errorNumber(err) == 1213 }

// endsTransaction reports whether err may have rolled back the whole
// transaction it happened in, not just its statement: a deadlock, a lost
// connection, or a lock wait timeout on a server that rolls back a
// transaction for it (innodb_rollback_on_timeout; by default InnoDB rolls
// back the statement alone, and a savepoint before it still holds).
func (v server) endsTransaction(err error) bool {
	switch errorNumber(err) {
	case 1213:
		return true
	case 1205:
		return v.rollbackOnTimeout
	}
	return isUnavailable(err, false)
}
