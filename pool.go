package lapse

import "time"

// PoolStats is what a store's connection pool reports of itself, for the
// operators' metrics.
type PoolStats struct {
	// Name tells a store's pools apart ("writer", "reader"); "" for a store
	// with one pool.
	Name  string
	InUse int // connections lent out
	Idle  int // connections open and waiting to be lent
	Max   int // the most connections the pool opens
	// Waits counts, since the pool opened, the requests for a connection
	// that found none free and waited; WaitTime adds up their waits.
	Waits    int64
	WaitTime time.Duration
}

// PoolReporter is implemented by stores that can report their connection
// pools. It is optional: a store without it has no pool metrics.
type PoolReporter interface {
	// Pools returns a snapshot of each of the store's pools. It does not
	// touch the database.
	Pools() []PoolStats
}
