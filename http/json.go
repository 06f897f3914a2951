package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

// decode reads r's body into dst, which must point to a struct. It is strict
// because a field the server ignores is a request the caller thinks it made:
// the body must be JSON by Content-Type, at most s.maxBody bytes, exactly one
// object with no duplicate keys at any depth and no unknown fields, and every
// value must fit its field's type. Every failure is an EINVALID error (a
// *mediaTypeError for the Content-Type) naming the field when there is one.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return lapse.Errorf(lapse.EINVALID, "the request body is larger than the limit of %d bytes", mbe.Limit)
		}
		return lapse.Errorf(lapse.EINVALID, "the request body could not be read")
	}
	if err := checkJSON(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	return nil
}

func checkContentType(ct string) error {
	if ct == "" {
		return &mediaTypeError{lapse.FieldError("Content-Type", "is missing; send application/json")}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return &mediaTypeError{lapse.FieldError("Content-Type", "is %q; send application/json", ct)}
	}
	return nil
}

// checkJSON walks body token by token and reports the first of: a syntax
// error, a top-level value that is not an object, a key repeated within one
// object, or data after the object. encoding/json accepts duplicate keys
// (the last one wins), so without this check {"amount":1,"amount":100} would
// mean whatever the last proxy or parser on the way decided.
func checkJSON(body []byte) error {
	// The path of a value is only spelt out for an error: building it for
	// every container would cost time quadratic in the nesting depth.
	type frame struct {
		object  bool
		keys    map[string]struct{}
		key     string // the key whose value comes next, in an object
		wantKey bool
		index   int // the index of the next element, in an array
	}
	var stack []*frame
	path := func(key string) string { // the path of key in the innermost object
		var b strings.Builder
		for i, f := range stack {
			switch {
			case i == len(stack)-1:
			case f.object:
				b.WriteString("." + f.key)
			default:
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return strings.TrimPrefix(b.String()+"."+key, ".")
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if top := stack[len(stack)-1]; top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for first := true; first || len(stack) > 0; first = false {
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(body, err)
		}
		if d, ok := tok.(json.Delim); first && (!ok || d != '{') {
			return lapse.Errorf(lapse.EINVALID, "the request body must be a JSON object")
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			top := stack[n-1]
			if k, ok := tok.(string); ok {
				if _, dup := top.keys[k]; dup {
					return lapse.FieldError(path(k), "appears more than once in its object")
				}
				top.keys[k], top.key, top.wantKey = struct{}{}, k, false
				continue
			}
			// Otherwise it is the closing '}': Token rejects anything else.
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxDepth {
				return lapse.FieldError(stack[0].key, "nests deeper than %d levels", maxDepth)
			}
			f := &frame{}
			if tok == json.Delim('{') {
				f.object, f.keys, f.wantKey = true, map[string]struct{}{}, true
			}
			stack = append(stack, f)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return lapse.Errorf(lapse.EINVALID, "the request body has data after its JSON object")
	}
	return nil
}

// maxDepth is encoding/json's own nesting limit; checking it here names the
// field instead of failing with a bare syntax error.
const maxDepth = 10000

func syntaxError(body []byte, err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		msg := strings.TrimPrefix(se.Error(), "json: ")
		return lapse.Errorf(lapse.EINVALID, "the request body is not valid JSON: %s (at byte %d)", msg, se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if len(bytes.TrimSpace(body)) == 0 {
			return lapse.Errorf(lapse.EINVALID, "the request body is empty; send a JSON object")
		}
		return lapse.Errorf(lapse.EINVALID, "the request body is not valid JSON: it ends too early")
	}
	return lapse.Errorf(lapse.EINVALID, "the request body is not valid JSON")
}

// decodeError turns an error of a strict json.Decoder, run on a body that
// checkJSON accepted, into an error naming the field.
func decodeError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := te.Field
		if field == "" {
			return lapse.Errorf(lapse.EINVALID, "the request body must be a JSON object")
		}
		return lapse.FieldError(field, "must be %s, not %s", kindOf(te.Type), te.Value)
	}
	// encoding/json has no error type for unknown fields, only this text.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, err := strconv.Unquote(name); err == nil {
			name = unq
		}
		return lapse.FieldError(name, "is not a field of this request")
	}
	return lapse.Errorf(lapse.EINVALID, "the request body does not match the request: %s", strings.TrimPrefix(err.Error(), "json: "))
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
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// writeJSON answers with v as JSON. The body is encoded before the header is
// written so that a value that does not encode is still a clean 500.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.error(w, r, fmt.Errorf("encode %T: %w", v, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
