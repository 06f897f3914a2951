package nats

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// storeRaceJS is a JetStream whose stream creation fails as nats-server's
// does when it removed the account's store directory at that moment
// (10049), failures times, and then succeeds.
type storeRaceJS struct {
	jetstream.JetStream
	failures, creates int
	other             error // returned instead, when set
}

func (j *storeRaceJS) Stream(context.Context, string) (jetstream.Stream, error) {
	return nil, jetstream.ErrStreamNotFound
}

func (j *storeRaceJS) CreateStream(context.Context, jetstream.StreamConfig) (jetstream.Stream, error) {
	j.creates++
	if j.other != nil {
		return nil, j.other
	}
	if j.creates <= j.failures {
		return nil, &jetstream.APIError{Code: 500, ErrorCode: errCodeStreamStoreFailed,
			Description: "error creating store for stream"}
	}
	return nil, nil
}

func TestEnsureStreamRetriesStoreRace(t *testing.T) {
	cfg := Config{Stream: "LAPSE", Subject: "lapse"}
	js := &storeRaceJS{failures: 2}
	if err := ensureStream(context.Background(), js, cfg); err != nil || js.creates != 3 {
		t.Fatalf("ensureStream after 2 store failures = %v, %d creates; want nil after 3", err, js.creates)
	}

	// It gives up after five, with the server's error.
	js = &storeRaceJS{failures: 100}
	var apiErr *jetstream.APIError
	if err := ensureStream(context.Background(), js, cfg); !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeStreamStoreFailed || js.creates != 5 {
		t.Fatalf("ensureStream with the store failing = %v, %d creates; want its error after 5", err, js.creates)
	}

	// Any other refusal is not tried again.
	js = &storeRaceJS{other: &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad"}}
	if err := ensureStream(context.Background(), js, cfg); err == nil || js.creates != 1 {
		t.Fatalf("ensureStream refused = %v, %d creates; want the error after 1", err, js.creates)
	}
}
