package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/nats"
)

// process is what a configuration reload changes in a running lapse serve.
// The settings whose Reload is set say which part each changes (see
// settings.go).
type process struct {
	engine  reloadableEngine
	claimer reloadableClaimer
	timed   []timeouter // the ports and webhooks
	probe   reloadableProbe
	// natsWindow is the NATS stream's duplicate window, which a reloaded
	// --nats-retry must fit in (nats.WindowFor); 0 without a NATS sink.
	natsWindow time.Duration
}

// reloadableProbe is the part of *engine.Prober that reloads change.
type reloadableProbe interface {
	SetInterval(d time.Duration) error
}

// reloadProbeInterval puts a new interval of the probe into force (0 stops
// it).
func reloadProbeInterval(p *process, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration", v)
	}
	return p.probe.SetInterval(d)
}

// reloadableEngine is the part of *engine.Engine that reloads change.
type reloadableEngine interface {
	SetTriggerMode(m engine.TriggerMode) error
	SetSchedule(name string, sch lapse.Schedule) error
	Subscriptions() []*engine.Subscription
}

// reloadableClaimer is the part of *engine.Claimer that reloads change.
type reloadableClaimer interface {
	Config() engine.ClaimerConfig
	SetConfig(c engine.ClaimerConfig)
}

// reloadTriggerMode puts a new trigger mode into force. It needs the shared
// trigger (Redis) to be configured.
func reloadTriggerMode(p *process, v string) error {
	m, err := engine.ParseTriggerMode(v)
	if err != nil {
		return err
	}
	return p.engine.SetTriggerMode(m)
}

// reloadClaimerDuration returns the reload of the claimer's duration that
// field picks, which takes positive durations only.
func reloadClaimerDuration(field func(c *engine.ClaimerConfig) *time.Duration) func(*process, string) error {
	return func(p *process, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration", v)
		}
		c := p.claimer.Config()
		*field(&c) = d
		p.claimer.SetConfig(c)
		return nil
	}
}

// reloadClaimGather sets the claimer's Gather: a duration of 0 (off) to
// 1s.
func reloadClaimGather(p *process, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Second {
		return fmt.Errorf("%q is not a duration from 0 to 1s", v)
	}
	c := p.claimer.Config()
	c.Gather = claimGather(d)
	p.claimer.SetConfig(c)
	return nil
}

// closeHold is the Deliverer's CloseHold for the --delivery-close-hold d:
// the engine takes 0 for its default and a negative value for never.
func closeHold(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// claimGather is the engine's Gather for the --claim-gather d: the engine
// takes 0 for its default and a negative value for off.
func claimGather(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// reloadClaimerCount returns the reload of the claimer's count that field
// picks, which takes positive numbers only.
func reloadClaimerCount(field func(c *engine.ClaimerConfig) *int) func(*process, string) error {
	return func(p *process, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a positive number", v)
		}
		c := p.claimer.Config()
		*field(&c) = n
		p.claimer.SetConfig(c)
		return nil
	}
}

// reloadSchedule returns the reload of the retry schedule of the
// subscriptions named, those of them that run in this process. The new
// schedule keeps the jitter each started with (none for the settlement of
// group buys), so that a reload changes the waits and nothing else.
func reloadSchedule(subscribers ...string) func(*process, string) error {
	return func(p *process, v string) error {
		sch, err := lapse.ParseSchedule(v)
		if err != nil {
			return err
		}
		for _, s := range p.engine.Subscriptions() {
			for _, name := range subscribers {
				if s.Name != name {
					continue
				}
				sch.Jitter = s.Schedule.Jitter
				if err := p.engine.SetSchedule(name, sch); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// reloadNATSSchedule puts a new retry schedule of NATS publishes into
// force, unless a retry could come after the stream's duplicate window,
// which only a restart widens: the stream would then keep a second copy of
// an event whose first PubAck was lost.
func reloadNATSSchedule(p *process, v string) error {
	sch, err := lapse.ParseSchedule(v)
	if err != nil {
		return err
	}
	for _, s := range p.engine.Subscriptions() {
		if s.Name != natsSub.Name || p.natsWindow == 0 {
			continue
		}
		if need := nats.WindowFor(sch.Longest(), s.Timeout); need > p.natsWindow {
			return fmt.Errorf("%q waits up to %s between publishes, and the stream drops a copy only within its duplicate window of %s, set at start: restart to widen it",
				v, sch.Longest(), p.natsWindow)
		}
	}
	return reloadSchedule(natsSub.Name)(p, v)
}

// reloadTimeout returns the reload of the connect (or else the read)
// timeout of the ports and webhooks.
func reloadTimeout(connect bool) func(*process, string) error {
	return func(p *process, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration", v)
		}
		for _, t := range p.timed {
			if connect {
				t.SetTimeouts(d, 0)
			} else {
				t.SetTimeouts(0, d)
			}
		}
		return nil
	}
}
