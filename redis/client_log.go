package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// SetClientLogger sends the lines that the Redis client library (go-redis)
// logs by itself (a dial that failed, a connection it dropped) to log, at
// warn level, instead of writing them to stderr past the process's format
// and level. The library keeps one logger for the whole process, so this
// is a setting of the process, not of a Trigger: the program calls it once,
// where it is wired (lapse serve does).
func SetClientLogger(log *slog.Logger) {
	goredis.SetLogger(clientLogger{log})
}

// clientLogger is go-redis's logging interface over an slog.Logger.
type clientLogger struct{ log *slog.Logger }

func (l clientLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if !strings.HasPrefix(msg, "redis: ") {
		msg = "redis: " + msg
	}
	l.log.WarnContext(ctx, msg, "component", "redis client")
}
