package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ensureStream creates the stream, or brings an existing one to what the
// sink needs: it captures <prefix>.>, stores on file, and deduplicates over
// the configured window at least. Every other setting of an existing stream is left
// as it is, because an operator may have tuned replicas or limits, and an
// update with a fresh config would silently reset them.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	subjects := cfg.Subject + ".>"
	for range 2 { // a second round when another node created it between our calls
		st, err := js.Stream(ctx, cfg.Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = createStream(ctx, js, jetstream.StreamConfig{
				Name:       cfg.Stream,
				Subjects:   []string{subjects},
				Storage:    jetstream.FileStorage,
				Duplicates: cfg.DuplicateWindow,
			})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue
			}
			if err != nil {
				return fmt.Errorf("nats: create stream %s: %w", cfg.Stream, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("nats: look up stream %s: %w", cfg.Stream, err)
		}

		sc := st.CachedInfo().Config
		if sc.Storage != jetstream.FileStorage {
			// JetStream cannot change the storage of a stream, and memory
			// storage would lose acknowledged events in a restart.
			return fmt.Errorf("nats: stream %s uses %s storage; the sink needs file storage", cfg.Stream, sc.Storage)
		}
		changed := false
		if !slices.Contains(sc.Subjects, subjects) {
			sc.Subjects = append(sc.Subjects, subjects)
			changed = true
		}
		if sc.Duplicates < cfg.DuplicateWindow {
			// Only ever widened: a wider window is an operator's choice,
			// or that of another process whose retries wait longer.
			sc.Duplicates = cfg.DuplicateWindow
			changed = true
		}
		if !changed {
			return nil
		}
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("nats: update stream %s: %w", cfg.Stream, err)
		}
		return nil
	}
	return fmt.Errorf("nats: stream %s appeared and vanished while it was being set up", cfg.Stream)
}

// errCodeStreamStoreFailed is JetStream's "error creating store for
// stream" (10049), which nats.go names no constant for.
const errCodeStreamStoreFailed jetstream.ErrorCode = 10049

// createStream creates the stream sc, trying again, a few times within a
// second, when the server fails to make its store. The server removes an
// account's store directory with its last file stream, and a stream
// created at that moment, by this process or by another client of the same
// account, fails so (seen with nats-server 2.9: "could not create storage
// directory ... no such file or directory"); nothing was created, and the
// next try makes the directory again.
func createStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	pause := 25 * time.Millisecond
	for try := 1; ; try++ {
		_, err := js.CreateStream(ctx, sc)
		var apiErr *jetstream.APIError
		if try == 5 || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeStreamStoreFailed {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause *= 2
	}
}
