package lapse_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

func TestParseDuration(t *testing.T) {
	const day = 24 * time.Hour
	for s, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "15m": 15 * time.Minute, "1h30m": 90 * time.Minute, "0": 0, "0s": 0,
		"0d": 0, "1d": day, "7d": 7 * day, "1d12h": day + 12*time.Hour, "2d30m": 2*day + 30*time.Minute,
		"-10m": -10 * time.Minute, "-1d": -day, "+1d": day, "106751d": 106751 * day,
	} {
		if got, err := lapse.ParseDuration(s); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "d", "1", "7 days", "1d-1h", "1d+1h", "--1m", "-", "1.5d", "106752d", "106751d24h", "1w"} {
		if got, err := lapse.ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", s, got)
		}
	}
}
