package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// stopWatch is the stderr of an in-process lapse serve: it says when the
// process is serving, and looks at the database's files at the moment
// "lapse stopped" is logged.
type stopWatch struct {
	mu      sync.Mutex
	b       bytes.Buffer
	wal     string        // the SQLite write-ahead log, there while the store is open
	serving chan struct{} // closed at "lapse serving"
	walLeft error         // of os.Stat(wal) when "lapse stopped" was logged
	stopped bool
}

func (w *stopWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := string(p)
	switch {
	case strings.Contains(line, `msg="lapse serving"`):
		close(w.serving)
	case strings.Contains(line, `msg="lapse stopped"`):
		w.stopped = true
		_, w.walLeft = os.Stat(w.wal)
	}
	return w.b.Write(p)
}

// TestServeLogsStoppedLast: lapse serve says "lapse stopped" once it has
// closed what it opened (here the SQLite store, whose write-ahead log goes
// with its last connection), not before.
func TestServeLogsStoppedLast(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	w := &stopWatch{wal: db + "-wal", serving: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--db", db, "--http", "127.0.0.1:0", "--admin-key", "test-admin-key-0123456789abcdefghijklmnop",
			"--config", "", "--flows", ""}, w)
	}()
	select {
	case <-w.serving:
	case err := <-done:
		t.Fatalf("serve: %v\n%s", err, w.b.String())
	case <-time.After(time.Minute):
		t.Fatal("serve did not serve within a minute")
	}
	if _, err := os.Stat(w.wal); err != nil {
		t.Fatalf("no write-ahead log while serving: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped || !errors.Is(w.walLeft, fs.ErrNotExist) {
		t.Errorf("\"lapse stopped\" logged %v, with the store still open (%v):\n%s", w.stopped, w.walLeft, w.b.String())
	}
}
