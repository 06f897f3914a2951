package sqlite

import (
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lapsehq/lapse"
)

// unavailable returns err wrapped with lapse.ErrStoreBusy, which is
// lapse.ErrStoreUnavailable, when SQLite reports the database busy or
// locked, and err as it is otherwise: a lock wait that timed out, as the
// server stores' lock timeouts are. The
// store's own writes queue for its one writer connection in Go, so SQLite
// says so only once another process (lapse migrate, lapse close, a backup)
// has held the file's write lock for longer than the busy timeout. Writes
// meet the lock when their transaction begins (BEGIN IMMEDIATE), which is
// where begin calls this; in WAL mode reads do not wait for it.
func unavailable(err error) error {
	if err == nil || errors.Is(err, lapse.ErrStoreUnavailable) {
		return err
	}
	if se, ok := errors.AsType[*sqlite.Error](err); ok {
		switch se.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", lapse.ErrStoreBusy, err)
		}
	}
	return err
}

// isUnique reports whether err is SQLite refusing a row that a unique key
// already holds.
func isUnique(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	return ok && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}
