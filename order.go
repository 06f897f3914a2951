package lapse

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// State is a state of an order in its flow, such as UNPAID. States are typed
// string constants declared next to the flow that owns them.
type State string

// Event is something that moves an order from one state to another, such as
// PAY or TIMEOUT. Which events a state accepts is the flow's business.
type Event string

// FiredBy names the path that fired a transition. The deadline engine records
// it on every firing so that operators can see whether the precise trigger or
// the safety net did the work.
type FiredBy string

// Paths that fire transitions.
const (
	FiredByTimer FiredBy = "timer" // the deadline engine's precise path
	FiredBySweep FiredBy = "sweep" // the deadline engine's safety-net sweep
	FiredByRedis FiredBy = "redis" // the deadline engine, told by the shared trigger (Redis)
	FiredByAPI   FiredBy = "api"   // an HTTP API call
	FiredByApp   FiredBy = "app"   // a Go caller of the engine
	// FiredByOperator: a person or service closing orders by hand (a manual
	// close, lapse close or POST /v1/closes)
	FiredByOperator FiredBy = "operator"
	// FiredByPayment: the payment path, applying a verified provider callback
	// or a payment the closer found by asking the provider.
	FiredByPayment FiredBy = "payment"
	// FiredByEffect: a built-in subscriber acting on an event: settling a
	// group buy, issuing or compensating a membership's cards.
	FiredByEffect FiredBy = "effect"
)

// Item is one line of an order: a stock-keeping unit and a quantity.
type Item struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// Order is an order as stored. The database row is the single source of
// truth; an Order value is a snapshot of it at Version.
type Order struct {
	ID          int64           `json:"-"`
	OrderNo     string          `json:"order_no"`
	Flow        string          `json:"flow"`
	State       State           `json:"state"`
	DeadlineAt  *time.Time      `json:"deadline_at"` // the current state's deadline; nil when it has none
	Amount      int64           `json:"amount"`      // integer minor units of Currency
	Currency    string          `json:"currency"`
	UserID      string          `json:"user_id"`
	Items       []Item          `json:"items"`
	Coupon      string          `json:"coupon"`
	Metadata    json.RawMessage `json:"metadata"`
	Version     int64           `json:"version"` // incremented by every change
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	ClosedAt    *time.Time      `json:"closed_at"`    // set when the order entered a terminal state
	CloseReason string          `json:"close_reason"` // the event that ended it, e.g. TIMEOUT or CANCEL
	FiredBy     FiredBy         `json:"fired_by"`     // the path of the latest transition
	RequestHash string          `json:"-"`            // fingerprint of the create request, for idempotency

	// ClosedDeadlineAt is the deadline in force when the order entered a
	// terminal state (its PayBy if the customer had started paying): for a
	// TIMEOUT, the deadline that fired. Nil while the order is not terminal,
	// or when it ended in a state without a deadline.
	ClosedDeadlineAt *time.Time `json:"closed_deadline_at"`

	// IntentAt is when the customer started paying through IntentProvider,
	// if that was before the deadline: the order then waits out its flow's
	// grace, and the closer asks the provider before closing it.
	IntentAt       *time.Time `json:"intent_at,omitempty"`
	IntentProvider string     `json:"intent_provider,omitempty"`
	// PayBy, set with IntentAt, is the last moment (by the provider's clock)
	// a payment may have been made to pay the order: the deadline plus the
	// grace. While the closer asks the provider, DeadlineAt is when it asks
	// again; PayBy does not move.
	PayBy *time.Time `json:"pay_by,omitempty"`
}

// ProbeOrderPrefix begins the order numbers of the synthetic probe's orders
// (engine.Prober), and of no others: the engine refuses it to every other
// caller, so that an order is a probe's exactly when its number has it.
// Listings leave probe orders out unless asked (OrderListParams.Probes);
// everything else treats them as the orders they are, so that a stuck probe
// counts as a stuck order.
const ProbeOrderPrefix = "lapse-probe-"

// IsProbeOrderNo reports whether orderNo is reserved for the synthetic
// probe.
func IsProbeOrderNo(orderNo string) bool { return strings.HasPrefix(orderNo, ProbeOrderPrefix) }

// IsProbe reports whether o is an order of the synthetic probe.
func (o *Order) IsProbe() bool { return IsProbeOrderNo(o.OrderNo) }

// OrderCreate is a request to create an order.
type OrderCreate struct {
	OrderNo    string
	Flow       string
	UserID     string
	Amount     int64
	Currency   string
	Items      []Item
	Coupon     string
	TTL        time.Duration // deadline of the initial state, from now; 0: the flow's default
	DeadlineAt *time.Time    // absolute deadline of the initial state; excludes TTL
	Metadata   json.RawMessage
}

// Limits on order fields.
const (
	MaxOrderNoLen  = 64
	MaxUserIDLen   = 128
	MaxItems       = 100
	MaxSKULen      = 64
	MaxMetadataLen = 16 << 10
	// MaxMetadataDepth bounds how deep metadata nests objects and arrays,
	// the metadata object itself counting as the first level. Within
	// MaxMetadataLen, encoding/json alone takes up to 10,000 levels, which
	// every reader of the order (the console, a subscriber's decoder, a
	// store's JSON functions) would then have to take too.
	MaxMetadataDepth = 32
	// MaxAmount bounds an order's amount, in minor units: 10^14, a
	// trillion dollars or a hundred billion dinars, beyond any real order,
	// and far enough below 2^63 that the totals of many such orders still
	// add up (lapse reconcile), and below 2^53, so that every JSON reader
	// reads it exactly.
	MaxAmount = 100_000_000_000_000
)

var (
	orderNoPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)
	// textPattern admits printable text: no control characters, C0 or C1
	// (NUL, which PostgreSQL refuses; newlines and U+0085, which log
	// readers take for a line's end), no line or paragraph separators, and
	// no bidirectional controls, which would show the text around them
	// reordered to an operator ("u\u202Ex" shown as another user's id), as
	// CleanReason keeps them out of reasons.
	textPattern = regexp.MustCompile(`^[^\x00-\x1f\x7f-\x{9f}\x{61c}\x{200e}\x{200f}\x{2028}-\x{202e}\x{2066}-\x{2069}]*$`)
)

// Validate checks the request's own fields. It does not know the flows or the
// time; the engine checks those. The currency is one ValidCurrency takes,
// or NoCurrency for an order of the synthetic probe.
func (c *OrderCreate) Validate() error {
	var currencyErr error
	if c.Currency != NoCurrency || !IsProbeOrderNo(c.OrderNo) {
		currencyErr = CheckCurrency("currency", c.Currency)
	}
	switch {
	case c.OrderNo == "":
		return FieldError("order_no", "is required")
	case !orderNoPattern.MatchString(c.OrderNo):
		// Before the length, which counts bytes: this pattern admits ASCII
		// alone, whose bytes are its characters.
		return FieldError("order_no", "may hold only letters, digits and . _ : - and must start with a letter or digit")
	case len(c.OrderNo) > MaxOrderNoLen:
		return FieldError("order_no", "is longer than %d characters", MaxOrderNoLen)
	case c.Flow == "":
		return FieldError("flow", "is required")
	case c.UserID == "":
		return FieldError("user_id", "is required")
	case len(c.UserID) > MaxUserIDLen:
		return FieldError("user_id", "is longer than %d bytes of UTF-8", MaxUserIDLen)
	case !utf8.ValidString(c.UserID) || !textPattern.MatchString(c.UserID):
		return FieldError("user_id", "must be UTF-8 text without control characters")
	case c.Amount < 0:
		return FieldError("amount", "must not be negative (integer minor units)")
	case c.Amount > MaxAmount:
		return FieldError("amount", "must be at most %d minor units", int64(MaxAmount))
	case currencyErr != nil:
		return currencyErr
	case len(c.Items) > MaxItems:
		return FieldError("items", "has more than %d lines", MaxItems)
	case c.TTL < 0:
		return FieldError("ttl", "must be positive")
	case c.TTL > 0 && c.TTL < time.Microsecond:
		// Kept rounded up, it would be a deadline of 1µs whatever was sent.
		return FieldError("ttl", "must be at least 1µs, the precision a deadline is kept to")
	case c.TTL > 0 && c.DeadlineAt != nil:
		return FieldError("ttl", "and deadline_at exclude each other; send one")
	case len(c.Coupon) > MaxOrderNoLen:
		return FieldError("coupon", "is longer than %d bytes of UTF-8", MaxOrderNoLen)
	case !utf8.ValidString(c.Coupon) || !textPattern.MatchString(c.Coupon):
		return FieldError("coupon", "must be UTF-8 text without control characters")
	}
	if err := c.ValidateItems(); err != nil {
		return err
	}
	if len(c.Metadata) > 0 {
		if len(c.Metadata) > MaxMetadataLen {
			return FieldError("metadata", "is larger than %d bytes", MaxMetadataLen)
		}
		var obj map[string]json.RawMessage
		if !utf8.Valid(c.Metadata) {
			return FieldError("metadata", "must be UTF-8")
		}
		if jsonDeeper(c.Metadata, MaxMetadataDepth) {
			return FieldError("metadata", "nests objects and arrays more than %d levels deep", MaxMetadataDepth)
		}
		if err := json.Unmarshal(c.Metadata, &obj); err != nil || obj == nil {
			return FieldError("metadata", "must be a JSON object")
		}
	}
	return nil
}

// jsonDeeper reports whether the JSON text b nests objects and arrays more
// than max levels deep. It reads brackets outside strings only, so it
// answers for valid JSON; what it says of other text does not matter, as
// the caller refuses that anyway.
func jsonDeeper(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// Fingerprint returns a digest of everything in the request but its order_no.
// Two creates with the same order_no and fingerprint are the same request
// (SameRequest). A TTL is part of the request as a duration, so a retry of a
// TTL request matches even though "now" has moved. The lines are a
// purchase, not a sequence: the same lines in another order (a client that
// builds them from a map) are the same request, which the order keeps as
// first sent. Metadata that is an empty object says what none says.
func (c *OrderCreate) Fingerprint() string { return c.fingerprint(true) }

// SameRequest reports whether hash, the fingerprint an order was created
// with, is c's: c is that request again. An order created before lines were
// taken in any order, and an empty metadata object as none, kept the digest
// of the request as it was sent, which the same request sent again also
// matches.
func (c *OrderCreate) SameRequest(hash string) bool {
	return hash == c.Fingerprint() || hash == c.fingerprint(false)
}

// fingerprint is Fingerprint of the request made canonical (its lines in
// SKU and then quantity order, an empty metadata object left out) when
// canonical is set, else as it was sent. A request already canonical has
// the same digest either way.
func (c *OrderCreate) fingerprint(canonical bool) string {
	var meta any
	if len(c.Metadata) > 0 {
		dec := json.NewDecoder(bytes.NewReader(c.Metadata))
		dec.UseNumber()
		_ = dec.Decode(&meta) // validated before; a failure leaves meta nil
	}
	items := c.Items
	if len(items) == 0 {
		items = nil // absent and empty are the same request
	}
	if canonical {
		items = slices.Clone(items)
		slices.SortFunc(items, func(a, b Item) int { return cmp.Or(cmp.Compare(a.SKU, b.SKU), cmp.Compare(a.Qty, b.Qty)) })
		if m, ok := meta.(map[string]any); ok && len(m) == 0 {
			meta = nil
		}
	}
	var deadline string
	if c.DeadlineAt != nil {
		deadline = Ceil(*c.DeadlineAt).Format(time.RFC3339Nano) // as the engine keeps it
	}
	canon, _ := json.Marshal(struct {
		Flow       string `json:"flow"`
		UserID     string `json:"user_id"`
		Amount     int64  `json:"amount"`
		Currency   string `json:"currency"`
		Items      []Item `json:"items"`
		Coupon     string `json:"coupon"`
		TTL        int64  `json:"ttl"`
		DeadlineAt string `json:"deadline_at"`
		Metadata   any    `json:"metadata"`
	}{c.Flow, c.UserID, c.Amount, c.Currency, items, c.Coupon, int64(c.TTL), deadline, meta})
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// ValidateItems checks the item lines of the request. Lines may name a SKU
// more than once; the quantities of one SKU, and of the whole order, must
// add up to an int64.
func (c *OrderCreate) ValidateItems() error {
	perSKU := map[string]int64{}
	var total int64
	for i, it := range c.Items {
		if it.SKU == "" {
			return FieldError("items", "line %d: sku is required", i)
		}
		if !ValidSKU(it.SKU) {
			return FieldError("items", "line %d: sku must be UTF-8 text of at most %d bytes without control characters", i, MaxSKULen)
		}
		if it.Qty <= 0 {
			return FieldError("items", "line %d: qty must be a positive integer", i)
		}
		sum, ok := AddInt64(perSKU[it.SKU], it.Qty)
		if !ok {
			return FieldError("items", "line %d: the quantities of sku %q add up to more than %d", i, it.SKU, int64(math.MaxInt64))
		}
		perSKU[it.SKU] = sum
		if total, ok = AddInt64(total, it.Qty); !ok {
			return FieldError("items", "line %d: the quantities of the order add up to more than %d", i, int64(math.MaxInt64))
		}
	}
	return nil
}

// ValidSKU reports whether sku may name a stock-keeping unit: UTF-8 text of
// 1 to MaxSKULen bytes without control characters.
func ValidSKU(sku string) bool {
	return sku != "" && len(sku) <= MaxSKULen && utf8.ValidString(sku) && textPattern.MatchString(sku)
}

// Validate reports a creation that no store may be given, as an EINVALID
// error naming the field: no order or order_no, metadata that is not JSON,
// and events that ValidateOutbox refuses.
func (p *OrderCreateParams) Validate() error {
	switch {
	case p.Order == nil || p.Order.OrderNo == "":
		return FieldError("order_no", "is required")
	case len(p.Order.Metadata) > 0 && !json.Valid(p.Order.Metadata):
		return FieldError("metadata", "must be JSON")
	}
	return ValidateOutbox(p.Outbox)
}

// Validate reports a transition that no store may be given, as an EINVALID
// error naming the field: no order, and events that ValidateOutbox refuses.
func (p *OrderTransitionParams) Validate() error {
	if p.OrderID <= 0 {
		return FieldError("order_id", "a transition belongs to an order")
	}
	return ValidateOutbox(p.Outbox)
}

// ValidateOrderTransitions validates the transitions of one batch
// (OrderTransitionParams.Validate) and that no order has two: each was
// planned from the order's version, so a second one would be stale, and a
// store may apply the batch in any order.
func ValidateOrderTransitions(ps []*OrderTransitionParams) error {
	seen := make(map[int64]bool, len(ps))
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return err
		}
		if seen[p.OrderID] {
			return FieldError("order_id", "order %d has two transitions in one batch", p.OrderID)
		}
		seen[p.OrderID] = true
	}
	return nil
}

// Validate reports a deadline change that no store may be given, as an
// EINVALID error naming the field: no order, and events that ValidateOutbox
// refuses.
func (p *OrderDeadlineSetParams) Validate() error {
	if p.OrderID <= 0 {
		return FieldError("order_id", "a deadline change belongs to an order")
	}
	return ValidateOutbox(p.Outbox)
}

// Validate reports a claim that no store may be given, as an EINVALID error
// naming the field: a limit below 1 and no flows, or an empty one. A caller
// with nothing to claim does not ask.
func (p *OrderClaimDueParams) Validate() error {
	if p.Limit < 1 {
		return FieldError("limit", "a claim takes at least one order")
	}
	return validateNames("flows", p.Flows)
}

// Validate reports a page that no store may be given, as an EINVALID error
// naming limit: a limit below 1.
func (p *OrderDeadlineListParams) Validate() error {
	if p.Limit < 1 {
		return FieldError("limit", "a page holds at least one deadline")
	}
	return nil
}

// validateNames refuses an empty list of names (flows, subscribers), an
// empty name, and a name given twice.
func validateNames(field string, names []string) error {
	if len(names) == 0 {
		return FieldError(field, "names none")
	}
	for i, n := range names {
		if n == "" || slices.Contains(names[:i], n) {
			return FieldError(field, "names %q empty or twice", n)
		}
	}
	return nil
}

// ValidateFlows reports flows that OrderNextDeadline may not be given: none,
// or one empty or named twice.
func ValidateFlows(flows []string) error { return validateNames("flows", flows) }
