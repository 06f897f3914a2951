package payment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// decodeStrict decodes one JSON object into v, refusing what a lenient
// decoder would let through in a message about money: a key given twice at
// any depth (which of the two would count?), unknown fields, and data after
// the object. A number that does not fit its field (19.99 for an int64) is
// refused by encoding/json itself.
func decodeStrict(body []byte, v any) error {
	return decodeJSON(body, v, true)
}

// decodeLenient is decodeStrict but for unknown fields, which it lets
// through: Stripe and WeChat Pay add fields to their objects without notice,
// and a verified callback must not fail on one.
func decodeLenient(body []byte, v any) error {
	return decodeJSON(body, v, false)
}

func decodeJSON(body []byte, v any, strict bool) error {
	if err := checkDuplicateKeys(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("malformed JSON: data after the object")
	}
	return nil
}

// foldKey returns a key as encoding/json matches it to a field: without
// regard to case, by Unicode simple folding, so that "amount", "AMOUNT" and
// "Amount" are one key (and "k" and the Kelvin sign one letter). Each rune
// becomes the least rune of its folding orbit.
func foldKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// checkDuplicateKeys walks the tokens of a JSON document and fails on an
// object that names a key twice.
func checkDuplicateKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("malformed JSON: %w", err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return fmt.Errorf("malformed JSON: %w", err)
				}
				key, _ := k.(string)
				if seen[foldKey(key)] {
					return fmt.Errorf("malformed JSON: key %q appears twice (keys are matched without regard to case)", key)
				}
				seen[foldKey(key)] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	return walk()
}
