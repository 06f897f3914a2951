package sqlite

import (
	"database/sql"

	"github.com/lapsehq/lapse"
)

// Pools reports the store's two pools (lapse.PoolReporter): the writer,
// whose one connection every write waits for, and the readers.
func (s *Store) Pools() []lapse.PoolStats {
	return []lapse.PoolStats{poolStats("writer", s.writer.Stats()), poolStats("reader", s.reader.Stats())}
}

func poolStats(name string, st sql.DBStats) lapse.PoolStats {
	return lapse.PoolStats{Name: name, InUse: st.InUse, Idle: st.Idle, Max: st.MaxOpenConnections, Waits: st.WaitCount, WaitTime: st.WaitDuration}
}
