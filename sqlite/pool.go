package sqlite

import (
	"database/sql"

	"github.com/lapsehq/lapse"
)

// Pools reports the store's two pools (lapse.PoolReporter): the writer,
// whose one connection every write waits for, and the readers. Writers wait
// in the store's own queue (writeGate), before database/sql's, so the
// writer's waits are the queue's. A Store of Priority reports none: its
// pools are those of the Store it came from, which reports them.
func (s *Store) Pools() []lapse.PoolStats {
	if s.priority {
		return nil
	}
	w := poolStats("writer", s.writer.Stats())
	waits, waited := s.gate.stats()
	w.Waits, w.WaitTime = w.Waits+waits, w.WaitTime+waited
	return []lapse.PoolStats{w, poolStats("reader", s.reader.Stats())}
}

func poolStats(name string, st sql.DBStats) lapse.PoolStats {
	return lapse.PoolStats{Name: name, InUse: st.InUse, Idle: st.Idle, Max: st.MaxOpenConnections, Waits: st.WaitCount, WaitTime: st.WaitDuration}
}
