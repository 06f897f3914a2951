package jsonbody

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/lapsehq/lapse"
)

// refusedValue finds, in body (which check accepted for a value of type t),
// the first value that its type's own decoder refuses, and returns an
// EINVALID error that names its field and says what it must be; nil when
// none refuses. encoding/json returns such an error bare, without the field,
// and in Go's words ("parsing time \"x\" as \"2006-01-02T15:04:05Z07:00\":
// cannot parse ..."), which a caller would take for Lapse's answer. It runs
// only once decoding failed, so it may read the body again.
func refusedValue(body []byte, t reflect.Type, path string) *lapse.Error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) || decodesItself(reflect.PointerTo(t)) {
		if json.Unmarshal(body, reflect.New(t).Interface()) != nil {
			return lapse.FieldError(path, "%s", mustBe(t))
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		if len(body) == 0 || body[0] != '{' {
			return nil
		}
		var fs *fields
		if t.Kind() == reflect.Struct {
			fs = fieldsOf(t)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		if _, err := dec.Token(); err != nil {
			return nil
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil
			}
			k, _ := tok.(string)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil
			}
			vt := reflect.Type(nil)
			if fs != nil {
				vt = fs.exact[k] // a key of no field is skipped (DecodeLenient)
			} else {
				vt = t.Elem()
			}
			if vt == nil {
				continue
			}
			if err := refusedValue(raw, vt, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if isBytes(t) {
			return nil
		}
		var elems []json.RawMessage
		if json.Unmarshal(body, &elems) != nil {
			return nil
		}
		for i, raw := range elems {
			if err := refusedValue(raw, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var timeType = reflect.TypeFor[time.Time]()

// mustBe says what a value of type t, which decodes itself, must be.
func mustBe(t reflect.Type) string {
	if t == timeType {
		return "must be an RFC 3339 time, such as 2026-11-29T12:00:00Z"
	}
	return "is not a value this field takes"
}
