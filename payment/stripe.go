package payment

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// StripeSignatureHeader carries the signature of a Stripe webhook event:
//
//	Stripe-Signature: t=1764460800,v1=5257a869…,v0=6ffbb59b…
//
// v1 is the lowercase hex HMAC-SHA256, under the endpoint's signing secret
// (the whole "whsec_…" string, as bytes), of t, a '.', and the raw body.
// While a secret is rolled Stripe sends one v1 per secret; v0 entries are a
// legacy test scheme and never count.
const StripeSignatureHeader = "Stripe-Signature"

// Stripe verifies Stripe webhook events. payment_intent.succeeded becomes a
// paid notice and charge.refunded a refunded one; a dispute's
// (charge.dispute.*) withdrawal of the money a refunded notice, and its
// other events a dispute notice (disputed); every other event type
// verifies and is acknowledged without a notice. The zero Tolerance is
// DefaultTolerance, the 300 seconds Stripe's own libraries accept.
//
// An endpoint acts only on events of its mode, live unless TestMode. A live
// Connect endpoint also receives its connected accounts' test-mode events,
// signed with its live secret, and a test payment moves no money: such an
// event is acknowledged without a notice. A live event at a TestMode
// endpoint is real money sent where it was not expected, and is refused
// (EINVALID), so that it shows and Stripe sends it again.
//
// A Connect endpoint receives the events of every connected account, each
// naming its account; whoever holds a connected account (a Standard one is
// its owner's) can make a payment there, to themselves, under any
// metadata.order_no. Only a payment made on Account pays its order: one
// made on another account is a notice in review (PaymentNotice.Review),
// recorded and acknowledged, never applied.
type Stripe struct {
	Provider  string   // the name notices carry, as in the callback URL
	Secrets   [][]byte // every endpoint signing secret that may have signed
	Tolerance time.Duration
	TestMode  bool // act on test-mode events (livemode false), not live ones
	// Account is the Stripe account whose payments are this endpoint's:
	// "" for the platform's own (events that name no account), or the
	// connected account (acct_…) that a Connect platform charges on.
	Account string
}

var _ lapse.PaymentCallback = (*Stripe)(nil)

// Stripe event types that Lapse acts on.
const (
	stripePaymentSucceeded = "payment_intent.succeeded"
	stripeChargeRefunded   = "charge.refunded"
	// A dispute (chargeback): opened, its amount taken from the merchant,
	// given back (won after the withdrawal), closed.
	stripeDisputeCreated    = "charge.dispute.created"
	stripeDisputeWithdrawn  = "charge.dispute.funds_withdrawn"
	stripeDisputeReinstated = "charge.dispute.funds_reinstated"
	stripeDisputeClosed     = "charge.dispute.closed"
)

// stripeActs says whether Lapse acts on events of type typ.
func stripeActs(typ string) bool {
	switch typ {
	case stripePaymentSucceeded, stripeChargeRefunded, stripeDisputeCreated, stripeDisputeWithdrawn,
		stripeDisputeReinstated, stripeDisputeClosed:
		return true
	}
	return false
}

// stripeEvent is the part of a Stripe event Lapse reads. Unknown fields are
// let through: Stripe adds fields to its objects in every API version.
type stripeEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Account string `json:"account"` // the connected account, for Connect events
	// Livemode is false for a test-mode event, and for one without it.
	Livemode bool `json:"livemode"`
	Data     struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

type stripePaymentIntent struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	AmountReceived json.RawMessage   `json:"amount_received"`
	Currency       string            `json:"currency"`
	Metadata       map[string]string `json:"metadata"`
}

type stripeCharge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	PaymentIntent  string            `json:"payment_intent"`
	AmountRefunded json.RawMessage   `json:"amount_refunded"`
	Currency       string            `json:"currency"`
	Metadata       map[string]string `json:"metadata"`
	Refunds        *struct {
		Data []struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		} `json:"data"`
	} `json:"refunds"`
}

// Verify checks the StripeSignatureHeader against every secret and its
// timestamp against the tolerance (either way: Stripe's libraries only
// refuse old ones, but a timestamp from the future is no more believable),
// then reads the event.
func (s *Stripe) Verify(hdr http.Header, body []byte, now time.Time) (*lapse.PaymentNotice, error) {
	header := hdr.Get(StripeSignatureHeader)
	if header == "" {
		return nil, lapse.Refine(lapse.ErrSignature, "the %s header is missing", StripeSignatureHeader)
	}
	sec, sigs, err := parseTimedSignature(header, StripeSignatureHeader)
	if err != nil {
		return nil, err
	}
	if err := inWindow(time.Unix(sec, 0), now, s.tolerance()); err != nil {
		return nil, err
	}
	// Stripe signs the decimal form of t, so that is what we MAC, whatever
	// leading zeros or sign the header spelled it with.
	if !signedBy(s.Secrets, sigs, strconv.FormatInt(sec, 10), body) {
		return nil, lapse.Refine(lapse.ErrSignature, "no v1 signature in the %s header matches the body", StripeSignatureHeader)
	}
	var ev stripeEvent
	if err := decodeLenient(body, &ev); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the Stripe event: %s", lapse.ErrorMessage(err))
	}
	if ev.Type == "" {
		return nil, lapse.Errorf(lapse.EINVALID, "the Stripe event has no type")
	}
	if !stripeActs(ev.Type) {
		return nil, nil
	}
	switch {
	case ev.Livemode && s.TestMode:
		return nil, lapse.Errorf(lapse.EINVALID, "the %s event %s is live (livemode true), and this endpoint is configured for test mode", ev.Type, ev.ID)
	case !ev.Livemode && !s.TestMode:
		return nil, nil // a test payment: no money moved
	case ev.Type == stripePaymentSucceeded:
		return s.paid(&ev, body)
	case ev.Type == stripeChargeRefunded:
		return s.refunded(&ev, body)
	}
	return s.disputed(&ev, body)
}

func (s *Stripe) paid(ev *stripeEvent, raw []byte) (*lapse.PaymentNotice, error) {
	var pi stripePaymentIntent
	if err := decodeLenient(ev.Data.Object, &pi); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the Stripe event's data.object: %s", lapse.ErrorMessage(err))
	}
	if pi.Object != "payment_intent" {
		return nil, lapse.Errorf(lapse.EINVALID, "a %s event carries a %q, not a payment_intent", ev.Type, pi.Object)
	}
	n := &lapse.PaymentNotice{Provider: s.Provider, Kind: lapse.NoticePaid, TxnID: pi.ID, OrderNo: pi.Metadata["order_no"],
		Currency: strings.ToUpper(pi.Currency), Merchant: ev.Account, PaidAt: time.Unix(ev.Created, 0).UTC(), Raw: raw}
	if ev.Account != s.Account {
		n.Review = fmt.Sprintf("the Stripe event %s is a payment made on account %q, not on %s", ev.ID, ev.Account, s.accountName())
	}
	if err := checkStripeNotice(n, ev, "amount_received", pi.AmountReceived); err != nil {
		return nil, err
	}
	return n, nil
}

func (s *Stripe) refunded(ev *stripeEvent, raw []byte) (*lapse.PaymentNotice, error) {
	var ch stripeCharge
	if err := decodeLenient(ev.Data.Object, &ch); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the Stripe event's data.object: %s", lapse.ErrorMessage(err))
	}
	if ch.Object != "charge" {
		return nil, lapse.Errorf(lapse.EINVALID, "a %s event carries a %q, not a charge", ev.Type, ch.Object)
	}
	// Since API version 2022-11-15 a charge no longer embeds its refunds,
	// so the charge id stands in for the refund's: one refund notice per
	// charge, for the amount refunded so far.
	refundID, at := ch.ID, ev.Created
	if ch.Refunds != nil {
		latest := int64(-1)
		for _, r := range ch.Refunds.Data {
			if r.ID != "" && r.Created > latest {
				refundID, at, latest = r.ID, r.Created, r.Created
			}
		}
	}
	n := &lapse.PaymentNotice{Provider: s.Provider, Kind: lapse.NoticeRefunded, TxnID: ch.PaymentIntent, RefundID: refundID,
		OrderNo: ch.Metadata["order_no"], Currency: strings.ToUpper(ch.Currency),
		Merchant: ev.Account, PaidAt: time.Unix(at, 0).UTC(), Raw: raw, RefundedTotal: true}
	if err := checkStripeNotice(n, ev, "amount_refunded", ch.AmountRefunded); err != nil {
		return nil, err
	}
	return n, nil
}

type stripeDispute struct {
	ID            string          `json:"id"`
	Object        string          `json:"object"`
	Amount        json.RawMessage `json:"amount"`
	Currency      string          `json:"currency"`
	Charge        string          `json:"charge"`
	PaymentIntent string          `json:"payment_intent"`
	Reason        string          `json:"reason"`
	Status        string          `json:"status"`
}

// disputed reads a dispute event. A dispute names its payment (its
// payment_intent, the paid notice's transaction), not its order. The money
// it takes from the merchant (funds_withdrawn, or closed lost, which
// Stripe withdraws at the latest then) is a refunded notice of the
// dispute's amount under the dispute's id, with a Review naming it: the
// same withdrawal reported twice is one refund. A dispute opened, its
// money given back (funds_reinstated) or closed otherwise moves no money
// on Lapse's books: a dispute notice, which puts the payment in review.
func (s *Stripe) disputed(ev *stripeEvent, raw []byte) (*lapse.PaymentNotice, error) {
	var dp stripeDispute
	if err := decodeLenient(ev.Data.Object, &dp); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the Stripe event's data.object: %s", lapse.ErrorMessage(err))
	}
	if dp.Object != "dispute" {
		return nil, lapse.Errorf(lapse.EINVALID, "a %s event carries a %q, not a dispute", ev.Type, dp.Object)
	}
	switch {
	case dp.PaymentIntent == "":
		return nil, lapse.Errorf(lapse.EINVALID, "data.object.payment_intent is missing from a %s event", ev.Type)
	case dp.ID == "":
		return nil, lapse.Errorf(lapse.EINVALID, "data.object.id is missing from a %s event", ev.Type)
	}
	n := &lapse.PaymentNotice{Provider: s.Provider, Kind: lapse.NoticeDispute, TxnID: dp.PaymentIntent, RefundID: dp.ID,
		Currency: strings.ToUpper(dp.Currency), Merchant: ev.Account, PaidAt: time.Unix(ev.Created, 0).UTC(), Raw: raw}
	if err := checkStripeNotice(n, ev, "amount", dp.Amount); err != nil || n.Kind == lapse.NoticeUnreadable {
		return n, err
	}
	what := fmt.Sprintf("Stripe dispute %s (reason %q) of payment %s, charge %s, for %s", dp.ID, dp.Reason, dp.PaymentIntent,
		dp.Charge, lapse.Money(n.Amount, n.Currency))
	switch {
	case ev.Type == stripeDisputeWithdrawn || ev.Type == stripeDisputeClosed && dp.Status == "lost":
		n.Kind = lapse.NoticeRefunded
		n.Review = fmt.Sprintf("%s: Stripe withdrew the disputed amount from the merchant (%s, status %s); "+
			"the customer has the money back, and the payment must not be refunded again", what, ev.Type, dp.Status)
	case ev.Type == stripeDisputeCreated:
		n.Review = fmt.Sprintf("%s is opened (status %s): the customer disputes the payment; do not refund it while the dispute is open", what, dp.Status)
	case ev.Type == stripeDisputeReinstated:
		n.Review = fmt.Sprintf("%s: Stripe gave the withdrawn amount back to the merchant (status %s); "+
			"the withdrawal recorded as a refund in review did not stand: settle that refund as failed", what, dp.Status)
	default:
		n.Review = fmt.Sprintf("%s is closed with status %s", what, dp.Status)
	}
	return n, nil
}

// checkStripeNotice refuses a notice that names no transaction, order or
// refund, naming the Stripe field it came from, sets its amount from
// amount, the object's amountField, in ISO 4217's minor units of its
// currency (stripeToISO), and makes it unreadable when that or
// its time cannot be taken as they are. A currency that is not three
// letters is passed on as sent.
func checkStripeNotice(n *lapse.PaymentNotice, ev *stripeEvent, amountField string, amount json.RawMessage) error {
	var ok bool
	n.Amount, ok = minorUnits(amount)
	if ok {
		n.Amount, ok = stripeToISO(n.Currency, n.Amount)
	}
	switch {
	case n.TxnID == "" && n.Kind == lapse.NoticePaid:
		return lapse.Errorf(lapse.EINVALID, "data.object.id is missing from a %s event", ev.Type)
	case n.TxnID == "":
		return lapse.Errorf(lapse.EINVALID, "data.object.payment_intent is missing from a %s event", ev.Type)
	case n.RefundID == "" && n.Kind == lapse.NoticeRefunded:
		return lapse.Errorf(lapse.EINVALID, "data.object.id is missing from a %s event", ev.Type)
	case n.OrderNo == "" && n.Kind != lapse.NoticeDispute: // a dispute names no order
		return lapse.Errorf(lapse.EINVALID, "data.object.metadata.order_no is missing from a %s event", ev.Type)
	case !ok:
		unreadable(n, "data.object.%s %s of the %s event %s is not a positive integer number of Stripe's minor units of %s", amountField, sent(amount), ev.Type, ev.ID, n.Currency)
	case ev.Created <= 0:
		unreadable(n, "the created time %d of the %s event %s is not one", ev.Created, ev.Type, ev.ID)
	}
	return nil
}

// stripeExponents are the minor-unit digits Stripe's API counts a currency
// in where they are not ISO 4217's (lapse.CurrencyExponent): ISK stays a
// two-decimal currency in the API (100 is 1 króna, in multiples of 100),
// and MGA is one of Stripe's zero-decimal currencies (1000 is 1000 ariary).
var stripeExponents = map[string]int{"ISK": 2, "MGA": 0}

// stripeToISO returns amount, in Stripe's minor units of currency, in ISO
// 4217's, in which orders are counted, or false when it has none there (an
// ISK amount that is not whole krónur) or does not fit.
func stripeToISO(currency string, amount int64) (int64, bool) {
	exp, odd := stripeExponents[currency]
	if !odd {
		return amount, true
	}
	for d := lapse.CurrencyExponent(currency); exp > d; exp-- {
		if amount%10 != 0 {
			return 0, false
		}
		amount /= 10
	}
	for d := lapse.CurrencyExponent(currency); exp < d; exp++ {
		if amount > math.MaxInt64/10 {
			return 0, false
		}
		amount *= 10
	}
	return amount, true
}

// Ack answers 200 {"received":true} for an event handled, and otherwise a
// status by the error's code with {"error":…}: Stripe retries any non-2xx.
// AckNote answers an event handled with note: {"received":true,"message":…}
// (Stripe reads only the status; its dashboard shows the body).
func (s *Stripe) AckNote(w http.ResponseWriter, note string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	msg, _ := json.Marshal(note)
	w.Write([]byte(`{"received":true,"message":` + string(msg) + "}\n"))
}

func (s *Stripe) Ack(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err == nil {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"received":true}` + "\n"))
		return
	}
	w.WriteHeader(ackStatus(err))
	msg, _ := json.Marshal(lapse.ErrorMessage(err))
	w.Write([]byte(`{"error":` + string(msg) + "}\n"))
}

// accountName names Account in a review's reason.
func (s *Stripe) accountName() string {
	if s.Account == "" {
		return "the platform's own account"
	}
	return fmt.Sprintf("%q", s.Account)
}

func (s *Stripe) tolerance() time.Duration {
	if s.Tolerance > 0 {
		return s.Tolerance
	}
	return DefaultTolerance
}
