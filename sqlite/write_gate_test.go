package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestPriorityWritesGoFirst: while one transaction holds the writer, API
// writes queue up, then the deadline engine's; the engine's goes next, and
// from then on the two kinds take turns. database/sql alone hands the
// connection to a random waiter, which let closes wait behind any number
// of API writes.
func TestPriorityWritesGoFirst(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "lapse.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	work := s.Priority()

	var mu sync.Mutex
	var order []string
	write := func(st *Store, name string) error {
		return st.Tx(ctx, func(tx lapse.Store) error {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			_, err := tx.StockSet(ctx, &lapse.StockSetParams{SKU: name, OnHand: 1, At: time.Now()})
			return err
		})
	}
	queued := func(normal, priority int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			s.gate.mu.Lock()
			n, p := len(s.gate.normal), len(s.gate.priority)
			s.gate.mu.Unlock()
			if n == normal && p == priority {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queued %d normal and %d priority writers, want %d and %d", n, p, normal, priority)
			}
		}
	}
	// run holds the writer with an API transaction, queues writers in the
	// order given (a for an API write, w for the engine's), lets go, and
	// returns the order they wrote in.
	run := func(kinds string) []string {
		t.Helper()
		order = nil
		hold, held := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			_ = s.Tx(ctx, func(lapse.Store) error { close(held); <-hold; return nil })
		})
		<-held
		normal, priority := 0, 0
		for i, k := range kinds {
			st, name := s, "a"
			if k == 'w' {
				st, name = work, "w"
				priority++
			} else {
				normal++
			}
			name += string(rune('0' + i))
			wg.Go(func() {
				if err := write(st, name); err != nil {
					t.Error(err)
				}
			})
			queued(normal, priority)
		}
		close(hold)
		wg.Wait()
		return order
	}

	if got, want := run("aaaaaaaaw"), []string{"w8", "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"}; !slices.Equal(got, want) {
		t.Errorf("write order %v, want %v: the engine's write first, then the API's in the order they came", got, want)
	}
	if got, want := run("aaawww"), []string{"w3", "a0", "w4", "a1", "w5", "a2"}; !slices.Equal(got, want) {
		t.Errorf("write order %v, want %v: when both wait they take turns", got, want)
	}
}

// TestWriteGateCancel: a writer whose context ends while it waits leaves
// the queue, and the writer after it still gets its turn.
func TestWriteGateCancel(t *testing.T) {
	var g writeGate
	if err := g.acquire(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error)
	go func() { gone <- g.acquire(ctx, true) }()
	next := make(chan error)
	for !queuedPriority(&g, 1) {
		time.Sleep(time.Millisecond)
	}
	go func() { next <- g.acquire(context.Background(), false) }()
	for !queuedNormal(&g, 1) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire = %v, want context.Canceled", err)
	}
	if queuedPriority(&g, 1) {
		t.Fatal("the cancelled writer is still queued")
	}
	g.release()
	if err := <-next; err != nil {
		t.Fatalf("next acquire = %v", err)
	}
	g.release()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		t.Error("the gate is still held after every writer released it")
	}
}

func queuedPriority(g *writeGate, n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.priority) == n
}

func queuedNormal(g *writeGate, n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.normal) == n
}
