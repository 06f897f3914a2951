package mysql

import "github.com/lapsehq/lapse"

// Pools reports the store's one connection pool (lapse.PoolReporter).
func (s *Store) Pools() []lapse.PoolStats {
	st := s.pool.Stats()
	return []lapse.PoolStats{{InUse: st.InUse, Idle: st.Idle, Max: st.MaxOpenConnections, Waits: st.WaitCount, WaitTime: st.WaitDuration}}
}
