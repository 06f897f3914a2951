package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// In WAL mode a commit appends to the WAL and the file itself is brought up
// to date by checkpoints. SQLite runs them, by default, inside the commit
// that takes the WAL past 1,000 pages: on the one writer connection, with an
// fsync of the database file. While the disk is busy (a backup, another
// database's checkpoint) that fsync can take seconds, and every write of the
// process waits behind it, the closing of due orders too. The store
// therefore checkpoints on a connection of its own, every
// checkpointInterval, in PASSIVE mode, which never blocks a reader or a
// writer; a writer checkpoints itself only when the WAL has grown past
// fallbackCheckpointPages (about 40 MB), should this fall behind.
const (
	checkpointInterval      = 200 * time.Millisecond
	fallbackCheckpointPages = 10000
)

// checkpointer runs the background checkpoints of one Store.
type checkpointer struct {
	db     *sql.DB
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error
}

func startCheckpointer(ctx context.Context, dsn string, every time.Duration) (*checkpointer, error) {
	db, err := openPool(ctx, dsn, 1)
	if err != nil {
		return nil, err
	}
	loop, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-loop.Done():
				return
			case <-t.C:
				// An error (the file locked by another process's
				// checkpoint, say) loses nothing: the WAL keeps every
				// commit, and the next beat tries again.
				_, _ = db.ExecContext(loop, "PRAGMA wal_checkpoint(PASSIVE)")
			}
		}
	}()
	return c, nil
}

// close stops the checkpoints and closes their connection. SQLite itself
// checkpoints when the last connection to the file closes.
func (c *checkpointer) close() error {
	c.once.Do(func() {
		c.cancel()
		<-c.done
		c.err = c.db.Close()
	})
	return c.err
}
