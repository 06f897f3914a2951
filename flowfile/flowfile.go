// Package flowfile loads flows from YAML files, so that users can run order
// lifecycles of their own beside the built-in ones, and renders flows as
// Markdown documentation.
//
// A flow file holds one flow:
//
//	name: auto_confirm
//	initial: SHIPPED
//	states:
//	  - name: SHIPPED
//	    doc: shipped, waiting for the buyer to confirm receipt
//	    deadline: {after: 7d, event: AUTO_CONFIRM}
//	  - {name: CONFIRMED, terminal: true}
//	events:
//	  - {name: CONFIRM, doc: the buyer confirmed receipt}
//	  - {name: AUTO_CONFIRM, internal: true}
//	transitions:
//	  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
//	  - {from: SHIPPED, event: AUTO_CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
//
// Optional keys: holds, release_on, consume_on, pays, refunds ({start, done,
// partial}) and grace, as in lapse.Flow; a transition may have a guard
// (before_deadline). Durations are Go durations with a d (day) suffix: 7d,
// 48h, 1d12h.
//
// Every problem is an EINVALID error reading FILE:LINE: problem.
package flowfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lapsehq/lapse"
)

// guards are the guards a flow file may name.
var guards = map[string]lapse.Guard{"before_deadline": lapse.BeforeDeadline}

// MaxSize is the largest flow file Load reads, in bytes: a flow of a few
// dozen states takes a few KiB, and a file that does not end (a link to
// /dev/zero) would otherwise be read until memory ran out.
const MaxSize = 1 << 20

// Load reads the flow file at path, a regular file (or a link to one) of
// at most MaxSize bytes. See Parse.
func Load(path string) (*lapse.Flow, error) {
	// Opening a named pipe waits for a writer, for ever, and deaf to
	// SIGTERM: lapse serve would hang at its start.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("flowfile: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, lapse.Errorf(lapse.EINVALID, "%s: not a regular file (%s): a flow file is", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("flowfile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("flowfile: %w", err)
	}
	if len(data) > MaxSize {
		return nil, lapse.Errorf(lapse.EINVALID, "%s: larger than %d KiB: no flow file is", path, MaxSize>>10)
	}
	return Parse(path, data)
}

// Files returns the flow files in dir, *.yaml and *.yml, sorted. A directory
// without any is an EINVALID error.
func Files(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("flowfile: %w", err)
	}
	var paths []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	if len(paths) == 0 {
		return nil, lapse.Errorf(lapse.EINVALID, "%s: no flow files (*.yaml, *.yml) in the directory", dir)
	}
	slices.Sort(paths)
	return paths, nil
}

// LoadDir loads every flow file in dir (see Files), in file name order. Two
// files defining flows of one name are an EINVALID error naming both.
func LoadDir(dir string) ([]*lapse.Flow, error) {
	paths, err := Files(dir)
	if err != nil {
		return nil, err
	}
	var out []*lapse.Flow
	defined := map[string]string{} // flow name → file
	for _, path := range paths {
		f, err := Load(path)
		if err != nil {
			return nil, err
		}
		if other, ok := defined[f.Name]; ok {
			return nil, lapse.Errorf(lapse.EINVALID, "%s and %s both define flow %q", other, path, f.Name)
		}
		defined[f.Name] = path
		out = append(out, f)
	}
	return out, nil
}

// Parse reads a flow from data, the YAML text of a flow file called name
// (for messages). The flow it returns is valid (lapse.Flow.Validate). The
// error, an EINVALID *lapse.Error, reads "NAME:LINE: problem" and names the
// first problem found: a syntax error; an unknown, repeated or missing key;
// a value of the wrong type; a bad duration or guard; or a flow that is not
// a well-formed state machine, pointing at the state, event or transition
// at fault.
func Parse(name string, data []byte) (*lapse.Flow, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, lapse.Errorf(lapse.EINVALID, "%s:1: the file is empty; it should hold a flow", name)
		}
		return nil, syntaxError(name, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, lapse.Errorf(lapse.EINVALID, "%s:%d: a second YAML document; a file holds one flow", name, next.Line)
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(name, err)
	}
	p := &parser{file: name}
	f, at := p.flow(&doc)
	if p.err != nil {
		return nil, p.err
	}
	p.check(f, at)
	if p.err != nil {
		return nil, p.err
	}
	// The checks above repeat Validate's with lines; this catches any that
	// lapse adds later, pointing at the flow as a whole.
	if err := f.Validate(); err != nil {
		var le *lapse.Error
		msg := err.Error()
		if errors.As(err, &le) {
			msg = le.Message
		}
		return nil, lapse.Errorf(lapse.EINVALID, "%s:%d: %s", name, at.name, msg)
	}
	return f, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML parser error into FILE:LINE: problem.
func syntaxError(file string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return lapse.Errorf(lapse.EINVALID, "%s:%s: %s", file, m[1], m[2])
	}
	return lapse.Errorf(lapse.EINVALID, "%s: %s", file, strings.TrimPrefix(msg, "yaml: "))
}

// parser walks the YAML nodes of a flow file and keeps the first error.
type parser struct {
	file string
	err  error
}

func (p *parser) failf(line int, format string, args ...any) {
	if p.err == nil {
		p.err = lapse.Errorf(lapse.EINVALID, "%s:%d: %s", p.file, line, fmt.Sprintf(format, args...))
	}
}

// lines holds where the parts of a flow were written, for the checks.
type lines struct {
	name, initial, pays, refunds, grace int
	states                              []stateLines
	events                              []int
	transitions                         []transitionLines
	releaseOn, consumeOn                []int
}

type stateLines struct{ name, deadline, deadlineEvent int }

type transitionLines struct{ from, event, to, emits int }

// mapping is a YAML mapping's values by key.
type mapping struct {
	line int
	vals map[string]*yaml.Node
}

// get returns the value of key, or nil.
func (m mapping) get(key string) *yaml.Node { return m.vals[key] }

// mapping checks that n is a mapping of known keys, each given once, with
// the required ones present.
func (p *parser) mapping(n *yaml.Node, what string, required []string, optional ...string) mapping {
	m := mapping{line: n.Line, vals: map[string]*yaml.Node{}}
	if !p.kind(n, yaml.MappingNode, what, "a mapping (key: value)") {
		return m
	}
	keyLines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str":
			p.failf(k.Line, "%s: keys are plain names", what)
		case !slices.Contains(required, k.Value) && !slices.Contains(optional, k.Value):
			known := slices.Concat(required, optional)
			p.failf(k.Line, "%s: unknown key %q (known keys: %s)", what, k.Value, strings.Join(known, ", "))
		case keyLines[k.Value] != 0:
			p.failf(k.Line, "%s: key %q is repeated (first at line %d)", what, k.Value, keyLines[k.Value])
		default:
			keyLines[k.Value] = k.Line
			m.vals[k.Value] = v
		}
	}
	for _, key := range required {
		if m.vals[key] == nil {
			p.failf(n.Line, "%s: %s is required", what, key)
		}
	}
	return m
}

// kind reports whether n is of kind k, failing if not.
func (p *parser) kind(n *yaml.Node, k yaml.Kind, what, want string) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		p.failf(n.Line, "%s: anchors and aliases are not supported", what)
		return false
	case n.Kind != k:
		p.failf(n.Line, "%s must be %s", what, want)
		return false
	}
	return true
}

// scalar returns n's value if it is a scalar with tag, failing if not.
func (p *parser) scalar(n *yaml.Node, tag, what, want string) (string, bool) {
	if !p.kind(n, yaml.ScalarNode, what, want) {
		return "", false
	}
	if n.ShortTag() != tag {
		p.failf(n.Line, "%s must be %s, not %q", what, want, n.Value)
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(n *yaml.Node, what string) string {
	if n == nil {
		return ""
	}
	s, _ := p.scalar(n, "!!str", what, "a string")
	return s
}

// text reads a doc string: any scalar, so that "doc: 42" is not an error.
func (p *parser) text(n *yaml.Node, what string) string {
	if n == nil || !p.kind(n, yaml.ScalarNode, what, "text") {
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, what string) bool {
	if n == nil {
		return false
	}
	s, ok := p.scalar(n, "!!bool", what, "true or false")
	if !ok {
		return false
	}
	// YAML 1.2's booleans only. A !!bool tag takes any text (yes, on,
	// 1), which read as false would quietly unmark an event internal
	// or a state terminal.
	switch s {
	case "true", "True", "TRUE":
		return true
	case "false", "False", "FALSE":
		return false
	}
	p.failf(n.Line, "%s must be true or false, not %q", what, s)
	return false
}

func (p *parser) duration(n *yaml.Node, what string) time.Duration {
	s, ok := p.scalar(n, "!!str", what, "a duration such as 15m, 48h or 7d")
	if !ok {
		return 0
	}
	d, err := lapse.ParseDuration(s)
	switch {
	case err != nil:
		p.failf(n.Line, "%s: bad duration %q (want a positive duration such as 15m, 48h, 7d or 1d12h)", what, s)
	case d <= 0:
		p.failf(n.Line, "%s: the duration must be positive, not %q", what, s)
	}
	return d
}

// seq returns the items of sequence n, or nil when n is nil.
func (p *parser) seq(n *yaml.Node, what string) []*yaml.Node {
	if n == nil || !p.kind(n, yaml.SequenceNode, what, "a list") {
		return nil
	}
	return n.Content
}

// strs reads a list of strings and the line of each.
func (p *parser) strs(n *yaml.Node, what string) ([]string, []int) {
	var out []string
	var at []int
	for _, item := range p.seq(n, what) {
		out = append(out, p.str(item, what+" item"))
		at = append(at, item.Line)
	}
	return out, at
}

func lineOf(n *yaml.Node, otherwise int) int {
	if n == nil {
		return otherwise
	}
	return n.Line
}

// flow builds the flow in doc and records where its parts are.
func (p *parser) flow(doc *yaml.Node) (*lapse.Flow, *lines) {
	f, at := &lapse.Flow{}, &lines{name: 1}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		p.failf(doc.Line, "the file is empty; it should hold a flow")
		return f, at
	}
	root := doc.Content[0]
	m := p.mapping(root, "flow", []string{"name", "initial", "states"},
		"events", "transitions", "holds", "release_on", "consume_on", "pays", "refunds", "grace")
	f.Name = p.str(m.get("name"), "name")
	at.name = lineOf(m.get("name"), m.line)
	f.Initial = lapse.State(p.str(m.get("initial"), "initial"))
	at.initial = lineOf(m.get("initial"), m.line)

	for _, n := range p.seq(m.get("states"), "states") {
		sm := p.mapping(n, "state", []string{"name"}, "doc", "terminal", "deadline")
		s := lapse.StateSpec{
			Name:     lapse.State(p.str(sm.get("name"), "state name")),
			Doc:      p.text(sm.get("doc"), "state doc"),
			Terminal: p.boolean(sm.get("terminal"), "terminal"),
		}
		sl := stateLines{name: lineOf(sm.get("name"), sm.line)}
		if dn := sm.get("deadline"); dn != nil {
			dm := p.mapping(dn, "deadline", []string{"after", "event"})
			s.Deadline = &lapse.Deadline{Event: lapse.Event(p.str(dm.get("event"), "deadline event"))}
			if after := dm.get("after"); after != nil {
				s.Deadline.After = p.duration(after, "deadline after")
				if s.Deadline.After > lapse.DefaultMaxDeadline {
					p.failf(after.Line, "deadline after: %s is further ahead than a deadline may be: at most 366d, as an order's ttl",
						after.Value)
				}
			}
			sl.deadline, sl.deadlineEvent = dn.Line, lineOf(dm.get("event"), dn.Line)
		}
		f.States = append(f.States, s)
		at.states = append(at.states, sl)
	}

	for _, n := range p.seq(m.get("events"), "events") {
		em := p.mapping(n, "event", []string{"name"}, "doc", "internal")
		f.Events = append(f.Events, lapse.EventSpec{
			Name:     lapse.Event(p.str(em.get("name"), "event name")),
			Doc:      p.text(em.get("doc"), "event doc"),
			Internal: p.boolean(em.get("internal"), "internal"),
		})
		at.events = append(at.events, lineOf(em.get("name"), em.line))
	}

	for _, n := range p.seq(m.get("transitions"), "transitions") {
		tm := p.mapping(n, "transition", []string{"from", "event", "to"}, "guard", "emits")
		t := lapse.Transition{
			From:  lapse.State(p.str(tm.get("from"), "from")),
			Event: lapse.Event(p.str(tm.get("event"), "event")),
			To:    lapse.State(p.str(tm.get("to"), "to")),
		}
		if gn := tm.get("guard"); gn != nil {
			name := p.str(gn, "guard")
			if t.Guard = guards[name]; t.Guard == nil && p.err == nil {
				known := slices.Sorted(maps.Keys(guards))
				p.failf(gn.Line, "unknown guard %q (known guards: %s)", name, strings.Join(known, ", "))
			}
		}
		t.Emits, _ = p.strs(tm.get("emits"), "emits")
		f.Transitions = append(f.Transitions, t)
		at.transitions = append(at.transitions, transitionLines{
			from:  lineOf(tm.get("from"), tm.line),
			event: lineOf(tm.get("event"), tm.line),
			to:    lineOf(tm.get("to"), tm.line),
			emits: lineOf(tm.get("emits"), tm.line),
		})
	}

	f.Holds = p.boolean(m.get("holds"), "holds")
	f.ReleaseOn, at.releaseOn = p.strs(m.get("release_on"), "release_on")
	f.ConsumeOn, at.consumeOn = p.strs(m.get("consume_on"), "consume_on")
	f.Pays = lapse.Event(p.str(m.get("pays"), "pays"))
	at.pays = lineOf(m.get("pays"), m.line)
	if rn := m.get("refunds"); rn != nil {
		rm := p.mapping(rn, "refunds", []string{"start", "done", "partial"})
		f.Refunds = lapse.RefundEvents{
			Start:   lapse.Event(p.str(rm.get("start"), "refunds start")),
			Done:    lapse.Event(p.str(rm.get("done"), "refunds done")),
			Partial: lapse.Event(p.str(rm.get("partial"), "refunds partial")),
		}
		at.refunds = rn.Line
	}
	if gn := m.get("grace"); gn != nil {
		f.Grace = p.duration(gn, "grace")
		at.grace = gn.Line
	}
	return f, at
}
