package sqlite

import (
	"database/sql"
	"fmt"
)

// Hooks for the tests of package sqlite_test.
var (
	ClaimDueQuery     = claimDueQuery
	NextDeadlineQuery = nextDeadlineQuery
	DeliveryDueQuery  = deliveryDueQuery
)

// ReaderDB is the store's reader pool.
func (s *Store) ReaderDB() *sql.DB { return s.reader }

// BatchRows is how many rows one statement of a batch writes.
const BatchRows = batchRows

// DeliveryInsert is the statement that writes n deliveries.
func DeliveryInsert(n int) string { return fmt.Sprintf(deliveryInsert, values(n, 6)) }

// CachedStmts is how many statements the writer connection keeps prepared.
func (s *Store) CachedStmts() int {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	return len(s.stmts.stmts)
}

// MaxCachedStmts bounds CachedStmts.
const MaxCachedStmts = maxCachedStmts

// The statements of OutboxPrune.
var PruneStatements = map[string]string{
	"read": pruneRead, "attempts": pruneAttempts, "effects": pruneEffects,
	"deliveries": pruneDeliveries, "events": pruneEvents,
}
