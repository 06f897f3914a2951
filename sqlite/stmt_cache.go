package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxCachedStmts bounds a stmtCache. The burn-down's statements of full
// chunks are among the first a store meets; past the bound, a statement is
// prepared in each transaction, as it would be without the cache.
const maxCachedStmts = 64

// stmtCache keeps the statements of writeTx prepared on the writer
// connection from one transaction to the next. Preparing a statement of
// batchRows rows costs a good part of executing it, and a transaction
// prepares each it uses once.
//
// A statement is first prepared in the transaction that uses it, and
// wanted; once that transaction has ended, and while its writer still
// holds the gate, so that the connection is idle, the wanted statements
// are prepared on the writer pool (prepare). A later transaction uses the
// one the connection holds (sql.Tx.StmtContext); should the connection
// have been replaced, database/sql prepares it on the new one.
type stmtCache struct {
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	wanted map[string]bool
}

func newStmtCache() *stmtCache {
	return &stmtCache{stmts: map[string]*sql.Stmt{}, wanted: map[string]bool{}}
}

// get returns the statement prepared for query, or nil and wants it.
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok {
		return st
	}
	if len(c.stmts)+len(c.wanted) < maxCachedStmts {
		c.wanted[query] = true
	}
	return nil
}

// prepare prepares the wanted statements on db, the writer pool, whose
// connection no transaction holds. One that fails (the connection lost,
// ctx ended) stays wanted.
func (c *stmtCache) prepare(ctx context.Context, db *sql.DB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for query := range c.wanted {
		st, err := db.PrepareContext(ctx, query)
		if err != nil {
			continue
		}
		c.stmts[query] = st
		delete(c.wanted, query)
	}
}

// close closes the prepared statements.
func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.stmts {
		errs = append(errs, st.Close())
	}
	clear(c.stmts)
	return errors.Join(errs...)
}
