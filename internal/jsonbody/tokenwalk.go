package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
)

// walkTokens checks body, for a value of type root, with a tokenWalker.
func walkTokens(body []byte, root reflect.Type, strict bool) error {
	w := &tokenWalker{body: body, strict: strict, dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber()
	return w.walk(root)
}

// tokenFrame is one open object or array of the token walk.
type tokenFrame struct {
	object  bool
	typ     reflect.Type // the Go type it decodes into, pointers followed; nil: unchecked
	keys    map[string]struct{}
	wantKey bool         // in an object: a key (or the end) comes next
	key     string       // in an object: the key whose value comes next
	valType reflect.Type // in an object: the type of that value; nil: unchecked
	index   int          // in an array: the index of the next element
}

// tokenWalker checks a body token by token with json.Decoder.Token. It is
// the reading Decode had before walker, kept for bodies that json.Valid
// refuses: it finds, as it always did, whichever comes first of a syntax
// error and a key or value that Decode refuses, and its syntax errors say
// where the body breaks. The tests also run it as the oracle for walker.
type tokenWalker struct {
	body   []byte
	strict bool
	dec    *json.Decoder
	stack  []*tokenFrame
	at     int64 // input offset before the current token
}

// walk reads the body token by token, checking each against the type it
// decodes into.
func (w *tokenWalker) walk(root reflect.Type) error {
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
			if err := w.checkString(k, true, false); err != nil {
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
func (w *tokenWalker) value(tok json.Token, typ reflect.Type) error {
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
		if err := w.checkString(t, false, typ != nil); err != nil {
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

func (w *tokenWalker) open(object bool, typ reflect.Type) {
	f := &tokenFrame{object: object, typ: typ, wantKey: object}
	if object {
		f.keys = map[string]struct{}{}
	}
	w.stack = append(w.stack, f)
}

func (w *tokenWalker) close() {
	w.stack = w.stack[:len(w.stack)-1]
	w.done()
}

// done moves the innermost container past the value just read.
func (w *tokenWalker) done() {
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
func (w *tokenWalker) fieldType(top *tokenFrame, k string) (reflect.Type, error) {
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
func (w *tokenWalker) path(key string) string {
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
// which is also a legitimate character, so the raw text is looked at. It
// refuses NUL too, in every string of a strict walk and, of a lenient one,
// in the values read (read).
func (w *tokenWalker) checkString(s string, key bool, read bool) error {
	nul := strings.ContainsRune(s, 0) && (w.strict || read)
	if !nul && !strings.ContainsRune(s, utf8.RuneError) {
		return nil
	}
	field := w.path("")
	if key {
		field = w.path(s)
	}
	if nul {
		return lapse.FieldError(field, nulRefused)
	}
	raw := w.body[w.at:w.dec.InputOffset()]
	if !utf8.Valid(raw) {
		return lapse.FieldError(field, "is not valid UTF-8")
	}
	if err := checkEscapes(raw, false); err != nil {
		return lapse.FieldError(field, "%s", err)
	}
	return nil
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
