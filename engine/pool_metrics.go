package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
)

// poolCollector reports the connection pools of the engine's stores at
// scrape time, for those that report them (lapse.PoolReporter). A pool is
// labelled with its store's name for it ("writer", "reader" of SQLite), or,
// for a store with one pool, with its role: "main" for the engine's store,
// "work" for the Claimer's and the Deliverer's when it is another.
type poolCollector struct {
	stores  []rolePools
	conns   *prometheus.Desc
	max     *prometheus.Desc
	waits   *prometheus.Desc
	waitSec *prometheus.Desc
}

type rolePools struct {
	role string
	r    lapse.PoolReporter
}

// newPoolCollector returns the collector of main's pools and, when work is
// another store, of work's; nil when neither reports its pools.
func newPoolCollector(main, work lapse.Store) *poolCollector {
	c := &poolCollector{
		conns: prometheus.NewDesc("lapse_db_pool_connections", "Connections of a database pool, by state (in_use: lent out, idle: open and free).",
			[]string{"pool", "state"}, nil),
		max: prometheus.NewDesc("lapse_db_pool_max_connections", "The most connections a database pool opens.", []string{"pool"}, nil),
		waits: prometheus.NewDesc("lapse_db_pool_waits_total", "Requests for a connection that found none free and waited.",
			[]string{"pool"}, nil),
		waitSec: prometheus.NewDesc("lapse_db_pool_wait_seconds_total", "Time spent waiting for a free connection.", []string{"pool"}, nil),
	}
	if r, ok := main.(lapse.PoolReporter); ok {
		c.stores = append(c.stores, rolePools{"main", r})
	}
	if r, ok := work.(lapse.PoolReporter); ok && work != main {
		c.stores = append(c.stores, rolePools{"work", r})
	}
	if len(c.stores) == 0 {
		return nil
	}
	return c
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.conns
	ch <- c.max
	ch <- c.waits
	ch <- c.waitSec
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stores {
		for _, p := range s.r.Pools() {
			name := p.Name
			switch {
			case name == "":
				name = s.role
			case s.role != "main":
				name = s.role + "_" + name // two stores with named pools
			}
			ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(p.InUse), name, "in_use")
			ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(p.Idle), name, "idle")
			ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(p.Max), name)
			ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(p.Waits), name)
			ch <- prometheus.MustNewConstMetric(c.waitSec, prometheus.CounterValue, p.WaitTime.Seconds(), name)
		}
	}
}
