package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/redis"
)

// triggerFlags configure the shared precise trigger (Redis).
type triggerFlags struct {
	redisURL, prefix, mode string
	timeout                time.Duration
}

// build returns the shared trigger and its mode, or nil without --redis.
// With --redis, the Redis client's own log lines go to log.
func (f *triggerFlags) build(log *slog.Logger) (*redis.Trigger, engine.TriggerMode, error) {
	mode, err := engine.ParseTriggerMode(f.mode)
	if err != nil {
		var le *lapse.Error
		if errors.As(err, &le) {
			return nil, "", fmt.Errorf("--trigger-mode: %s", le.Message) // not the API's "mode: "
		}
		return nil, "", fmt.Errorf("--trigger-mode: %w", err)
	}
	if f.redisURL == "" {
		if f.mode != string(engine.TriggerAuto) {
			return nil, "", fmt.Errorf("--trigger-mode %s needs --redis", f.mode)
		}
		return nil, mode, nil
	}
	redis.SetClientLogger(log)
	t, err := redis.New(redis.Config{URL: f.redisURL, Prefix: f.prefix, Timeout: f.timeout})
	if err != nil {
		return nil, "", fmt.Errorf("--redis: %w", err)
	}
	return t, mode, nil
}
