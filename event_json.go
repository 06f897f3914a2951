package lapse

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// appendEventJSON appends the JSON of p, an event about an order with or
// without its transition, byte for byte as json.Marshal writes it (which
// TestEventJSONIsMarshals pins, for every field of Order), without
// reflection: the deadline engine writes one with every close, and
// json.Marshal was most of what it spent to plan one. It returns false,
// and dst as it was, for what it does not write (an event with a Deadline
// or Payment, a time json.Marshal refuses, metadata that is not JSON):
// json.Marshal writes those, or says why not.
func appendEventJSON(dst []byte, p *eventPayload) ([]byte, bool) {
	if p.Deadline != nil || p.Payment != nil || p.Order == nil {
		return dst, false
	}
	o, start := p.Order, len(dst)
	w := eventWriter{b: dst, ok: true}
	w.str(`{"id":`, p.ID)
	w.str(`,"type":`, p.Type)
	w.time(`,"occurred_at":`, p.OccurredAt)
	w.str(`,"order":{"order_no":`, o.OrderNo)
	w.str(`,"flow":`, o.Flow)
	w.str(`,"state":`, string(o.State))
	w.timePtr(`,"deadline_at":`, o.DeadlineAt)
	w.int(`,"amount":`, o.Amount)
	w.str(`,"currency":`, o.Currency)
	w.str(`,"user_id":`, o.UserID)
	w.items(o.Items)
	w.str(`,"coupon":`, o.Coupon)
	w.raw(`,"metadata":`, o.Metadata)
	w.int(`,"version":`, o.Version)
	w.time(`,"created_at":`, o.CreatedAt)
	w.time(`,"updated_at":`, o.UpdatedAt)
	w.timePtr(`,"closed_at":`, o.ClosedAt)
	w.str(`,"close_reason":`, o.CloseReason)
	w.str(`,"fired_by":`, string(o.FiredBy))
	w.timePtr(`,"closed_deadline_at":`, o.ClosedDeadlineAt)
	if o.IntentAt != nil {
		w.time(`,"intent_at":`, *o.IntentAt)
	}
	if o.IntentProvider != "" {
		w.str(`,"intent_provider":`, o.IntentProvider)
	}
	if o.PayBy != nil {
		w.time(`,"pay_by":`, *o.PayBy)
	}
	w.b = append(w.b, '}')
	if t := p.Transition; t != nil {
		w.str(`,"transition":{"from":`, string(t.From))
		w.str(`,"to":`, string(t.To))
		w.str(`,"event":`, string(t.Event))
		w.str(`,"fired_by":`, string(t.FiredBy))
		if t.Reason != "" {
			w.str(`,"reason":`, t.Reason)
		}
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, '}')
	if !w.ok {
		return dst[:start], false
	}
	return w.b, true
}

// eventWriter appends the fields of an event; ok turns false at the first
// value it cannot write as json.Marshal would.
type eventWriter struct {
	b  []byte
	ok bool

	// The times written so far, each once (a close's event has three:
	// now, as it occurred, updated and closed, the deadline twice, and
	// the order's creation), and where in b: another of them is copied
	// from there rather than formatted again.
	times [4]writtenTime
	nt    int
}

type writtenTime struct {
	t          time.Time
	start, end int
}

// str appends key (the JSON before the value) and s as a JSON string:
// itself, quoted, when no byte of it needs escaping, else as json.Marshal
// escapes it.
func (w *eventWriter) str(key, s string) {
	w.b = append(w.b, key...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			w.b = append(w.b, q...)
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *eventWriter) int(key string, n int64) {
	w.b = strconv.AppendInt(append(w.b, key...), n, 10)
}

// time appends t as time.Time's MarshalJSON does, which refuses years
// outside 0 to 9999.
func (w *eventWriter) time(key string, t time.Time) {
	w.b = append(w.b, key...)
	for _, wt := range w.times[:w.nt] {
		// The same instant in the same location (==, not Equal) writes
		// the same bytes.
		if wt.t == t {
			w.b = append(w.b, w.b[wt.start:wt.end]...)
			return
		}
	}
	if y := t.Year(); y < 0 || y > 9999 {
		w.ok = false
		return
	}
	start := len(w.b)
	w.b = append(w.b, '"')
	w.b = append(t.AppendFormat(w.b, time.RFC3339Nano), '"')
	if w.nt < len(w.times) {
		w.times[w.nt] = writtenTime{t, start, len(w.b)}
		w.nt++
	}
}

func (w *eventWriter) timePtr(key string, t *time.Time) {
	if t == nil {
		w.b = append(append(w.b, key...), "null"...)
		return
	}
	w.time(key, *t)
}

// items appends the order's items; newOutboxEvent has made nil ones empty.
func (w *eventWriter) items(items []Item) {
	if items == nil {
		w.b = append(w.b, `,"items":null`...)
		return
	}
	w.b = append(w.b, `,"items":[`...)
	for i, it := range items {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.str(`{"sku":`, it.SKU)
		w.int(`,"qty":`, it.Qty)
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, ']')
}

// raw appends a json.RawMessage as json.Marshal does: null when nil, else
// compacted; not at all when it is not JSON, or has a byte that
// json.Marshal would escape in it and json.Compact would not (<, >, &, and
// the first of U+2028 and U+2029).
func (w *eventWriter) raw(key string, m json.RawMessage) {
	w.b = append(w.b, key...)
	if m == nil {
		w.b = append(w.b, "null"...)
		return
	}
	for _, c := range m {
		if c == '<' || c == '>' || c == '&' || c == 0xe2 {
			w.ok = false
			return
		}
	}
	buf := bytes.NewBuffer(w.b)
	if err := json.Compact(buf, m); err != nil {
		w.ok = false
		return
	}
	w.b = buf.Bytes()
}
