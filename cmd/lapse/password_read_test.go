package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestReadPasswordCancelled: a password read from a pipe that neither
// sends a line nor closes gives up when the command's context ends (Ctrl-C,
// SIGTERM), rather than hold the process; a line sent is read as before.
func TestReadPasswordCancelled(t *testing.T) {
	t.Parallel()
	got, err := readPassword(context.Background(), "operator add", strings.NewReader("s3cret pass\r\nmore\n"))
	if got != "s3cret pass" || err != nil {
		t.Fatalf("readPassword of a line = %q, %v", got, err)
	}
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := readPassword(ctx, "operator add", r)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "operator add: reading the password from stdin") {
			t.Fatalf("readPassword after the context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("readPassword still waits on a silent pipe after its context ended")
	}
}
