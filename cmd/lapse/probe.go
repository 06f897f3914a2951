package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// probeFailedEvent is what the admins' channel receives when a run of the
// synthetic probe fails.
const probeFailedEvent = "probe.failed"

// probeNotice is the body of a probe.failed notice: shaped as the events
// the admins' channel receives from the outbox, with the failed run.
type probeNotice struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurred_at"`
	Probe      engine.ProbeRun `json:"probe"`
}

// probeNotify returns the probe's Notify, which posts a probe.failed notice
// to the admins' channel, signed as its other events are. It posts at once,
// outside the outbox: the run that failed may be telling that deliveries
// are what is broken. Nil when no admins' channel is configured.
func probeNotify(admins lapse.Handler) func(context.Context, engine.ProbeRun) error {
	if admins == nil {
		return nil
	}
	return func(ctx context.Context, run engine.ProbeRun) error {
		id := lapse.NewEventID(run.FinishedAt)
		body, err := json.Marshal(probeNotice{ID: id, Type: probeFailedEvent, OccurredAt: run.FinishedAt, Probe: run})
		if err != nil {
			return err
		}
		return admins.Deliver(ctx, &lapse.Delivery{EventID: id, EventType: probeFailedEvent, OrderNo: run.OrderNo, Subscriber: adminNotifySub.Name,
			Event: &lapse.OutboxEvent{ID: id, OrderNo: run.OrderNo, Type: probeFailedEvent, Payload: body, CreatedAt: run.FinishedAt}})
	}
}
