package postgres

import "github.com/lapsehq/lapse"

// Pools reports the store's one connection pool (lapse.PoolReporter).
func (s *Store) Pools() []lapse.PoolStats {
	st := s.pool.Stat()
	return []lapse.PoolStats{{InUse: int(st.AcquiredConns()), Idle: int(st.IdleConns()), Max: int(st.MaxConns()),
		Waits: st.EmptyAcquireCount(), WaitTime: st.EmptyAcquireWaitTime()}}
}
