package sqlite

import "database/sql"

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
