package lapse

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// Delivery statuses. A delivery is created pending in the transaction that
// writes its event; the delivery workers move it.
const (
	// DeliveryPending: waiting for its next attempt (or running one, under a
	// lease). A worker moves it to done, back to pending with a later attempt
	// time, or to dead.
	DeliveryPending DeliveryStatus = "pending"
	// DeliveryDone: the subscriber has the event. Terminal.
	DeliveryDone DeliveryStatus = "done"
	// DeliveryDead: the retry schedule ran out, or the subscriber refused the
	// event for good. The order is in manual review; an operator may retry it,
	// which makes it pending again.
	DeliveryDead DeliveryStatus = "dead"
)

// Delivery is one outbox event handed to one subscriber, with its own
// attempts, schedule and lease.
type Delivery struct {
	ID         int64          `json:"id"`
	EventID    string         `json:"event_id"`
	EventType  string         `json:"event_type"`
	OrderID    int64          `json:"-"`
	OrderNo    string         `json:"order_no"`
	Subscriber string         `json:"subscriber"`
	Status     DeliveryStatus `json:"status"`
	// Attempts counts every attempt ever started, including one whose worker
	// died; it is also the lease token: only the worker holding attempt
	// number Attempts may finish the delivery.
	Attempts int `json:"attempts"`
	// RetryBase is Attempts when an operator last retried the delivery; the
	// retry schedule counts from it.
	RetryBase int `json:"retry_base"`
	// Unfinished counts the claims in a row, the one that runs included,
	// whose attempts did not end through the subscriber: their workers
	// died during them, or they were cut short (a stop, a lease lost or in
	// doubt). A claim adds one; a finish of an attempt that was not cut
	// short, and an operator's retry, set it to zero. It tells a delivery
	// whose attempts never end apart from one whose schedule was shortened
	// under it (a reload with fewer attempts): only the first dies of
	// attempts that never ended.
	Unfinished    int        `json:"-"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LeaseOwner    string     `json:"lease_owner,omitempty"`
	LeaseUntil    *time.Time `json:"lease_until"`
	// Unknown is set when the last attempt timed out after the request was
	// sent: before any new attempt the subscriber is asked whether it applied
	// the effect.
	Unknown   bool       `json:"unknown"`
	LastError string     `json:"last_error"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	DoneAt    *time.Time `json:"done_at"`

	// Event is the delivered event; set by DeliveryClaim.
	Event *OutboxEvent `json:"-"`
	// Final is set by the deliverer on an attempt whose failure would end
	// the retry schedule: a handler that gives up differently (a group buy
	// that fails, a membership handed to an operator) does so then.
	Final bool `json:"-"`
}

// Failures returns how many attempts have been made since the delivery was
// created or an operator last retried it.
func (d *Delivery) Failures() int { return d.Attempts - d.RetryBase }

// Validate reports a claim that no store may be given, as an EINVALID error
// naming the field: a limit below 1, no subscribers (or one empty or named
// twice), no owner, and a lease that ends no later than Now.
func (p *DeliveryClaimParams) Validate() error {
	switch {
	case p.Limit < 1:
		return FieldError("limit", "a claim takes at least one delivery")
	case p.Owner == "":
		return FieldError("owner", "a claim names the worker that takes the lease")
	case !p.LeaseUntil.After(p.Now):
		return FieldError("lease_until", "a lease ends after the claim")
	}
	return validateNames("subscribers", p.Subscribers)
}

// Validate reports a finish that no store may be given, as an EINVALID
// error naming the field: a status other than done, pending or dead, no
// owner or attempt (the lease it finishes under), a review of no order, and
// events that ValidateOutbox refuses.
func (p *DeliveryFinishParams) Validate() error {
	switch {
	case p.Status != DeliveryDone && p.Status != DeliveryPending && p.Status != DeliveryDead:
		return FieldError("status", "a delivery finishes done, pending or dead, not %q", p.Status)
	case p.Owner == "" || p.Attempt < 1:
		return FieldError("attempt", "a finish names the lease it holds: its owner and attempt")
	case p.Review != nil && (p.Review.OrderID <= 0 || p.Review.OrderNo == ""):
		return FieldError("review", "is of no order")
	}
	return ValidateOutbox(p.Outbox)
}

// Validate reports a batch of done attempts that no store may be given, as
// an EINVALID error naming the field: no owner, an attempt of no delivery or
// lease, one whose outcome is not a delivery (ok or applied), or a delivery
// named twice.
func (p *DeliveryDoneManyParams) Validate() error {
	if p.Owner == "" {
		return FieldError("owner", "a finish names the worker whose leases it finishes")
	}
	seen := make(map[int64]bool, len(p.Attempts))
	for _, a := range p.Attempts {
		switch {
		case a.DeliveryID <= 0 || a.Attempt < 1:
			return FieldError("attempts", "each names its delivery and the attempt it finishes")
		case a.Outcome != OutcomeOK && a.Outcome != OutcomeApplied:
			return FieldError("attempts", "delivery %d: a done attempt's outcome is %s or %s, not %q", a.DeliveryID, OutcomeOK, OutcomeApplied, a.Outcome)
		case seen[a.DeliveryID]:
			return FieldError("attempts", "delivery %d is named twice", a.DeliveryID)
		}
		seen[a.DeliveryID] = true
	}
	return nil
}

// Lost returns the ids of p's leases that renewed, the deliveries a renewal
// extended, does not name, in the order p names them: what DeliveryRenew
// returns, for a store that learns which leases it extended rather than
// which it did not.
func (p *DeliveryRenewParams) Lost(renewed []int64) []int64 {
	var lost []int64
	for _, l := range p.Leases {
		if !slices.Contains(renewed, l.ID) {
			lost = append(lost, l.ID)
		}
	}
	return lost
}

// Attempt outcomes.
const (
	OutcomeOK      = "ok"      // delivered
	OutcomeApplied = "applied" // a query-back found the effect already applied
	OutcomeError   = "error"   // failed; retried on schedule
	OutcomeRefused = "refused" // failed for good (the subscriber refused it)
	OutcomeUnknown = "unknown" // timed out after sending; queried back before any retry
)

// DeliveryAttempt is the record of one attempt.
type DeliveryAttempt struct {
	DeliveryID int64         `json:"delivery_id"`
	Attempt    int           `json:"attempt"`
	Worker     string        `json:"worker"`
	StartedAt  time.Time     `json:"started_at"`
	Duration   time.Duration `json:"-"`
	Outcome    string        `json:"outcome"`
	Error      string        `json:"error"`
}

// Handler delivers events to one subscriber: a sink (webhook, NATS,
// RabbitMQ) or an external port (a merchant's stock service). Deliver must be
// idempotent on ev.ID, which every sink passes on as the idempotency key.
//
// Deliver returns nil when the subscriber has the event; an error wrapping
// ErrUnknownOutcome when the request may have been applied but no answer came;
// an error wrapping ErrRefused when retrying cannot help; any other error to
// be retried on schedule.
type Handler interface {
	Deliver(ctx context.Context, d *Delivery) error
}

// QueryHandler is a Handler that can be asked whether an earlier attempt was
// applied. A delivery whose outcome is unknown is never sent again before
// Query says it was not applied.
type QueryHandler interface {
	Handler
	// Query reports whether the subscriber applied d's event. An error means
	// the question could not be answered; it is asked again later.
	Query(ctx context.Context, d *Delivery) (applied bool, err error)
}

// BatchHandler is a Handler that can also take many deliveries in one call:
// a broker client that publishes them all before it waits for their
// acknowledgements, for instance. DeliverMany returns one error per
// delivery, in the order given, each as Deliver would return it: nil when
// the subscriber has that event. It must be idempotent on the event ids as
// Deliver is. The deliveries of one call are of different orders, so it
// may hand them over in any order.
type BatchHandler interface {
	Handler
	DeliverMany(ctx context.Context, ds []*Delivery) []error
}

// LocalHandler applies its effect in the database, inside the transaction
// that records the delivery done, together with its dedup row: exactly once.
type LocalHandler interface {
	// Apply performs d's effect through tx. An error rolls everything back
	// and the delivery is retried on schedule (or dies, wrapping ErrRefused).
	Apply(ctx context.Context, tx Store, d *Delivery) error
}

// RetryAfter is implemented by a handler's error when the subscriber said
// how long to wait before it is sent the event again: an HTTP receiver's
// 429 or 503 with a Retry-After header. The next attempt then comes no
// sooner than that, and no later than the longest wait of the
// subscription's schedule (Schedule.Longest), so that a subscriber cannot
// stretch a delivery's life past what its schedule allows; the attempt
// still counts against the schedule.
type RetryAfter interface {
	RetryAfter() time.Duration
}

// Errors that handlers return.
var (
	ErrUnknownOutcome = errors.New("lapse: outcome unknown: the request was sent but no answer came")
	ErrRefused        = errors.New("lapse: refused for good")
)

// Schedule is a retry schedule: how long to wait after each failed attempt.
// Either Steps (a stepped list: wait Steps[0] after the first failure,
// Steps[1] after the second, …; len(Steps)+1 attempts in all) or exponential
// (Base doubled after each failure, capped at Cap, MaxAttempts in all).
// Jitter spreads each wait by up to ± that fraction so that retries after an
// outage do not arrive together.
type Schedule struct {
	Steps       []time.Duration `json:"steps,omitempty"`
	Base        time.Duration   `json:"base,omitempty"`
	Cap         time.Duration   `json:"cap,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Jitter      float64         `json:"jitter"`
}

// DefaultSchedule is the stepped schedule of the seeds: 1m, 5m, 15m, 30m, 1h.
func DefaultSchedule() Schedule {
	return Schedule{Steps: []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour}, Jitter: 0.1}
}

// Validate checks the schedule.
func (s Schedule) Validate() error {
	switch {
	case len(s.Steps) > 0 && (s.Base != 0 || s.Cap != 0 || s.MaxAttempts != 0):
		return Errorf(EINVALID, "a schedule is stepped or exponential, not both")
	case len(s.Steps) == 0 && (s.Base <= 0 || s.MaxAttempts < 1):
		return Errorf(EINVALID, "an exponential schedule needs a positive base and at least one attempt")
	case len(s.Steps) == 0 && s.Cap != 0 && s.Cap < s.Base:
		return Errorf(EINVALID, "the cap of a schedule is below its base")
	case s.Jitter < 0 || s.Jitter >= 1:
		return Errorf(EINVALID, "jitter must be in [0, 1)")
	case s.Base > MaxScheduleWait || s.Cap > MaxScheduleWait:
		return Errorf(EINVALID, "a schedule waits at most %s between attempts", MaxScheduleWait)
	}
	for _, d := range s.Steps {
		switch {
		case d <= 0:
			return Errorf(EINVALID, "schedule steps must be positive")
		case d > MaxScheduleWait:
			return Errorf(EINVALID, "a schedule waits at most %s between attempts", MaxScheduleWait)
		}
	}
	return nil
}

// MaxScheduleWait is the longest wait between two attempts that a schedule
// may name (a step, or an exponential schedule's base or cap). A wait near
// the most a time.Duration holds (106751d) would overflow once its jitter
// is added and come out negative: the retry due at once, and Longest zero,
// rather than a retry in centuries. A year is far past any retry that helps.
const MaxScheduleWait = 365 * 24 * time.Hour

// maxWait bounds an uncapped exponential schedule so that it cannot overflow.
const maxWait = 7 * 24 * time.Hour

// Next returns the wait after the failures-th failed attempt, and false when
// the schedule has run out. random is a number in [0, 1) that places the
// jitter.
func (s Schedule) Next(failures int, random float64) (time.Duration, bool) {
	if failures < 1 {
		return 0, true
	}
	var d time.Duration
	if len(s.Steps) > 0 {
		if failures > len(s.Steps) {
			return 0, false
		}
		d = s.Steps[failures-1]
	} else {
		if failures >= s.MaxAttempts {
			return 0, false
		}
		d = s.Base
		for i := 1; i < failures && (s.Cap == 0 || d < s.Cap) && d < maxWait; i++ {
			d *= 2
		}
		if s.Cap != 0 && d > s.Cap {
			d = s.Cap
		}
	}
	if s.Jitter > 0 {
		d += time.Duration(float64(d) * s.Jitter * (2*random - 1))
	}
	return d, true
}

// Attempts returns how many attempts the schedule allows in all.
func (s Schedule) Attempts() int {
	if len(s.Steps) > 0 {
		return len(s.Steps) + 1
	}
	return s.MaxAttempts
}

// Longest returns the longest wait between two attempts, with the jitter
// at its most: how long a retry may come after the attempt before it.
func (s Schedule) Longest() time.Duration {
	var longest, last time.Duration
	for failures := 1; ; failures++ {
		d, more := s.Next(failures, 1)
		if !more || len(s.Steps) == 0 && d == last {
			return longest // the end, or an exponential wait that stopped growing
		}
		longest, last = max(longest, d), d
	}
}

// Events emitted by the delivery workers.
const (
	EventDeliveryDead = "delivery.dead"
)

// NewDeliveryDeadEvent builds the delivery.dead event of a delivery that died
// at at with lastError: subscribers and operators learn which effect of which
// order automation gave up on.
func NewDeliveryDeadEvent(d *Delivery, lastError string, at time.Time) OutboxEvent {
	id := NewEventID(at)
	body, err := json.Marshal(struct {
		ID         string    `json:"id"`
		Type       string    `json:"type"`
		OccurredAt time.Time `json:"occurred_at"`
		OrderNo    string    `json:"order_no"`
		Delivery   any       `json:"delivery"`
	}{id, EventDeliveryDead, at, d.OrderNo, map[string]any{
		"id": d.ID, "subscriber": d.Subscriber, "event_id": d.EventID, "event_type": d.EventType,
		"attempts": d.Attempts, "last_error": lastError,
	}})
	if err != nil {
		panic("lapse: delivery.dead event does not marshal: " + err.Error())
	}
	return OutboxEvent{ID: id, OrderID: d.OrderID, OrderNo: d.OrderNo, Type: EventDeliveryDead, Payload: body, CreatedAt: at}
}

// ParseSchedule reads a schedule written as a list of waits, "1m,5m,15m"
// (stepped), or as "exp:BASE,CAP,ATTEMPTS", "exp:1s,5m,12" (exponential),
// each duration as ParseDuration reads it ("1h,1d").
// Jitter is 10%.
func ParseSchedule(s string) (Schedule, error) {
	sch := Schedule{Jitter: 0.1}
	if rest, ok := strings.CutPrefix(s, "exp:"); ok {
		parts := strings.Split(rest, ",")
		if len(parts) != 3 {
			return Schedule{}, Errorf(EINVALID, "schedule %q: write exp:BASE,CAP,ATTEMPTS such as exp:1s,5m,12", s)
		}
		base, err1 := ParseDuration(strings.TrimSpace(parts[0]))
		limit, err2 := ParseDuration(strings.TrimSpace(parts[1]))
		n, err3 := strconv.Atoi(strings.TrimSpace(parts[2]))
		if err := errors.Join(err1, err2, err3); err != nil {
			return Schedule{}, Errorf(EINVALID, "schedule %q: %v", s, err)
		}
		sch.Base, sch.Cap, sch.MaxAttempts = base, limit, n
	} else {
		for _, part := range strings.Split(s, ",") {
			d, err := ParseDuration(strings.TrimSpace(part))
			if err != nil {
				return Schedule{}, Errorf(EINVALID, "schedule %q: %v", s, err)
			}
			sch.Steps = append(sch.Steps, d)
		}
	}
	if err := sch.Validate(); err != nil {
		return Schedule{}, Errorf(EINVALID, "schedule %q: %s", s, ErrorMessage(err))
	}
	return sch, nil
}
