package jsonbody

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
)

// walk checks body, which json.Valid accepted, for a value of type root.
//
// It refuses exactly what tokenWalker refuses, in the same order and naming
// the same field: the tests run both on the same bodies. Being sure of the
// syntax, it reads the bytes directly: it needs no token values, and it
// spells out a key only when the key holds an escape or invalid UTF-8.
func walk(body []byte, root reflect.Type, strict bool) error {
	w := walkers.Get().(*walker)
	w.body, w.strict, w.pos = body, strict, 0
	err := w.walk(root)
	w.release()
	return err
}

// walkers keeps walkers for reuse: allocating a walker's stacks for every
// body, and collecting them, took about a third of the walk's time.
var walkers = sync.Pool{New: func() any {
	return &walker{stack: make([]frame, 0, 8), keys: make([][]byte, 0, 2*manyKeys)}
}}

// release puts w back in walkers, holding nothing of the body it walked,
// unless a deep or wide body grew its stacks beyond the usual.
func (w *walker) release() {
	if cap(w.stack) > 64 || cap(w.keys) > 256 {
		return
	}
	clear(w.stack[:cap(w.stack)])
	clear(w.keys[:cap(w.keys)])
	*w = walker{stack: w.stack[:0], keys: w.keys[:0]}
	walkers.Put(w)
}

// frame is one open object or array of the walk.
type frame struct {
	object  bool
	typ     reflect.Type // the Go type it decodes into, pointers followed; nil: unchecked
	wantKey bool         // in an object: a key (or the end) comes next
	key     []byte       // in an object: the key whose value comes next
	val     field        // in an object: the type of that value
	index   int          // in an array: the index of the next element

	// What the values in it decode into, found when it opens rather than
	// for each value: typ's fields when it is a struct, its element type
	// when it is a map, a slice or an array.
	fields *fields
	elem   field

	// The keys an object has had so far are walker.keys[keysAt:] while
	// they are few (most objects have a handful: a scan beats a map), and
	// in seen once they are many.
	keysAt int
	seen   map[string]struct{}
}

// field is the type a value decodes into, as declared and as checked (see
// checked); checked is nil for a value that is not checked.
type field struct{ declared, checked reflect.Type }

// manyKeys is the number of keys beyond which an object's are kept in a map.
const manyKeys = 16

type walker struct {
	body   []byte
	strict bool
	pos    int // the offset of the next byte to read
	stack  []frame
	// keys holds the keys of every open object, the innermost's last: an
	// object closes before its parent reads another key, so the keys of
	// all open objects form a stack, like the objects.
	keys [][]byte
}

func (w *walker) walk(root reflect.Type) error {
	w.skip()
	if w.body[w.pos] != '{' {
		return lapse.Errorf(lapse.EINVALID, "the body must be a JSON object")
	}
	w.pos++
	w.open(true, checked(root))
	for len(w.stack) > 0 {
		w.skip()
		c := w.body[w.pos]
		top := &w.stack[len(w.stack)-1]
		if top.object && top.wantKey {
			if c == '}' {
				w.pos++
				w.close()
				continue
			}
			if err := w.readKey(top); err != nil {
				return err
			}
			continue
		}
		if !top.object && c == ']' {
			w.pos++
			w.close()
			continue
		}
		f := top.elem
		if top.object {
			f = top.val
		}
		if err := w.value(f); err != nil {
			return err
		}
	}
	// json.Valid has made sure that only space follows the object.
	return nil
}

// skip moves past space and, the syntax being valid, the commas and colons
// between tokens.
func (w *walker) skip() {
	for w.pos < len(w.body) {
		switch w.body[w.pos] {
		case ' ', '\t', '\n', '\r', ',', ':':
			w.pos++
		default:
			return
		}
	}
}

// str reads the string at w.pos, returning its raw text with its quotes and
// whether it holds an escape.
func (w *walker) str() (raw []byte, escaped bool) {
	start := w.pos
	i := start + 1
	for {
		switch w.body[i] {
		case '"':
			w.pos = i + 1
			return w.body[start:w.pos], escaped
		case '\\':
			escaped = true
			i += 2 // the escaped byte cannot end the string
		default:
			i++
		}
	}
}

// readKey reads the key at w.pos in the object top and the type of its value.
func (w *walker) readKey(top *frame) error {
	raw, escaped := w.str()
	valid := utf8.Valid(raw)
	k := raw[1 : len(raw)-1]
	if escaped || !valid {
		// The key as encoding/json reads it, invalid UTF-8 and lone
		// surrogates as U+FFFD: the name the error gives it.
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			panic(fmt.Sprintf("jsonbody: %q, a string of valid JSON, does not decode: %v", raw, err))
		}
		k = []byte(s)
	}
	if !valid {
		return lapse.FieldError(w.path(k), "is not valid UTF-8")
	}
	if escaped {
		if err := checkEscapes(raw, w.strict); err != nil {
			return lapse.FieldError(w.path(k), "%s", err)
		}
	}
	if w.repeated(top, k) {
		return lapse.FieldError(w.path(k), "appears more than once in its object")
	}
	f, err := w.field(top, k)
	if err != nil {
		return err
	}
	top.key, top.val, top.wantKey = k, f, false
	return nil
}

// repeated reports whether the object top has had key k, and notes that it
// has.
func (w *walker) repeated(top *frame, k []byte) bool {
	if top.seen != nil {
		if _, ok := top.seen[string(k)]; ok {
			return true
		}
		top.seen[string(k)] = struct{}{}
		return false
	}
	keys := w.keys[top.keysAt:]
	for _, seen := range keys {
		if bytes.Equal(seen, k) {
			return true
		}
	}
	if len(keys) < manyKeys {
		w.keys = append(w.keys, k)
		return false
	}
	top.seen = make(map[string]struct{}, 2*manyKeys)
	for _, seen := range keys {
		top.seen[string(seen)] = struct{}{}
	}
	top.seen[string(k)] = struct{}{}
	w.keys = w.keys[:top.keysAt]
	return false
}

// value checks the value at w.pos against f (unchecked when f.checked is
// nil), opening a container when it starts one.
func (w *walker) value(f field) error {
	// The path is spelt out only for an error: building it for every value
	// would cost time quadratic in the nesting depth.
	declared, typ := f.declared, f.checked
	switch c := w.body[w.pos]; c {
	case '{', '[':
		object := c == '{'
		if typ != nil {
			k := typ.Kind()
			if object && k != reflect.Struct && k != reflect.Map || !object && (k != reflect.Slice && k != reflect.Array || isBytes(typ)) {
				got := "an array"
				if object {
					got = "an object"
				}
				return lapse.FieldError(w.path(nil), "must be %s, not %s", kindOf(typ), got)
			}
		}
		if len(w.stack) >= maxDepth {
			return lapse.FieldError(string(w.stack[0].key), "nests deeper than %d levels", maxDepth)
		}
		w.pos++
		w.open(object, typ)
		return nil
	case '"':
		raw, escaped := w.str()
		if !utf8.Valid(raw) {
			return lapse.FieldError(w.path(nil), "is not valid UTF-8")
		}
		if escaped {
			if err := checkEscapes(raw, w.strict || typ != nil); err != nil {
				return lapse.FieldError(w.path(nil), "%s", err)
			}
		}
		if typ != nil && typ.Kind() != reflect.String && !isBytes(typ) {
			return lapse.FieldError(w.path(nil), "must be %s, not a string", kindOf(typ))
		}
	case 't', 'f':
		lit := "true"
		if c == 'f' {
			lit = "false"
		}
		w.pos += len(lit)
		if typ != nil && typ.Kind() != reflect.Bool {
			return lapse.FieldError(w.path(nil), "must be %s, not %s", kindOf(typ), lit)
		}
	case 'n':
		w.pos += len("null")
		if typ != nil && w.strict && !nullable(declared) {
			return lapse.FieldError(w.path(nil), "must be %s, not null; leave it out instead", kindOf(typ))
		}
	default: // a number
		n := w.number()
		if typ != nil {
			if err := checkNumber(json.Number(n), typ); err != nil {
				return lapse.FieldError(w.path(nil), "%s", err)
			}
		}
	}
	w.done()
	return nil
}

// number reads the number at w.pos and returns its text.
func (w *walker) number() []byte {
	start := w.pos
	for w.pos < len(w.body) && inNumber(w.body[w.pos]) {
		w.pos++
	}
	return w.body[start:w.pos]
}

func inNumber(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

func (w *walker) open(object bool, typ reflect.Type) {
	f := frame{object: object, typ: typ, wantKey: object, keysAt: len(w.keys)}
	if typ != nil {
		if typ.Kind() == reflect.Struct {
			f.fields = fieldsOf(typ)
		} else { // a map, a slice or an array
			f.elem = field{typ.Elem(), checked(typ.Elem())}
		}
	}
	w.stack = append(w.stack, f)
}

func (w *walker) close() {
	w.keys = w.keys[:w.stack[len(w.stack)-1].keysAt]
	w.stack = w.stack[:len(w.stack)-1]
	w.done()
}

// done moves the innermost container past the value just read.
func (w *walker) done() {
	if len(w.stack) == 0 {
		return
	}
	if top := &w.stack[len(w.stack)-1]; top.object {
		top.wantKey = true
	} else {
		top.index++
	}
}

// field returns the type of the value of key k in the object top (none
// when it is unchecked), or an error for a key the object's struct lacks.
func (w *walker) field(top *frame, k []byte) (field, error) {
	fs := top.fields
	if fs == nil { // a map, or unchecked
		return top.elem, nil
	}
	if f, ok := fs.typed[string(k)]; ok {
		return f, nil
	}
	if name, ok := fs.folded[fold(string(k))]; ok {
		return field{}, lapse.FieldError(w.path(k), "is not a field of this request; keys are matched exactly: did you mean %q?", name)
	}
	if w.strict {
		return field{}, lapse.FieldError(w.path(k), "is not a field of this request")
	}
	return field{}, nil
}

// path is the path of key in the innermost object (key empty: of the value
// being read), such as items[1].sku.
func (w *walker) path(key []byte) string {
	var b strings.Builder
	for i, f := range w.stack {
		last := i == len(w.stack)-1
		switch {
		case f.object && last && len(key) > 0:
			b.WriteString("." + string(key))
		case f.object:
			b.WriteString("." + string(f.key))
		default:
			fmt.Fprintf(&b, "[%d]", f.index)
		}
	}
	return strings.TrimPrefix(b.String(), ".")
}
