package http

import (
	"log/slog"
	"sync"
	"time"
)

// burstWindow is how long a burst logs nothing more after its first line.
const burstWindow = time.Minute

// burst logs a run of like events, such as every request failing while the
// database is down, as two lines rather than one per request: the first
// event at Warn, with its attributes, and when the window that it opened
// closes, how many more there were. The next event after that opens a new
// window.
type burst struct {
	log    *slog.Logger
	msg    string
	window time.Duration

	mu   sync.Mutex
	open bool
	more int // events in the open window after its first
}

// add records one event, logging it when it opens a window.
func (b *burst) add(attrs ...any) {
	b.mu.Lock()
	first := !b.open
	if first {
		b.open = true
		time.AfterFunc(b.window, b.close)
	} else {
		b.more++
	}
	b.mu.Unlock()
	if first {
		b.log.Warn(b.msg, append(attrs, "quiet_for", b.window.String())...)
	}
}

func (b *burst) close() {
	b.mu.Lock()
	more := b.more
	b.open, b.more = false, 0
	b.mu.Unlock()
	if more > 0 {
		b.log.Warn(b.msg+" (more)", "more", more, "within", b.window.String())
	}
}
