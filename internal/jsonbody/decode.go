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
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
)

// Decode decodes body, exactly one JSON object, into v, which must point to
// a struct. It refuses, with an EINVALID *lapse.Error naming the field (a
// path such as items[1].sku):
//   - a syntax error, a top-level value that is not an object, or data after it;
//   - a key repeated in one object, at any depth;
//   - a key that is not exactly the name of a field: unknown, or in another case;
//   - invalid UTF-8, or an escape of half a surrogate pair (\ud800), in any string;
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
	w := &walker{body: body, strict: strict, dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber()
	if err := w.walk(rv.Type().Elem()); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		// The walk checked keys and types; what is left is a type's own
		// UnmarshalJSON refusing its value.
		return lapse.Errorf(lapse.EINVALID, "the body does not match the request: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// frame is one open object or array of the walk.
type frame struct {
	object  bool
	typ     reflect.Type // the Go type it decodes into, pointers followed; nil: unchecked
	keys    map[string]struct{}
	wantKey bool         // in an object: a key (or the end) comes next
	key     string       // in an object: the key whose value comes next
	valType reflect.Type // in an object: the type of that value; nil: unchecked
	index   int          // in an array: the index of the next element
}

type walker struct {
	body   []byte
	strict bool
	dec    *json.Decoder
	stack  []*frame
	at     int64 // input offset before the current token
}

// maxDepth is encoding/json's own nesting limit; checking it here names the
// field instead of failing with a bare syntax error.
const maxDepth = 10000

// walk reads the body token by token, checking each against the type it
// decodes into.
func (w *walker) walk(root reflect.Type) error {
	for first := true; first || len(w.stack) > 0; first = false {
		w.at = w.dec.InputOffset()
		tok, err := w.dec.Token()
		if err != nil {
			return syntaxError(w.body, err)
		}
		if first {
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return lapse.Errorf(lapse.EINVALID, "the body must be a JSON object")
			}
			w.open(true, checked(root))
			continue
		}
		top := w.stack[len(w.stack)-1]
		if top.object && top.wantKey {
			if tok == json.Delim('}') {
				w.close()
				continue
			}
			k := tok.(string) // Token allows nothing else here
			if err := w.checkString(k, true); err != nil {
				return err
			}
			if _, dup := top.keys[k]; dup {
				return lapse.FieldError(w.path(k), "appears more than once in its object")
			}
			ft, err := w.fieldType(top, k)
			if err != nil {
				return err
			}
			top.keys[k], top.key, top.valType, top.wantKey = struct{}{}, k, ft, false
			continue
		}
		if !top.object && tok == json.Delim(']') {
			w.close()
			continue
		}
		var typ reflect.Type
		switch {
		case top.object:
			typ = top.valType
		case top.typ != nil:
			typ = top.typ.Elem()
		}
		if err := w.value(tok, typ); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return lapse.Errorf(lapse.EINVALID, "the body has data after its JSON object")
	}
	return nil
}

// value checks one value token against typ (nil: unchecked), opening a
// container when it starts one.
func (w *walker) value(tok json.Token, typ reflect.Type) error {
	// The path is spelt out only for an error: building it for every value
	// would cost time quadratic in the nesting depth.
	declared, typ := typ, checked(typ)
	switch t := tok.(type) {
	case json.Delim:
		object := t == '{'
		if typ != nil {
			k := typ.Kind()
			if object && k != reflect.Struct && k != reflect.Map || !object && (k != reflect.Slice && k != reflect.Array || isBytes(typ)) {
				got := "an array"
				if object {
					got = "an object"
				}
				return lapse.FieldError(w.path(""), "must be %s, not %s", kindOf(typ), got)
			}
		}
		if len(w.stack) >= maxDepth {
			return lapse.FieldError(w.stack[0].key, "nests deeper than %d levels", maxDepth)
		}
		w.open(object, typ)
		return nil
	case string:
		if err := w.checkString(t, false); err != nil {
			return err
		}
		if typ != nil && typ.Kind() != reflect.String && !isBytes(typ) {
			return lapse.FieldError(w.path(""), "must be %s, not a string", kindOf(typ))
		}
	case json.Number:
		if typ != nil {
			if err := checkNumber(t, typ); err != nil {
				return lapse.FieldError(w.path(""), "%s", err)
			}
		}
	case bool:
		if typ != nil && typ.Kind() != reflect.Bool {
			return lapse.FieldError(w.path(""), "must be %s, not %v", kindOf(typ), t)
		}
	case nil:
		if typ != nil && w.strict && !nullable(declared) {
			return lapse.FieldError(w.path(""), "must be %s, not null; leave it out instead", kindOf(typ))
		}
	}
	w.done()
	return nil
}

// checked returns the type a value is checked against: pointers followed,
// and nil for what decodes itself (json.RawMessage, time.Time and other
// Unmarshalers) or takes anything (interfaces).
func checked(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
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

func (w *walker) open(object bool, typ reflect.Type) {
	f := &frame{object: object, typ: typ, wantKey: object}
	if object {
		f.keys = map[string]struct{}{}
	}
	w.stack = append(w.stack, f)
}

func (w *walker) close() {
	w.stack = w.stack[:len(w.stack)-1]
	w.done()
}

// done moves the innermost container past the value just read.
func (w *walker) done() {
	if len(w.stack) == 0 {
		return
	}
	if top := w.stack[len(w.stack)-1]; top.object {
		top.wantKey = true
	} else {
		top.index++
	}
}

// fieldType returns the type of the value of key k in the object top, nil
// when it is unchecked, or an error for a key the object's struct lacks.
func (w *walker) fieldType(top *frame, k string) (reflect.Type, error) {
	t := top.typ
	if t == nil {
		return nil, nil
	}
	if t.Kind() == reflect.Map {
		return t.Elem(), nil
	}
	fs := fieldsOf(t)
	if f, ok := fs.exact[k]; ok {
		return f, nil
	}
	if name, ok := fs.folded[fold(k)]; ok {
		return nil, lapse.FieldError(w.path(k), "is not a field of this request; keys are matched exactly: did you mean %q?", name)
	}
	if w.strict {
		return nil, lapse.FieldError(w.path(k), "is not a field of this request")
	}
	return nil, nil
}

// path is the path of key in the innermost object (key "" : of the value
// being read), such as items[1].sku.
func (w *walker) path(key string) string {
	var b strings.Builder
	for i, f := range w.stack {
		last := i == len(w.stack)-1
		switch {
		case f.object && last && key != "":
			b.WriteString("." + key)
		case f.object:
			b.WriteString("." + f.key)
		default:
			fmt.Fprintf(&b, "[%d]", f.index)
		}
	}
	return strings.TrimPrefix(b.String(), ".")
}

// checkString refuses a string that encoding/json decoded from invalid
// UTF-8 or from an unpaired surrogate escape: both come out as U+FFFD,
// which is also a legitimate character, so the raw text is looked at.
func (w *walker) checkString(s string, key bool) error {
	if !strings.ContainsRune(s, utf8.RuneError) {
		return nil
	}
	raw := w.body[w.at:w.dec.InputOffset()]
	field := w.path("")
	if key {
		field = w.path(s)
	}
	if !utf8.Valid(raw) {
		return lapse.FieldError(field, "is not valid UTF-8")
	}
	if err := checkEscapes(raw); err != nil {
		return lapse.FieldError(field, "%s", err)
	}
	return nil
}

// checkEscapes finds a \u escape of half a surrogate pair in raw JSON text.
func checkEscapes(raw []byte) error {
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

func syntaxError(body []byte, err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		msg := strings.TrimPrefix(se.Error(), "json: ")
		return lapse.Errorf(lapse.EINVALID, "the body is not valid JSON: %s (at byte %d)", msg, se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if len(bytes.TrimSpace(body)) == 0 {
			return lapse.Errorf(lapse.EINVALID, "the body is empty; send a JSON object")
		}
		return lapse.Errorf(lapse.EINVALID, "the body is not valid JSON: it ends too early")
	}
	return lapse.Errorf(lapse.EINVALID, "the body is not valid JSON")
}

// fields are a struct's JSON keys, as encoding/json names them.
type fields struct {
	exact  map[string]reflect.Type
	folded map[string]string // fold(name) → name
}

var fieldCache sync.Map // reflect.Type → *fields

func fieldsOf(t reflect.Type) *fields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fields)
	}
	fs := &fields{exact: map[string]reflect.Type{}, folded: map[string]string{}}
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
