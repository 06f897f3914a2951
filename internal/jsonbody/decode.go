// Package jsonbody decodes the JSON bodies that reach Lapse (API requests,
// payment callbacks, the sandbox's requests) with one strict reading, so that
// a body means one thing to Lapse and to every proxy and parser on its way.
//
// encoding/json alone is lenient where money cannot be: it matches keys to
// fields without regard to case ("Amount" fills amount), lets the last of a
// repeated key win, replaces invalid UTF-8 and lone surrogate escapes with
// U+FFFD, and reads null into a string or an integer as nothing. Decode
// refuses all of these, naming the field.
package jsonbody

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/lapsehq/lapse"
)

// Decode decodes body, exactly one JSON object, into v, which must point to
// a struct. It refuses, with an EINVALID *lapse.Error naming the field (a
// path such as items[1].sku):
//   - a syntax error, a top-level value that is not an object, or data after it;
//   - a key repeated in one object, at any depth;
//   - a key that is not exactly the name of a field: unknown, or in another case;
//   - invalid UTF-8, or an escape of half a surrogate pair (\ud800), in any string;
//   - \u0000 (NUL) in any string, which no store can keep as text (PostgreSQL
//     refuses it in text and in jsonb); DecodeLenient refuses it only in
//     the keys and values it reads;
//   - a value of the wrong type for its field, a number that is not an
//     integer (or does not fit) for an integer field, and null for a field
//     that cannot be absent (a string, a number or a bool; pointers, slices,
//     maps and json.RawMessage take null).
//
// The inside of a json.RawMessage, a map or an interface field is checked
// for syntax, repeated keys and UTF-8 only.
func Decode(body []byte, v any) error { return decode(body, v, true) }

// DecodeLenient is Decode for documents that others define and extend
// (Stripe events, WeChat Pay notifications): keys that name no field are
// skipped, and null is read as absent, as their publishers intend. A key that
// differs from a field's name only in case is still refused, since
// encoding/json would read it into that field.
func DecodeLenient(body []byte, v any) error { return decode(body, v, false) }

func decode(body []byte, v any, strict bool) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsonbody: Decode needs a non-nil pointer, not %T", v)
	}
	if err := check(body, rv.Type().Elem(), strict); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		// The walk checked keys and types; what is left is a type's own
		// decoder refusing its value, in Go's words and without its field.
		if ferr := refusedValue(body, rv.Type().Elem(), ""); ferr != nil {
			return ferr
		}
		return lapse.Errorf(lapse.EINVALID, "the body does not match the request")
	}
	return nil
}

// check refuses what Decode refuses in body, before encoding/json reads it.
// Almost every body is valid JSON, and for those walker, which reads the
// bytes themselves, does the work several times faster than reading
// json.Decoder's tokens. A body that is not is left to tokenWalker, which
// gives the error Decode has always given for it: the first of a syntax
// error and a refused key or value before it (in {"amount":1,"amount":2,}
// the repeated key), and where the syntax breaks.
func check(body []byte, root reflect.Type, strict bool) error {
	if !json.Valid(body) {
		return walkTokens(body, root, strict)
	}
	return walk(body, root, strict)
}

// maxDepth is encoding/json's own nesting limit; checking it here names the
// field instead of failing with a bare syntax error.
const maxDepth = 10000

// checked returns the type a value is checked against: pointers followed,
// and nil for what decodes itself (json.RawMessage, time.Time and other
// Unmarshalers) or takes anything (interfaces).
func checked(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
	// Asking a type whether it implements an interface costs more than the
	// rest of checking its value.
	if c, ok := checkedCache.Load(t); ok {
		ct, _ := c.(reflect.Type) // nil is stored as a nil interface
		return ct
	}
	ct := checkedOf(t)
	checkedCache.Store(t, ct)
	return ct
}

var checkedCache sync.Map // reflect.Type → reflect.Type

// checkedOf is checked without the cache.
func checkedOf(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		if decodesItself(t) {
			return nil
		}
		t = t.Elem()
	}
	if decodesItself(t) || decodesItself(reflect.PointerTo(t)) || t.Kind() == reflect.Interface {
		return nil
	}
	return t
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func decodesItself(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || t.Implements(textUnmarshalerType)
}

func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

func isBytes(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8
}

// nulRefused is the error of a string holding \u0000.
const nulRefused = "holds \\u0000 (NUL), which no text can keep"

// checkEscapes finds a \u escape of half a surrogate pair in raw JSON text,
// and, when nul is set, an escape of NUL.
func checkEscapes(raw []byte, nul bool) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // \", \\ and the rest: skip the escaped byte
			continue
		}
		r, ok := hex4(raw[i+2:])
		if !ok {
			continue // a syntax error, which the decoder reports
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			lo, ok := rune(0), false
			if rest := raw[i+6:]; len(rest) >= 6 && rest[0] == '\\' && rest[1] == 'u' {
				lo, ok = hex4(rest[2:])
			}
			if !ok || lo < 0xDC00 || lo >= 0xE000 {
				return fmt.Errorf("holds \\u%04x, half of a surrogate pair without its other half: not valid Unicode", r)
			}
			i += 11
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Errorf("holds \\u%04x, half of a surrogate pair without its other half: not valid Unicode", r)
		case r == 0 && nul:
			return errors.New(nulRefused)
		default:
			i += 5
		}
	}
	return nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n), err == nil
}

func checkNumber(n json.Number, t reflect.Type) error {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			return fmt.Errorf("must be an integer of at most %d bits, not %s", t.Bits(), n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			return fmt.Errorf("must be a non-negative integer of at most %d bits, not %s", t.Bits(), n)
		}
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			return fmt.Errorf("must be a number that fits, not %s", n)
		}
	default:
		return fmt.Errorf("must be %s, not the number %s", kindOf(t), n)
	}
	return nil
}

// kindOf describes the JSON a Go type takes, for error messages.
func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		if isBytes(t) {
			return "a string"
		}
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// fields are a struct's JSON keys, as encoding/json names them.
type fields struct {
	exact  map[string]reflect.Type
	typed  map[string]field  // name → its type and the type its value is checked against
	folded map[string]string // fold(name) → name
}

var fieldCache sync.Map // reflect.Type → *fields

func fieldsOf(t reflect.Type) *fields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fields)
	}
	fs := &fields{exact: map[string]reflect.Type{}, typed: map[string]field{}, folded: map[string]string{}}
	collectFields(t, fs)
	fieldCache.Store(t, fs)
	return fs
}

// collectFields adds t's exported fields under their JSON names, promoting
// those of embedded structs without a name of their own, as encoding/json
// does (a shallower field wins over a deeper one of the same name).
func collectFields(t reflect.Type, fs *fields) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, ok := fs.exact[name]; !ok {
			fs.exact[name] = sf.Type
			fs.typed[name] = field{sf.Type, checked(sf.Type)}
			fs.folded[fold(name)] = name
		}
	}
	for _, et := range embedded {
		collectFields(et, fs)
	}
}

// fold returns a key as encoding/json matches it to a field: without regard
// to case, by Unicode simple folding ("k" and the Kelvin sign are one letter).
func fold(k string) string {
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
