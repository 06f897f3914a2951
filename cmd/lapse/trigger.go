package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/redis"
)

// triggerFlags configure the shared precise trigger (Redis).
type triggerFlags struct {
	redisURL, prefix, mode string
	timeout                time.Duration
}

func (f *triggerFlags) register(fs *flag.FlagSet, cc *engine.ClaimerConfig) {
	fs.StringVar(&f.redisURL, "redis", "", "Redis URL (redis://host:6379/0): a precise trigger shared by every lapse process, with the database as the truth and the sweep as the safety net")
	fs.StringVar(&f.prefix, "redis-prefix", "lapse:", "prefix of Lapse's keys in Redis")
	fs.DurationVar(&f.timeout, "redis-timeout", 200*time.Millisecond, "bound of one Redis command; a slower Redis counts as failed and degrades the trigger")
	fs.StringVar(&f.mode, "trigger-mode", "auto", "auto: Redis while it answers, the database sweep on its faster beat while it does not; redis or database: forced")
	fs.DurationVar(&cc.DegradedSweep, "degraded-sweep", time.Second, "beat of the sweep while Redis is configured but not in charge")
}

// build returns the shared trigger and its mode, or nil without --redis.
func (f *triggerFlags) build() (*redis.Trigger, engine.TriggerMode, error) {
	mode, err := engine.ParseTriggerMode(f.mode)
	if err != nil {
		return nil, "", fmt.Errorf("--trigger-mode: %w", err)
	}
	if f.redisURL == "" {
		if f.mode != "auto" {
			return nil, "", fmt.Errorf("--trigger-mode %s needs --redis", f.mode)
		}
		return nil, mode, nil
	}
	t, err := redis.New(redis.Config{URL: f.redisURL, Prefix: f.prefix, Timeout: f.timeout})
	if err != nil {
		return nil, "", fmt.Errorf("--redis: %w", err)
	}
	return t, mode, nil
}
