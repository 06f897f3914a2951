package testenv

import "testing"

// EnvRedis names the test Redis, e.g. redis://127.0.0.1:6379/0. Tests share
// its database and keep apart by key prefix.
const EnvRedis = "LAPSE_TEST_REDIS"

// Redis returns the URL of the test Redis, or skips the test (fails it when
// LAPSE_REQUIRE_SERVICES=1) when EnvRedis is unset.
func Redis(t testing.TB) string {
	t.Helper()
	return Require(t, EnvRedis, "Redis")
}
