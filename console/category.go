package console

import (
	"regexp"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// Categories of what automation gave up on, for the review queue's filter
// and counts (seed 003's "distribution of failure reasons"). Each names
// what failed, as far as the engine's records tell; the first rule of
// categorize that matches wins.
const (
	// catProviderRefused: a payment provider refused a refund for good, or
	// an outside service refused an event for good (a 4xx).
	catProviderRefused = "provider_refused"
	// catPortUnreachable: an outside service could not be reached (not sent,
	// connection refused, breaker open) or answered with a server error.
	catPortUnreachable = "port_unreachable"
	// catPortTimeout: an outside service took the request and did not
	// answer in time: the outcome is unknown.
	catPortTimeout = "port_timeout"
	// catCallbackMismatch: a payment callback that does not match its
	// order (amount, currency, merchant) or that its provider could not
	// say whom it paid; a provider's report about a merchant refund that
	// disagrees with it, or about one Lapse never asked for.
	catCallbackMismatch = "callback_mismatch"
	// catStockShort: not enough stock for what the order holds.
	catStockShort = "stock_short"
	// catCardIssueFailed: a paid order's cards could not be issued (or
	// revoked) through its schedule: a membership in manual review.
	catCardIssueFailed = "card_issue_failed"
	// catNotificationFailed: a notification subscriber (webhook, broker,
	// notify port) gave up on an event.
	catNotificationFailed = "notification_failed"
	// catRefundFailed: a refund, of a late payment or a merchant's, did not
	// finish through its schedule.
	catRefundFailed = "refund_failed"
	// catGroupFailed: a group buy's charges failed through their schedule.
	catGroupFailed = "group_failed"
	catOther       = "other"
)

// categories are every category, in the order the queue shows them.
var categories = []string{catCardIssueFailed, catRefundFailed, catProviderRefused, catCallbackMismatch, catGroupFailed,
	catStockShort, catPortTimeout, catPortUnreachable, catNotificationFailed, catOther}

// failure is what the console knows of one thing automation gave up on:
// the review (or, for an order waiting for an operator without one, the
// transition that brought it there), the delivery that died, the payment
// in review, and the order.
type failure struct {
	Reason        string              // the review's reason, or the transition's
	Subscriber    string              // the dead delivery's subscriber
	Error         string              // the delivery's last attempt's error
	Outcome       string              // the last attempt's outcome, when known
	Unknown       bool                // the delivery's last outcome was unknown
	PaymentStatus lapse.PaymentStatus // of the payment in review
	PaymentReason string              // why the payment is late or in review
	Flow          *lapse.Flow         // the order's; nil when it is not loaded
	State         lapse.State         // the order's
	Event         lapse.Event         // of the transition into State, for an order without a review
}

// The texts the engine writes into a review's reason (engine/deliverer.go,
// die; engine/payment.go, paymentReview; engine/refund.go, review;
// engine/order_refund.go, refundReviewReason).
var (
	deliveryReason = regexp.MustCompile(`^delivery \d+ of (\S+) to (\S+) (?:ran out of retries( with its last outcome unknown)? after \d+ attempts|was refused at attempt \d+): (.*)$`)
	paymentReason  = regexp.MustCompile(`^payment .* is in review: (.*)$`)
	refundReason   = regexp.MustCompile(`^refund .* of order .* is in review: (.*)$`)
)

// notifiers are the subscribers that tell people and systems: the sinks and
// notify ports lapse serve wires (cmd/lapse/subscribers.go).
var notifiers = []string{"webhook", "nats", "rabbitmq", "notify-port", "group-notify", "admin-notify"}

// categorize returns f's category. A dead delivery is categorized by its
// subscriber: the built-in effects (issue, refund, settle) by what they do,
// others by how they failed; a review without one by its payment, and an
// order waiting without a review by its flow's state. Late payments are
// categorized by what became of their refund.
func categorize(f failure) string {
	if m := deliveryReason.FindStringSubmatch(f.Reason); m != nil {
		if f.Subscriber == "" {
			f.Subscriber = m[2]
		}
		if f.Error == "" {
			f.Error = m[4]
		}
		f.Unknown = f.Unknown || m[3] != ""
	}
	if m := paymentReason.FindStringSubmatch(f.Reason); m != nil && f.PaymentReason == "" {
		f.PaymentReason, f.PaymentStatus = m[1], lapse.PaymentReview
	}
	if m := refundReason.FindStringSubmatch(f.Reason); m != nil && f.PaymentReason == "" {
		// A merchant refund in review: the provider's reports about it
		// disagree with Lapse's books, as a mismatched payment's do.
		f.PaymentReason, f.PaymentStatus = m[1], lapse.PaymentReview
	}
	text := strings.ToLower(f.Reason + " " + f.Error + " " + f.PaymentReason)
	if containsAny(text, "not enough stock", "out of stock", "insufficient stock", "stock short", "库存不足") {
		return catStockShort
	}
	if f.Subscriber != "" {
		return deliveryCategory(f, text)
	}
	switch {
	case f.PaymentStatus == lapse.PaymentReview && strings.HasPrefix(f.PaymentReason, "refund refused"):
		return catProviderRefused
	case f.PaymentStatus == lapse.PaymentReview:
		return catCallbackMismatch
	case f.Flow == nil:
		return catOther
	case f.Flow.Group.Failed != "" && into(f.Flow, f.Flow.Group.Failed, f.State):
		return catGroupFailed
	case f.Flow.Refunds.Partial != "" && f.Event == f.Flow.Refunds.Partial:
		// A membership goes to manual review when a refund did not go
		// through in full.
		return catRefundFailed
	case f.Flow.Issues.GiveUp != "" && into(f.Flow, f.Flow.Issues.GiveUp, f.State):
		return catCardIssueFailed
	}
	return catOther
}

// deliveryCategory is the category of a dead delivery, given the lower-case
// text of everything said about it.
func deliveryCategory(f failure, text string) string {
	refused := f.Outcome == lapse.OutcomeRefused || strings.Contains(text, "refused for good")
	switch {
	case f.Subscriber == engine.SettleSubscriber:
		return catGroupFailed
	case (f.Subscriber == engine.RefundSubscriber || f.Subscriber == engine.GroupRefundSubscriber) && refused:
		return catProviderRefused
	case f.Subscriber == engine.RefundSubscriber || f.Subscriber == engine.GroupRefundSubscriber:
		return catRefundFailed
	case f.Subscriber == engine.IssueSubscriber || f.Subscriber == engine.RevokeSubscriber:
		return catCardIssueFailed
	case isNotifier(f.Subscriber, f.Error):
		return catNotificationFailed
	case refused:
		return catProviderRefused
	case containsAny(text, "not sent", "connection refused", "no such host", "circuit breaker open", "no free slot",
		"network is unreachable"):
		return catPortUnreachable
	case f.Unknown || f.Outcome == lapse.OutcomeUnknown ||
		containsAny(text, "outcome unknown", "no answer", "timeout", "timed out", "deadline exceeded"):
		return catPortTimeout
	case serverError.MatchString(text):
		return catPortUnreachable
	}
	return catOther
}

// serverError is an outside service's answer that it is down or overloaded,
// as httpcall.StatusError writes it.
var serverError = regexp.MustCompile(`\bhttp (5\d\d|429)\b`)

// into reports whether event ev of flow leads into state s.
func into(flow *lapse.Flow, ev lapse.Event, s lapse.State) bool {
	for _, t := range flow.Transitions {
		if t.Event == ev && t.To == s {
			return true
		}
	}
	return false
}

// isNotifier reports whether a subscriber (or the error it died of) is one
// that notifies.
func isNotifier(sub, err string) bool {
	for _, n := range notifiers {
		if sub == n {
			return true
		}
	}
	return strings.Contains(sub, "notify") ||
		strings.HasPrefix(err, "webhook:") || strings.HasPrefix(err, "nats:") || strings.HasPrefix(err, "rabbitmq:")
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func init() {
	addMessages(map[string]msg{
		"cat." + catProviderRefused:    {"Provider refused", "对方拒绝"},
		"cat." + catPortUnreachable:    {"Service unreachable", "服务不可达"},
		"cat." + catPortTimeout:        {"Timeout, outcome unknown", "超时，结果未知"},
		"cat." + catCallbackMismatch:   {"Callback mismatch", "回调不符"},
		"cat." + catStockShort:         {"Stock short", "库存不足"},
		"cat." + catCardIssueFailed:    {"Card issue failed", "发卡失败"},
		"cat." + catNotificationFailed: {"Notification failed", "通知失败"},
		"cat." + catRefundFailed:       {"Refund failed", "退款失败"},
		"cat." + catGroupFailed:        {"Group buy failed", "拼团失败"},
		"cat." + catOther:              {"Other", "其他"},
	})
}
