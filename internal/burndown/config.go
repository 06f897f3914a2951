package burndown

import (
	"fmt"
	"log/slog"
)

// Config configures a Run. Zero values take the defaults noted.
type Config struct {
	// Orders is how many due orders the engine closes. Default 100,000.
	Orders int
	// NotDue is how many orders not due are loaded per due order. Default
	// 4; negative for none.
	NotDue int
	// Subscribers is how many subscribers receive order.closed: each close
	// writes one pending delivery per subscriber (no deliverer runs). Default
	// 0; at most MaxSubscribers.
	Subscribers int
	// Batch and Workers are the Claimer's (engine.ClaimerConfig). Defaults
	// 500 and 2.
	Batch, Workers int
	// Chunk is how many orders one OrderCreateMany loads. Default 5,000.
	Chunk int
	// Loaders is how many chunks load at once. Default 2.
	Loaders int
	// Postgres is a DSN of the store's PostgreSQL database and schema
	// (search_path), for what Run measures beside the store: the WAL, the
	// settings, and the vacuum before the run. Empty: none of them.
	Postgres string
	// Progress, when set, is told how far loading and closing are, from one
	// goroutine at a time.
	Progress func(Progress)
	// Logger receives the engine's logs. Default: none.
	Logger *slog.Logger
}

// MaxSubscribers bounds Config.Subscribers.
const MaxSubscribers = 8

// Defaults of Config.
const (
	DefaultOrders  = 100_000
	DefaultNotDue  = 4
	DefaultBatch   = 500
	DefaultWorkers = 2
	DefaultChunk   = 5_000
	DefaultLoaders = 2
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Orders, DefaultOrders)
	def(&c.NotDue, DefaultNotDue)
	def(&c.Batch, DefaultBatch)
	def(&c.Workers, DefaultWorkers)
	def(&c.Chunk, DefaultChunk)
	def(&c.Loaders, DefaultLoaders)
	c.NotDue = max(c.NotDue, 0)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports what is wrong with c, defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Orders < 0:
		return fmt.Errorf("burndown: orders %d: want a positive count", c.Orders)
	case c.Subscribers < 0 || c.Subscribers > MaxSubscribers:
		return fmt.Errorf("burndown: subscribers %d: want 0 to %d", c.Subscribers, MaxSubscribers)
	case c.Batch < 0 || c.Workers < 0 || c.Chunk < 0 || c.Loaders < 0:
		return fmt.Errorf("burndown: batch, workers, chunk and loaders must be positive")
	}
	return nil
}

// Phase is what a Run is doing.
type Phase string

// Phases of a Run, in order.
const (
	PhaseLoad  Phase = "load"  // loading orders; Done and Total count orders, due and not
	PhaseClose Phase = "close" // the engine closing the due orders; Done counts closes
)

// Progress is how far a Run is in its phase.
type Progress struct {
	Phase       Phase
	Done, Total int
}
