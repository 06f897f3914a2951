package redis_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/redis"
)

// syncBuffer is a log destination safe for the client's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClientLogger: what the client library logs by itself goes to the
// process's slog logger, at warn level, and not to stderr.
func TestClientLogger(t *testing.T) {
	logs := &syncBuffer{}
	redis.SetClientLogger(slog.New(slog.NewJSONHandler(logs, nil)))
	t.Cleanup(func() { redis.SetClientLogger(slog.Default()) })

	addr := testenv.Refused(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a ping of a closed port answered")
	}
	got := logs.String()
	if !strings.Contains(got, `"level":"WARN","msg":"redis: connection pool: failed to dial`) || !strings.Contains(got, `"component":"redis client"`) {
		t.Errorf("the client logged %q, want its dial failure as a warning", got)
	}
}
