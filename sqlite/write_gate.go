package sqlite

import (
	"context"
	"sync"
	"time"
)

// writeGate is the queue for the single writer connection. database/sql
// hands a freed connection to a random waiter, so with sixteen API writers
// waiting, the transaction that closes due orders could wait behind any
// number of them, and under a slow disk its orders closed seconds late.
// The gate serves writers in the order they came, and serves the Store's
// priority writers (Priority: the deadline engine and the deliverer) ahead
// of the others. When both kinds wait, they take turns, so that a long
// burn-down cannot starve the API's writes either: a priority writer waits
// for at most one other write.
type writeGate struct {
	mu       sync.Mutex
	held     bool
	turn     bool // the last grant went to a priority writer
	priority []chan struct{}
	normal   []chan struct{}

	waits  int64         // writers that found the gate held and queued
	waited time.Duration // their time in the queue, once it ended
}

// stats returns how many writers waited and how long, in all.
func (g *writeGate) stats() (int64, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waits, g.waited
}

// acquire waits for the writer connection's turn, or for ctx to end.
func (g *writeGate) acquire(ctx context.Context, priority bool) error {
	g.mu.Lock()
	if !g.held {
		g.held, g.turn = true, priority
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if priority {
		g.priority = append(g.priority, ch)
	} else {
		g.normal = append(g.normal, ch)
	}
	g.waits++
	g.mu.Unlock()
	start := time.Now()

	select {
	case <-ch:
		g.mu.Lock()
		g.waited += time.Since(start)
		g.mu.Unlock()
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		g.waited += time.Since(start)
		select {
		case <-ch: // granted meanwhile: pass the turn on
			g.handOff()
		default:
			if priority {
				g.priority = remove(g.priority, ch)
			} else {
				g.normal = remove(g.normal, ch)
			}
		}
		return ctx.Err()
	}
}

// release gives the writer connection to the next waiter.
func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handOff()
}

// handOff grants the turn to the next waiter, or frees the gate. g.mu is
// held.
func (g *writeGate) handOff() {
	takePriority := len(g.priority) > 0 && (len(g.normal) == 0 || !g.turn)
	switch {
	case takePriority:
		ch := g.priority[0]
		g.priority = g.priority[1:]
		g.turn = true
		close(ch)
	case len(g.normal) > 0:
		ch := g.normal[0]
		g.normal = g.normal[1:]
		g.turn = false
		close(ch)
	default:
		g.held = false
	}
}

func remove(q []chan struct{}, ch chan struct{}) []chan struct{} {
	for i, c := range q {
		if c == ch {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}
