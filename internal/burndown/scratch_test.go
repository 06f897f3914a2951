package burndown_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/internal/burndown"
)

// TestNewScratchHidesPassword: a DSN that is not a URL (a password with a /
// not percent-encoded) is refused without the password in the error.
func TestNewScratchHidesPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"postgres://u:s3c/ret@127.0.0.1:1/db", "mysql://u:s3c/ret@127.0.0.1:1/db"} {
		_, err := burndown.NewScratch(context.Background(), dsn)
		if err == nil || strings.Contains(err.Error(), "s3c") {
			t.Errorf("NewScratch(%q) = %v, want an error without the password", dsn, err)
		}
	}
}
