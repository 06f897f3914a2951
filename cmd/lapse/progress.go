package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lapsehq/lapse"
)

// progress shows how far a close batch is: on a terminal one line, redrawn
// in place with a bar; elsewhere (a log, a pipe) a line at every tenth of
// the way, so that a log is not flooded.
type progress struct {
	w        io.Writer
	terminal bool
	shown    int // tenths of the way printed so far (not a terminal); -1 before the first
	drawn    bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, terminal: isTerminal(w), shown: -1}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// show is closes.Run's progress callback: b as last written.
func (p *progress) show(b *lapse.CloseBatch) {
	settled := b.Closed + b.Skipped + b.Failed
	pct := 100
	if b.Total > 0 {
		pct = int(settled * 100 / b.Total)
	}
	counts := fmt.Sprintf("%d/%d (%d%%): %d closed, %d skipped, %d failed", settled, b.Total, pct, b.Closed, b.Skipped, b.Failed)
	if p.terminal {
		const width = 30
		done := width * pct / 100
		fmt.Fprintf(p.w, "\r[%s%s] %s", strings.Repeat("#", done), strings.Repeat(".", width-done), counts)
		p.drawn = true
		return
	}
	if tenth := pct / 10; tenth > p.shown {
		p.shown = tenth
		fmt.Fprintf(p.w, "batch %d: %s\n", b.ID, counts)
	}
}

// end ends the line a terminal's bar is on.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
