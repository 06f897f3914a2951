package jsonbody

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

type item struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

type request struct {
	OrderNo  *string         `json:"order_no"`
	Amount   *int64          `json:"amount"`
	Coupon   string          `json:"coupon"`
	Items    []item          `json:"items"`
	Metadata json.RawMessage `json:"metadata"`
	At       *time.Time      `json:"at"`
	Tags     map[string]int  `json:"tags"`
	Small    int8            `json:"small"`
	Untagged string
	Ignored  string `json:"-"`
	embedded
}

type embedded struct {
	Inner string `json:"inner"`
}

func TestDecodeAccepts(t *testing.T) {
	body := `{"order_no":"A-1","amount":1999,"coupon":"C\u00e9","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],
		"metadata":{"k":"满100元&立减=10元","K":[1,{"x":null}],"s":"\ud83d\ude00 \ufffd �"},"at":"2026-12-01T10:00:00Z",
		"tags":{"a":1,"A":2},"small":-128,"Untagged":"u","inner":"i"}`
	var r request
	if err := Decode([]byte(body), &r); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if *r.OrderNo != "A-1" || *r.Amount != 1999 || r.Coupon != "Cé" || len(r.Items) != 2 || r.Items[1].Qty != 2 ||
		r.Untagged != "u" || r.Inner != "i" || r.Tags["A"] != 2 || r.Small != -128 || r.At == nil {
		t.Fatalf("decoded %+v", r)
	}
	if err := Decode([]byte(`{"amount":null,"items":null,"metadata":null,"at":null}`), &r); err != nil {
		t.Errorf("null for pointers, slices and raw messages: %v", err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, body, field, detail string
	}{
		{"case variant after the key", `{"amount":1,"Amount":100}`, "Amount", "did you mean \"amount\""},
		{"case variant alone", `{"AMOUNT":100}`, "AMOUNT", "did you mean \"amount\""},
		{"Kelvin sign", "{\"\u212aey\":1,\"order_no\":\"x\"}", "\u212aey", "not a field"},
		{"case variant in an element", `{"items":[{"sku":"a","qty":1},{"SKU":"b","qty":1}]}`, "items[1].SKU", "did you mean \"sku\""},
		{"unknown", `{"colour":"red"}`, "colour", "not a field"},
		{"untagged in the wrong case", `{"untagged":"u"}`, "untagged", "did you mean \"Untagged\""},
		{"dash-tagged field", `{"Ignored":"x"}`, "Ignored", "not a field"},
		{"duplicate", `{"amount":1,"amount":100}`, "amount", "more than once"},
		{"duplicate in raw metadata", `{"metadata":{"a":{"b":1,"b":2}}}`, "metadata.a.b", "more than once"},
		{"duplicate in an element", `{"items":[{"sku":"a","qty":1},{"sku":"b","sku":"c","qty":1}]}`, "items[1].sku", "more than once"},
		{"invalid UTF-8 in a value", "{\"order_no\":\"A\xff\xfe\"}", "order_no", "UTF-8"},
		{"invalid UTF-8 in a key", "{\"or\xffder\":\"A\"}", "or\ufffdder", "UTF-8"},
		{"invalid UTF-8 in metadata", "{\"metadata\":{\"k\":[\"\xc3\"]}}", "metadata.k[0]", "UTF-8"},
		{"lone high surrogate", `{"coupon":"\ud800"}`, "coupon", "surrogate"},
		{"lone low surrogate", `{"coupon":"x\udc00y"}`, "coupon", "surrogate"},
		{"high surrogate then a letter", `{"coupon":"\ud83dx"}`, "coupon", "surrogate"},
		{"high surrogate twice", `{"metadata":{"a":"\ud83d\ud83d"}}`, "metadata.a", "surrogate"},
		{"NUL in a value", `{"coupon":"a\u0000b"}`, "coupon", "NUL"},
		{"NUL in an element", `{"items":[{"sku":"\u0000","qty":1}]}`, "items[0].sku", "NUL"},
		{"NUL in raw metadata", `{"metadata":{"k":["x\u0000"]}}`, "metadata.k[0]", "NUL"},
		{"NUL in a metadata key", `{"metadata":{"k\u0000":1}}`, "metadata.k\x00", "NUL"},
		{"NUL before a syntax error", `{"coupon":"\u0000",}`, "coupon", "NUL"},
		{"trailing garbage", `{"amount":1} x`, "", "after its JSON object"},
		{"second object", `{"amount":1}{"amount":2}`, "", "after its JSON object"},
		{"not an object", `[1]`, "", "must be a JSON object"},
		{"empty", ``, "", "empty"},
		{"syntax", `{"amount":1,}`, "", "not valid JSON"},
		{"fraction for an integer", `{"amount":19.99}`, "amount", "integer"},
		{"exponent for an integer", `{"amount":1e3}`, "amount", "integer"},
		{"beyond int64", `{"amount":9223372036854775808}`, "amount", "integer"},
		{"beyond int8", `{"small":128}`, "small", "8 bits"},
		{"string for an integer", `{"amount":"10"}`, "amount", "integer"},
		{"number for a string", `{"coupon":7}`, "coupon", "string"},
		{"object for an array", `{"items":{"sku":"a"}}`, "items", "array"},
		{"array for an object", `{"items":[[1]]}`, "items[0]", "object"},
		{"bool for an integer", `{"items":[{"qty":true}]}`, "items[0].qty", "integer"},
		{"null for a string", `{"coupon":null}`, "coupon", "null"},
		{"null for an integer in an element", `{"items":[{"sku":"a","qty":null}]}`, "items[0].qty", "null"},
		{"wrong type in a map", `{"tags":{"a":"x"}}`, "tags.a", "integer"},
		{"bad time", `{"at":"yesterday"}`, "at", "must be an RFC 3339 time"},
		{"time without a zone", `{"at":"2026-12-01T10:00:00"}`, "at", "must be an RFC 3339 time"},
		{"number for a time", `{"at":1764583200}`, "at", "must be an RFC 3339 time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r request
			err := Decode([]byte(tt.body), &r)
			le, ok := err.(*lapse.Error)
			if !ok || le.Code != lapse.EINVALID {
				t.Fatalf("Decode(%q) = %v, want an invalid *lapse.Error", tt.body, err)
			}
			if le.Field != tt.field || !strings.Contains(le.Message, tt.detail) {
				t.Errorf("Decode(%q) = field %q, %q; want field %q with %q", tt.body, le.Field, le.Message, tt.field, tt.detail)
			}
		})
	}
}

// TestDecodeNamesRefusedTime: a value that its type's own decoder refuses
// (a time that is not RFC 3339) is refused naming its field, wherever it
// is, in words of ours: never with Go's parse error, which callers would
// read as ours.
func TestDecodeNamesRefusedTime(t *testing.T) {
	type stop struct {
		At time.Time `json:"at"`
	}
	type route struct {
		Name  string                `json:"name"`
		Stops []stop                `json:"stops"`
		Times map[string]*time.Time `json:"times"`
	}
	for _, tt := range []struct {
		body, field string
		strict      bool
	}{
		{`{"name":"r","stops":[{"at":"2026-12-01T10:00:00Z"},{"at":"x"}]}`, "stops[1].at", true},
		{`{"stops":[{"at":"2026-12-01T10:00:00Z"}],"times":{"a":"2026-12-01T10:00:00Z","b":"24:00"}}`, "times.b", true},
		{`{"extra":"x","stops":[{"at":"2026-13-01T10:00:00Z","more":1}]}`, "stops[0].at", false},
	} {
		var r route
		decode := Decode
		if !tt.strict {
			decode = DecodeLenient
		}
		err := decode([]byte(tt.body), &r)
		le, ok := err.(*lapse.Error)
		if !ok || le.Code != lapse.EINVALID || le.Field != tt.field || !strings.Contains(le.Message, "RFC 3339") ||
			strings.Contains(le.Message, "parsing time") {
			t.Errorf("Decode(%s) = %#v; want invalid, naming %s, in words of ours", tt.body, err, tt.field)
		}
	}
}

func TestDecodeLenient(t *testing.T) {
	var r request
	if err := DecodeLenient([]byte(`{"amount":5,"extra":{"deep":[1,2]},"coupon":null}`), &r); err != nil || *r.Amount != 5 {
		t.Fatalf("DecodeLenient: %v, %+v", err, r)
	}
	for _, body := range []string{`{"amount":5,"Amount":6}`, `{"Amount":6}`, `{"extra":1,"extra":2}`, "{\"extra\":\"\xff\"}", `{"amount":5} 1`,
		`{"coupon":"\u0000"}`, `{"items":[{"sku":"a\u0000","qty":1}]}`, `{"coupon":"\u0000",}`} {
		if err := DecodeLenient([]byte(body), &r); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("DecodeLenient(%q) = %v, want invalid", body, err)
		}
	}
	// What it skips may hold NUL: it is never kept.
	if err := DecodeLenient([]byte(`{"amount":5,"extra":{"note":"a\u0000b","k\u0000":1}}`), &r); err != nil {
		t.Errorf("DecodeLenient with NUL in a skipped field: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"order_no":"A","amount":1,"items":[{"sku":"a","qty":1}],"metadata":{"a":[1,"\ud83d\ude00"]}}`))
	f.Add([]byte(`{"amount":1,"Amount":2}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r request
		if err := Decode(body, &r); err != nil {
			if lapse.ErrorCode(err) != lapse.EINVALID {
				t.Fatalf("Decode(%q): %v is not an invalid error", body, err)
			}
			return
		}
		// What Decode accepts, encoding/json reads the same way and the
		// body is valid UTF-8 with no case-folded keys.
		var again request
		if err := json.Unmarshal(body, &again); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
	})
}
