package faultproxy

import (
	"os"
	"time"

	"github.com/lapsehq/lapse/internal/testenv"
)

// Outage lengths for tests that hold a proxy down. The short one keeps a
// developer's run quick; the long one outlasts the clients' reconnect backoff,
// heartbeats and ping intervals several times over, which a few seconds do
// not, so CI proves that a sink comes back after a real outage.
const (
	ShortOutage = 3 * time.Second
	LongOutage  = 60 * time.Second
)

// OutageLength is how long outage tests keep the target away: LongOutage when
// LAPSE_LONG_TESTS=1 or LAPSE_REQUIRE_SERVICES=1 (CI), else ShortOutage.
func OutageLength() time.Duration {
	if os.Getenv("LAPSE_LONG_TESTS") == "1" || os.Getenv(testenv.EnvRequire) == "1" {
		return LongOutage
	}
	return ShortOutage
}
