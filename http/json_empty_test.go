package http

import (
	"encoding/json"
	"testing"
	"time"
)

// TestEmptyListsAtAnyDepth checks emptyLists on the shapes its cache of
// listless types must answer rightly: lists behind pointers, in map values
// and in interfaces, a recursive type, and types with no list at all, which
// come back as they are.
func TestEmptyListsAtAnyDepth(t *testing.T) {
	type node struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
		Next *node    `json:"next"`
	}
	type plain struct {
		At   time.Time       `json:"at"`
		Raw  json.RawMessage `json:"raw"`
		N    *int            `json:"n"`
		Pair [2]int          `json:"pair"`
	}
	type answer struct {
		Node   *node            `json:"node"`
		ByName map[string][]int `json:"by_name"`
		Any    any              `json:"any"`
		Plain  plain            `json:"plain"`
		Nil    map[string][]int `json:"nil"`
	}
	in := &answer{
		Node:   &node{Name: "a", Next: &node{Name: "b"}},
		ByName: map[string][]int{"x": nil},
		Any:    node{Name: "c"},
	}
	got, err := json.Marshal(emptyLists(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"node":{"name":"a","tags":[],"next":{"name":"b","tags":[],"next":null}},"by_name":{"x":[]},` +
		`"any":{"name":"c","tags":[],"next":null},"plain":{"at":"0001-01-01T00:00:00Z","raw":null,"n":null,"pair":[0,0]},"nil":null}`
	if string(got) != want {
		t.Errorf("emptyLists encodes as\n%s\nwant\n%s", got, want)
	}
	if in.Node.Tags != nil || in.ByName["x"] != nil {
		t.Error("emptyLists changed its argument")
	}
	p := &plain{Raw: json.RawMessage(`1`)}
	if emptyLists(p) != any(p) {
		t.Error("a value without lists is copied")
	}
}
