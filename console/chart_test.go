package console

import (
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// svgTexts parses an SVG as XML, failing the test when it is not
// well-formed, and returns the character data of its text and title
// elements, and how many of each element it holds.
func svgTexts(t *testing.T, svg string) (texts []string, elems map[string]int) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	d.Strict = true
	elems = map[string]int{}
	var stack []string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			elems[tok.Name.Local]++
			stack = append(stack, tok.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if n := len(stack); n > 0 && (stack[n-1] == "text" || stack[n-1] == "title") {
				texts = append(texts, string(tok))
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}
	return texts, elems
}

// nasty is a label that breaks markup unless it is escaped.
const nasty = `<script>a & "b" 'c'</script>`

func TestBarChart(t *testing.T) {
	t.Parallel()
	if got := barChart("none", nil); got != "" {
		t.Errorf("no bars: %q", got)
	}
	svg := string(barChart("Lag & <such>", []bar{
		{Label: "1–2 ms", Value: 10, Note: "10 closes"},
		{Label: nasty, Value: 5, Note: "5 & more"},
		{Label: "延迟", Value: 0, Note: "0"},
	}))
	texts, elems := svgTexts(t, svg)
	if strings.Contains(svg, "<script") || !strings.Contains(svg, "&lt;script&gt;a &amp; ") || !strings.Contains(svg, "5 &amp; more") {
		t.Errorf("labels not escaped:\n%s", svg)
	}
	for _, want := range []string{"Lag & <such>", "1–2 ms", nasty, "5 & more", "延迟", "10 closes"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	if elems["rect"] != 3 || elems["g"] != 3 {
		t.Errorf("elements %v, want a bar and a group per row", elems)
	}
	// The longest bar is the largest value; a zero is drawn empty.
	if !strings.Contains(svg, `width="394.0"`) || !strings.Contains(svg, `width="197.0"`) || !strings.Contains(svg, `width="0.0"`) {
		t.Errorf("bar widths:\n%s", svg)
	}
}

func TestTimeSeriesChart(t *testing.T) {
	t.Parallel()
	if got := timeSeriesChart(timeChart{Title: "none"}); got != "" {
		t.Errorf("no steps: %q", got)
	}
	c := timeChart{Title: "Exceptions", Series: []string{"delivery", nasty}, Unit: "reviews", LineName: "per 100 & orders",
		LineUnit: "%", Steps: []step{
			{Label: "08:00", Tip: "08:00 <2>", Values: []int64{1, 1}, Line: 2, HasLine: true},
			{Label: "", Tip: "09:00", Values: []int64{0, 3}, Line: 0.5, HasLine: true},
			{Label: "10:00", Tip: "10:00 no orders", Values: []int64{4}},
			{Label: "<11>", Tip: "11:00", Values: nil, Line: 1, HasLine: true},
		}}
	svg := string(timeSeriesChart(c))
	texts, elems := svgTexts(t, svg)
	for _, want := range []string{"Exceptions", "delivery", nasty, "per 100 & orders", "reviews", "08:00 <2>", "<11>", "10:00 no orders"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	if strings.Contains(svg, "<script") || strings.Contains(svg, "<11>") || strings.Contains(svg, "<2>") {
		t.Errorf("labels not escaped:\n%s", svg)
	}
	// Four steps: a hover target each, and a rect per non-zero value (4),
	// two legend squares; the line breaks at the step without a point.
	if elems["g"] != 4 || elems["rect"] != 4+4+2 || elems["polyline"] != 1 || elems["circle"] != 3 {
		t.Errorf("elements %v", elems)
	}
	// The left axis reaches the tallest column (4) in whole steps.
	for _, want := range []string{">0<", ">1<", ">4<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("no axis value %s:\n%s", want, svg)
		}
	}
	// Without a line: no right axis, no polyline.
	c.LineName = ""
	if _, elems := svgTexts(t, string(timeSeriesChart(c))); elems["polyline"] != 0 || elems["circle"] != 0 || elems["line"] != 5 {
		t.Errorf("without a line: %v", elems)
	}
}

func TestNiceStep(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ v, least, want float64 }{
		{0, 1, 1}, {0.3, 1, 1}, {1, 1, 1}, {1.2, 1, 2}, {2, 1, 2}, {3, 1, 5}, {7.5, 1, 10}, {12, 1, 20}, {2500, 1, 5000},
		{0.03, 0.1, 0.1}, {0.15, 0.1, 0.2}, {0.4, 0.1, 0.5},
	} {
		if got := niceStep(c.v, c.least); got != c.want {
			t.Errorf("niceStep(%v, %v) = %v, want %v", c.v, c.least, got, c.want)
		}
	}
}

// TestChartColorsPerCategory: every failure category the dashboard stacks
// has a colour of its own.
func TestChartColorsPerCategory(t *testing.T) {
	if len(chartColors) < len(categories) {
		t.Fatalf("%d colours for %d categories: two kinds would look alike", len(chartColors), len(categories))
	}
	seen := map[string]bool{}
	for _, c := range chartColors {
		if seen[c] {
			t.Errorf("colour %s appears twice", c)
		}
		seen[c] = true
	}
}
