package flowfile

import (
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
)

// Markdown documents flow f: a heading, its state diagram (a mermaid block,
// see lapse.Flow.Mermaid), and tables of its states, events and transitions
// with their docs. The same flow gives the same text, so that generated
// documents can be checked for being current.
func Markdown(f *lapse.Flow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Flow `%s`\n\n", f.Name)
	b.WriteString("<!-- Generated from the flow by flowfile.Markdown: change the flow, not this file. -->\n\n")
	fmt.Fprintf(&b, "Orders start in `%s`.", f.Initial)
	if f.Holds {
		b.WriteString(" Creating an order holds its items' stock and its coupon")
		if len(f.ReleaseOn) > 0 {
			fmt.Fprintf(&b, "; %s gives them back", codes(f.ReleaseOn))
		}
		if len(f.ConsumeOn) > 0 {
			fmt.Fprintf(&b, "; %s uses them up", codes(f.ConsumeOn))
		}
		b.WriteString(".")
	}
	if f.Pays != "" {
		fmt.Fprintf(&b, " A verified payment fires `%s`", f.Pays)
		if f.Grace > 0 {
			fmt.Fprintf(&b, "; an order whose customer started paying in time stays open %s past its deadline", lapse.FormatDuration(f.Grace))
		}
		b.WriteString(".")
	}
	if r := f.Refunds; r != (lapse.RefundEvents{}) {
		fmt.Fprintf(&b, " Refunds fire `%s`, then `%s` (all refunded) or `%s` (paid again).", r.Start, r.Done, r.Partial)
	}
	b.WriteString("\n\n```mermaid\n")
	b.WriteString(f.Mermaid())
	b.WriteString("```\n\n## States\n\n| State | Deadline | Meaning |\n|---|---|---|\n")
	for _, s := range f.States {
		name := "`" + string(s.Name) + "`"
		if s.Terminal {
			name += " (terminal)"
		}
		deadline := ""
		if d := s.Deadline; d != nil {
			deadline = fmt.Sprintf("after %s fires `%s`", lapse.FormatDuration(d.After), d.Event)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, deadline, cell(s.Doc))
	}
	b.WriteString("\n## Events\n\n| Event | Sent by | Meaning |\n|---|---|---|\n")
	for _, e := range f.Events {
		by := "API or Go caller"
		if e.Internal {
			by = "Lapse"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.Name, by, cell(e.Doc))
	}
	b.WriteString("\n## Transitions\n\n| From | Event | To | Emits |\n|---|---|---|---|\n")
	for _, t := range f.Transitions {
		event := "`" + string(t.Event) + "`"
		if t.Guard != nil {
			event += " (guarded)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", t.From, event, t.To, codes(t.Emits))
	}
	return b.String()
}

// codes writes names as inline code, joined by commas.
func codes(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}

// cell makes text fit in one table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
