package console

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Charts are SVG drawn here, in Go, and written into the page: no
// JavaScript, and nothing for the Content-Security-Policy to refuse (colours
// are presentation attributes, not style). Every text in them is escaped;
// what they show is the caller's, already in the operator's language, zone
// and units.

// chartColors are the colours of a chart's series, in order: as many as
// there are failure categories, so that no two stacked kinds share one.
var chartColors = []string{"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// chartColor is the colour of the i-th series.
func chartColor(i int) string { return chartColors[i%len(chartColors)] }

// bar is one bar of a bar chart.
type bar struct {
	Label string // at the left of the bar
	Value int64  // its length; negative values draw as zero
	Note  string // at the right of the bar: the value as shown, with its unit
}

// Bar chart geometry, in the SVG's own units.
const (
	barWidth  = 720 // of the whole chart
	barLabelW = 190 // the labels' column
	barNoteW  = 120 // the notes' column
	barRow    = 24
)

// barChart draws bars, one to a row, as an SVG titled title (for screen
// readers and as a tooltip). It is empty when there are no bars.
func barChart(title string, bars []bar) template.HTML {
	if len(bars) == 0 {
		return ""
	}
	var most int64
	for _, b := range bars {
		most = max(most, b.Value)
	}
	h := len(bars)*barRow + 8
	var s strings.Builder
	svgOpen(&s, title, barWidth, h)
	span := float64(barWidth - barLabelW - barNoteW - 16)
	for i, b := range bars {
		y := 4 + i*barRow
		w := 0.0
		if most > 0 && b.Value > 0 {
			w = max(span*float64(b.Value)/float64(most), 1)
		}
		fmt.Fprintf(&s, `<g><title>%s: %s</title>`, esc(b.Label), esc(b.Note))
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end" font-size="12" fill="#1d2430">%s</text>`, barLabelW, y+16, esc(b.Label))
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, barLabelW+8, y+4, w, barRow-8, chartColor(0))
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" font-size="12" fill="#5b6678">%s</text></g>`, float64(barLabelW+14)+w, y+16, esc(b.Note))
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}

// timeChart is a time series: at each step a column of stacked values, one
// per series, and, when the chart has a line, a point of the line on a
// scale of its own (the right axis).
type timeChart struct {
	Title    string
	Series   []string // the stacked series' names, bottom first
	Unit     string   // of the columns, at the top of the left axis
	LineName string   // "": no line
	LineUnit string   // of the line, at the top of the right axis
	Steps    []step
}

// step is one step of a timeChart.
type step struct {
	Label   string  // under the column; "" shows none
	Tip     string  // the step's tooltip
	Values  []int64 // by series; missing ones are zero
	Line    float64
	HasLine bool // false: the line has a gap here
}

// Time chart geometry.
const (
	tcWidth, tcHeight = 720, 276
	tcLeft, tcRight   = 48, 672 // the plot's x range
	tcTop, tcBottom   = 60, 244 // and its y range, below two rows of legend
)

// timeSeriesChart draws c as an SVG: stacked columns against the left axis,
// the line against the right, a legend above. It is empty without steps.
func timeSeriesChart(c timeChart) template.HTML {
	if len(c.Steps) == 0 {
		return ""
	}
	var most int64
	lineMost := 0.0
	for _, st := range c.Steps {
		var sum int64
		for _, v := range st.Values {
			sum += max(v, 0)
		}
		most = max(most, sum)
		if st.HasLine {
			lineMost = max(lineMost, st.Line)
		}
	}
	colStep := niceStep(float64(most)/4, 1)
	ticks := int(math.Max(math.Ceil(float64(most)/colStep), 1))
	colTop := colStep * float64(ticks)
	// The right axis has the left's grid lines.
	lineStep := niceStep(lineMost/float64(ticks), 0.1)
	lineTop := lineStep * float64(ticks)
	plotH := float64(tcBottom - tcTop)
	yOf := func(v, top float64) float64 { return tcBottom - plotH*v/top }

	var s strings.Builder
	svgOpen(&s, c.Title, tcWidth, tcHeight)
	// The legend, in rows.
	x, y := tcLeft, 6
	place := func(name string) {
		if w := 24 + textWidth(name, 12); x > tcLeft && x+w > tcWidth {
			x, y = tcLeft, y+17
		}
	}
	for i, name := range c.Series {
		place(name)
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/>`, x, y, chartColor(i))
		fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="12" fill="#1d2430">%s</text>`, x+14, y+9, esc(name))
		x += 24 + textWidth(name, 12)
	}
	if c.LineName != "" {
		place(c.LineName)
		fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#1d2430" stroke-width="2"/>`, x, y+5, x+14, y+5)
		fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="12" fill="#1d2430">%s</text>`, x+18, y+9, esc(c.LineName))
	}
	// The axes: grid lines and their values, the units above.
	fmt.Fprintf(&s, `<text x="%d" y="%d" font-size="11" fill="#5b6678">%s</text>`, 4, tcTop-10, esc(c.Unit))
	if c.LineName != "" {
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end" font-size="11" fill="#5b6678">%s</text>`, tcWidth-4, tcTop-10, esc(c.LineUnit))
	}
	for i := 0; i <= ticks; i++ {
		y := yOf(float64(i)*colStep, colTop)
		fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d9dee7"/>`, tcLeft, y, tcRight, y)
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="#5b6678">%s</text>`, tcLeft-4, y+4, fmtAxis(float64(i)*colStep))
	}
	if c.LineName != "" {
		for i := 0; i <= ticks; i++ {
			y := yOf(float64(i)*lineStep, lineTop)
			fmt.Fprintf(&s, `<text x="%d" y="%.1f" font-size="11" fill="#5b6678">%s</text>`, tcRight+4, y+4, fmtAxis(float64(i)*lineStep))
		}
	}
	// The columns.
	slot := float64(tcRight-tcLeft) / float64(len(c.Steps))
	colW := max(slot*0.75, 1)
	for i, st := range c.Steps {
		x := tcLeft + slot*float64(i) + (slot-colW)/2
		fmt.Fprintf(&s, `<g><title>%s</title>`, esc(st.Tip))
		fmt.Fprintf(&s, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#000" fill-opacity="0"/>`, x, tcTop, colW, tcBottom-tcTop)
		base := 0.0
		for j, v := range st.Values {
			if v <= 0 {
				continue
			}
			top := base + float64(v)
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x, yOf(top, colTop), colW,
				yOf(base, colTop)-yOf(top, colTop), chartColor(j))
			base = top
		}
		s.WriteString(`</g>`)
		if st.Label != "" {
			fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11" fill="#5b6678">%s</text>`, x+colW/2, tcBottom+16, esc(st.Label))
		}
	}
	// The line, in segments between its gaps.
	if c.LineName != "" {
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				fmt.Fprintf(&s, `<polyline points="%s" fill="none" stroke="#1d2430" stroke-width="2"/>`, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, st := range c.Steps {
			if !st.HasLine {
				flush()
				continue
			}
			x, y := tcLeft+slot*(float64(i)+0.5), yOf(st.Line, lineTop)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="#1d2430"/>`, x, y)
		}
		flush()
	}
	s.WriteString(`</svg>`)
	return template.HTML(s.String())
}

// textWidth is about how wide s is at size: wide (CJK) characters are a
// full em, others a little over half.
func textWidth(s string, size int) int {
	w := 0
	for _, r := range s {
		if r >= 0x1100 {
			w += size
		} else {
			w += size * 2 / 3
		}
	}
	return w
}

// svgOpen starts an SVG of w by h, titled title.
func svgOpen(s *strings.Builder, title string, w, h int) {
	fmt.Fprintf(s, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		w, h, esc(title), esc(title))
}

// esc escapes text for an SVG's text and attributes, as XML and as HTML.
func esc(s string) string { return html.EscapeString(s) }

// niceStep is a step of 1, 2 or 5 times a power of ten at or above v, and at
// least least.
func niceStep(v, least float64) float64 {
	if v <= least || math.IsNaN(v) || math.IsInf(v, 0) {
		return least
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// fmtAxis shows an axis value: a whole number, or a decimal one as short as
// it can be.
func fmtAxis(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}
