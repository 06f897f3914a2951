package http

import (
	"encoding"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sync"

	"github.com/lapsehq/lapse/internal/jsonbody"
)

// decode reads r's body into dst, which must point to a struct. It is strict
// because a field the server ignores, or reads other than the caller meant,
// is a request the caller thinks it made: the body must be JSON by
// Content-Type, at most s.maxBody bytes, and pass jsonbody.Decode (exactly
// one object; keys exactly as named, each once; valid UTF-8; every value of
// its field's type). Every failure is an EINVALID error (a *problem.MediaTypeError
// for the Content-Type) naming the field when there is one.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	return jsonbody.Read(w, r, s.bodyLimit(r.Pattern), dst)
}

// decodeOptional is decode for a route whose body may be left out: an
// empty body decodes to nothing, and one that is sent is read as strictly
// as any other, so that a field the route does not take ({"count":5} on a
// card's visit) is refused rather than ignored.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, dst any) error {
	if bodyLeftOut(r) {
		return nil
	}
	return s.decode(w, r, dst)
}

// writeJSON answers with v as JSON, a list that is empty as [] wherever it
// is (see emptyLists). The body is encoded before the header is written so
// that a value that does not encode is still a clean 500.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(emptyLists(v))
	if err != nil {
		s.error(w, r, fmt.Errorf("encode %T: %w", v, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// emptyLists returns a copy of v in which every nil slice, at any depth
// (a struct's field, a map's value, an element), is an empty one, so that
// an answer shows a list as [] and never as null, whatever the engine or
// the store returned for "none" (the OpenAPI document types them as
// arrays). v itself is not changed. Byte slices (json.RawMessage among
// them) and values that encode themselves (time.Time) are left as they are,
// and so are nil pointers, maps and interfaces: they mean absent.
func emptyLists(v any) any {
	if v == nil {
		return nil
	}
	return emptyListsOf(reflect.ValueOf(v)).Interface()
}

func emptyListsOf(v reflect.Value) reflect.Value {
	if !v.IsValid() {
		return v
	}
	t := v.Type()
	if listless(t) {
		return v
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(emptyListsOf(v.Elem()))
		return p
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t).Elem()
		out.Set(emptyListsOf(v.Elem()))
		return out
	case reflect.Struct:
		out := reflect.New(t).Elem()
		out.Set(v)
		for i := range t.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(emptyListsOf(v.Field(i)))
			}
		}
		return out
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return v
		}
		out := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(emptyListsOf(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), emptyListsOf(it.Value()))
		}
		return out
	}
	return v
}

// listlessTypes caches listless by type: every answer is walked through
// emptyListsOf, and asking a type of many fields whether it encodes itself,
// field by field, cost more than encoding the answer.
var listlessTypes sync.Map // reflect.Type → bool

// listless reports whether emptyListsOf leaves every value of t as it is:
// t encodes itself, or holds no slice but byte slices and no interface, at
// any depth that emptyListsOf walks (exported fields, pointers, map values).
func listless(t reflect.Type) bool {
	if l, ok := listlessTypes.Load(t); ok {
		return l.(bool)
	}
	l := listlessOf(t, map[reflect.Type]bool{})
	listlessTypes.Store(t, l)
	return l
}

// listlessOf is listless without the cache; visiting holds the types whose
// answer is being found, which a recursive type meets again: such a
// meeting adds nothing to the answer that its other fields do not give.
func listlessOf(t reflect.Type, visiting map[reflect.Type]bool) bool {
	if selfEncoding(t) || visiting[t] {
		return true
	}
	visiting[t] = true
	defer delete(visiting, t)
	switch t.Kind() {
	case reflect.Interface:
		return false // what it holds is known only from a value
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8
	case reflect.Pointer, reflect.Map:
		return listlessOf(t.Elem(), visiting)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && !listlessOf(f.Type, visiting) {
				return false
			}
		}
	}
	return true
}

// selfEncoding reports whether values of t encode themselves (time.Time):
// emptyListsOf leaves them as they are.
func selfEncoding(t reflect.Type) bool {
	return t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)
}
