package lapse

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestEventJSONIsMarshals pins appendEventJSON to json.Marshal, byte for
// byte, on orders whose every field (found by reflection, so a field added
// to Order is filled too and must be written) takes arbitrary values: any
// string, nil and set times, items nil, empty and many, metadata with
// spaces and with what json.Marshal escapes. Where appendEventJSON declines,
// newOutboxEvent falls back to json.Marshal, so only the payloads it does
// write are compared, and it must write the plain ones.
func TestEventJSONIsMarshals(t *testing.T) {
	metadata := []string{``, `{}`, `{"a":1}`, ` { "channel" : "app" , "n": [1, 2.5e3, null, true] } `,
		`{"html":"<b>&</b>"}`, `{"sep":"` + "\u2028" + `"}`, `"just a string"`, `[]`}
	rapid.Check(t, func(t *rapid.T) {
		var o Order
		v := reflect.ValueOf(&o).Elem()
		for i := range v.NumField() {
			f, name := v.Field(i), v.Type().Field(i).Name
			switch f.Interface().(type) {
			case string, State, FiredBy:
				f.SetString(rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-zA-Z0-9_.:-]{0,24}`)).Draw(t, name))
			case int64:
				f.SetInt(rapid.Int64().Draw(t, name))
			case time.Time:
				f.Set(reflect.ValueOf(drawTime(t, name)))
			case *time.Time:
				if rapid.Bool().Draw(t, name+" set") {
					at := drawTime(t, name)
					f.Set(reflect.ValueOf(&at))
				}
			case []Item:
				if n := rapid.IntRange(-1, 3).Draw(t, name); n >= 0 {
					items := make([]Item, n)
					for j := range items {
						items[j] = Item{SKU: rapid.String().Draw(t, "sku"), Qty: rapid.Int64().Draw(t, "qty")}
					}
					f.Set(reflect.ValueOf(items))
				}
			case json.RawMessage:
				if m := rapid.SampledFrom(metadata).Draw(t, name); m != "" || rapid.Bool().Draw(t, name+" empty") {
					f.SetBytes([]byte(m)) // "" is an empty RawMessage, which json.Marshal refuses
				}
			default:
				t.Fatalf("Order.%s is a %s: teach this test (and appendEventJSON) to fill it", name, f.Type())
			}
		}
		if rapid.Bool().Draw(t, "repeat") {
			// A close's times repeat (now, the deadline): the same time
			// again, or the same instant in another zone, which reads
			// differently.
			at := o.UpdatedAt
			if rapid.Bool().Draw(t, "other zone") {
				at = at.In(time.FixedZone("", 3600))
			}
			o.ClosedAt, o.ClosedDeadlineAt, o.CreatedAt = &at, o.DeadlineAt, at
		}
		p := eventPayload{ID: NewEventID(o.UpdatedAt), Type: rapid.SampledFrom([]string{"order.closed", "order.<&>"}).Draw(t, "type"),
			OccurredAt: o.UpdatedAt, Order: &o}
		if rapid.Bool().Draw(t, "transition") {
			p.Transition = &payloadHop{From: State(rapid.String().Draw(t, "from")), To: "CLOSED", Event: "TIMEOUT",
				FiredBy: "timer", Reason: rapid.SampledFrom([]string{"", "deadline passed", "a \"quoted\"\n<reason>"}).Draw(t, "reason")}
		}
		want, err := json.Marshal(p)
		got, ok := appendEventJSON([]byte("prefix"), &p)
		switch {
		case err != nil && ok:
			t.Fatalf("json.Marshal refuses the event (%v) but appendEventJSON wrote %s", err, got)
		case !ok && string(got) != "prefix":
			t.Fatalf("appendEventJSON declined but left %q", got)
		case ok && string(got) != "prefix"+string(want):
			t.Fatalf("appendEventJSON wrote\n%s\njson.Marshal writes\n%s", got[len("prefix"):], want)
		case !ok && err == nil && plainEvent(&p):
			t.Fatalf("appendEventJSON declined a plain event: %s", want)
		}
	})
}

// drawTime is a time in any zone, whole seconds or not, now and then
// outside the years json.Marshal takes.
func drawTime(t *rapid.T, name string) time.Time {
	sec := rapid.OneOf(rapid.Int64Range(0, 4102444800), rapid.Int64Range(-70000000000, 300000000000)).Draw(t, name)
	ns := rapid.SampledFrom([]int64{0, 1, 500000000, 123456789, 999999999}).Draw(t, name+" ns")
	zone := rapid.SampledFrom([]*time.Location{time.UTC, time.FixedZone("", 8*3600), time.FixedZone("X", -5*3600-1800)}).Draw(t, name+" zone")
	return time.Unix(sec, ns).In(zone)
}

// plainEvent reports whether p is one appendEventJSON must write: metadata
// without what json.Marshal escapes in it, and every time within its years.
func plainEvent(p *eventPayload) bool {
	for _, c := range p.Order.Metadata {
		if c == '<' || c == '>' || c == '&' || c == 0xe2 {
			return false
		}
	}
	for _, at := range []*time.Time{&p.OccurredAt, p.Order.DeadlineAt, &p.Order.CreatedAt, &p.Order.UpdatedAt,
		p.Order.ClosedAt, p.Order.ClosedDeadlineAt, p.Order.IntentAt, p.Order.PayBy} {
		if at != nil && (at.Year() < 0 || at.Year() > 9999) {
			return false
		}
	}
	return true
}

// TestOutboxEventValidateParsesForeignPayloads: Validate skips parsing only
// the payload newOutboxEvent made, not one put in its place.
func TestOutboxEventValidateParsesForeignPayloads(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ev := NewOutboxEvent("order.closed", &Order{OrderNo: "A-1", UpdatedAt: at}, nil)
	if err := ev.Validate(); err != nil {
		t.Fatalf("the event as made: %v", err)
	}
	for _, bad := range []string{`{"order":`, `not json`, `{}}`} {
		ev.Payload = json.RawMessage(bad)
		if err := ev.Validate(); err == nil {
			t.Errorf("payload %q passed Validate", bad)
		}
	}
	short := NewOutboxEvent("order.closed", &Order{OrderNo: "A-2", UpdatedAt: at}, nil)
	short.Payload = short.Payload[:len(short.Payload)-1] // the same array, cut short
	if err := short.Validate(); err == nil {
		t.Error("a payload cut short passed Validate")
	}
}
