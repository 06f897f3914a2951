package payment

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestJSONDecodeStrict(t *testing.T) {
	t.Parallel()
	var n Notice
	if err := decodeStrict([]byte(hmacBody), &n); err != nil {
		t.Fatal(err)
	}
	if n.TxnID != "txn_1" || n.Amount != 1999 || n.Currency != "USD" || n.PaidAt.IsZero() {
		t.Fatalf("decoded %+v", n)
	}
	// Whitespace after the object is not data after it.
	if err := decodeStrict([]byte(hmacBody+" \n\t"), &n); err != nil {
		t.Fatalf("trailing whitespace: %v", err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"txn_id":"t","extra":1}`, "not a field"},
		{`{"txn_id":"t","txn_id":"u"}`, "more than once"},
		{`{"txn_id":"t","merchant":"m","merchant":"n"}`, "more than once"},
		{`{"amount":19.99}`, "integer"},
		{`{"amount":1e2}`, "integer"},
		{`{"amount":"100"}`, "integer"},
		{`{"amount":9223372036854775808}`, "integer"},
		{`{"txn_id":"t"}{"txn_id":"u"}`, "data after"},
		{`{"txn_id":"t"}]`, "after its JSON object"},
		{`{"paid_at":"yesterday"}`, "paid_at: must be an RFC 3339 time"},
		{`{"txn_id":`, "too early"},
		{``, "empty"},
	} {
		var n Notice
		err := decodeStrict([]byte(c.body), &n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.body, err, c.want)
		}
	}
}

func TestJSONDecodeLenient(t *testing.T) {
	t.Parallel()
	var v struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := decodeLenient([]byte(`{"id":"x","amount":5,"new_field":{"deep":[1,2]}}`), &v); err != nil {
		t.Fatalf("unknown fields must pass: %v", err)
	}
	if v.ID != "x" || v.Amount != 5 {
		t.Fatalf("decoded %+v", v)
	}
	for _, c := range []struct{ body, want string }{
		{`{"id":"x","new":{"a":1,"a":2}}`, "more than once"},
		{`{"amount":1,"amount":2}`, "more than once"},
		{`{"amount":1.5}`, "integer"},
		{`{"amount":-1e400}`, "integer"},
		{`{"id":"x"} {}`, "data after"},
		{`{"id":"x"`, ""}, // truncated: refused, though as a bare EOF
	} {
		if err := decodeLenient([]byte(c.body), &v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.body, err, c.want)
		}
	}
}

// FuzzDecodeStrict: decodeStrict never panics, accepts only valid JSON, and
// what it accepts it reads as encoding/json does (no second opinion on a
// document that Verify signed off); decodeLenient accepts it too.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		hmacBody,
		`{"kind":"paid","amount":1,"amount":2}`,
		`{"a":[{"b":{"c":[1,2,{"d":null}]}}]}`,
		`{"amount":19.99}`,
		`{"txn_id":"\u0074"} {}`,
		`{"paid_at":"2025-11-30T07:59:00+08:00","merchant":"\ud800"}`,
		`[`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var strict Notice
		if err := decodeStrict(body, &strict); err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("decodeStrict accepted invalid JSON %q", body)
		}
		var std, lenient Notice
		if err := json.Unmarshal(body, &std); err != nil {
			t.Fatalf("decodeStrict accepted %q, encoding/json refuses it: %v", body, err)
		}
		if err := decodeLenient(body, &lenient); err != nil {
			t.Fatalf("decodeStrict accepted %q, decodeLenient refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(strict, std) || !reflect.DeepEqual(strict, lenient) {
			t.Fatalf("%q read three ways: %+v, %+v, %+v", body, strict, std, lenient)
		}
	})
}

func TestKeysExactly(t *testing.T) {
	t.Parallel()
	// encoding/json would read each of these into a field; the callbacks
	// refuse them, strict or lenient.
	for _, body := range []string{
		`{"amount":1,"AMOUNT":2}`,
		`{"amount":1,"Amount":2}`,
		`{"Amount":2}`,
		`{"\u212aind":"paid"}`, // KELVIN SIGN folds to k
	} {
		var n Notice
		if err := decodeStrict([]byte(body), &n); err == nil || !strings.Contains(err.Error(), "matched exactly") {
			t.Errorf("decodeStrict(%s) = %v, want a key in the wrong case", body, err)
		}
		if err := decodeLenient([]byte(body), &n); err == nil || !strings.Contains(err.Error(), "matched exactly") {
			t.Errorf("decodeLenient(%s) = %v, want a key in the wrong case", body, err)
		}
	}
	var n Notice
	if err := decodeLenient([]byte(`{"amount":1,"amounts":2}`), &n); err != nil {
		t.Errorf("distinct keys refused: %v", err)
	}
}
