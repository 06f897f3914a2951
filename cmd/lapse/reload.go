package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// reloadable returns what a configuration reload changes in a running lapse
// serve, by flag: the trigger mode, the claimer's beats and batches, the
// retry schedules of the subscribers, and the ports' timeouts. Every other
// flag needs a restart.
func reloadable(eng *engine.Engine, claimer *engine.Claimer, sf *subscriberFlags) map[string]func(string) error {
	claimerSet := func(set func(c *engine.ClaimerConfig, v string) error) func(string) error {
		return func(v string) error {
			c := claimer.Config()
			if err := set(&c, v); err != nil {
				return err
			}
			claimer.SetConfig(c)
			return nil
		}
	}
	duration := func(field func(c *engine.ClaimerConfig) *time.Duration) func(string) error {
		return claimerSet(func(c *engine.ClaimerConfig, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("%q is not a positive duration", v)
			}
			*field(c) = d
			return nil
		})
	}
	count := func(field func(c *engine.ClaimerConfig) *int) func(string) error {
		return claimerSet(func(c *engine.ClaimerConfig, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("%q is not a positive number", v)
			}
			*field(c) = n
			return nil
		})
	}
	schedule := func(subscribers ...string) func(string) error {
		return func(v string) error {
			sch, err := lapse.ParseSchedule(v)
			if err != nil {
				return err
			}
			for _, name := range subscribers {
				if !hasSubscriber(eng, name) {
					continue // not configured in this process
				}
				if err := eng.SetSchedule(name, sch); err != nil {
					return err
				}
			}
			return nil
		}
	}
	timeouts := func(connect bool) func(string) error {
		return func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("%q is not a positive duration", v)
			}
			for _, t := range sf.timed {
				if connect {
					t.SetTimeouts(d, 0)
				} else {
					t.SetTimeouts(0, d)
				}
			}
			return nil
		}
	}
	return map[string]func(string) error{
		"trigger-mode": func(v string) error {
			m, err := engine.ParseTriggerMode(v)
			if err != nil {
				return err
			}
			return eng.SetTriggerMode(m)
		},
		"sweep-interval":       duration(func(c *engine.ClaimerConfig) *time.Duration { return &c.SweepInterval }),
		"sweep-grace":          duration(func(c *engine.ClaimerConfig) *time.Duration { return &c.SweepGrace }),
		"max-sleep":            duration(func(c *engine.ClaimerConfig) *time.Duration { return &c.MaxSleep }),
		"degraded-sweep":       duration(func(c *engine.ClaimerConfig) *time.Duration { return &c.DegradedSweep }),
		"batch":                count(func(c *engine.ClaimerConfig) *int { return &c.Batch }),
		"sweep-batch":          count(func(c *engine.ClaimerConfig) *int { return &c.SweepBatch }),
		"workers":              count(func(c *engine.ClaimerConfig) *int { return &c.Workers }),
		"webhook-retry":        schedule("webhook", "group-notify", "admin-notify"),
		"nats-retry":           schedule("nats"),
		"rabbitmq-retry":       schedule("rabbitmq"),
		"port-retry":           schedule("stock-port", "coupon-port", "notify-port"),
		"group-retries":        schedule(engine.SettleSubscriber),
		"issue-retries":        schedule(engine.IssueSubscriber),
		"port-connect-timeout": timeouts(true),
		"port-read-timeout":    timeouts(false),
	}
}

func hasSubscriber(eng *engine.Engine, name string) bool {
	for _, s := range eng.Subscriptions() {
		if s.Name == name {
			return true
		}
	}
	return false
}
