package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestValueRange(t *testing.T) {
	rate := &valueRange{min: "0", above: true, max: "500"}
	for _, tc := range []struct {
		r    *valueRange
		k    kind
		text string
		want string // the error's text after "--x must be ", or "" for none
	}{
		{between("1", "10000"), kindInt, "1", ""},
		{between("1", "10000"), kindInt, "10000", ""},
		{between("1", "10000"), kindInt, "0", "from 1 to 10000"},
		{between("1", "10000"), kindInt, "-3", "from 1 to 10000"},
		{between("1", "10000"), kindInt, "10001", "from 1 to 10000"},
		{between("1", "10000"), kindInt, "lots", ""}, // the flag refuses it
		{positive, kindDuration, "1ns", ""},
		{positive, kindDuration, "0s", "more than 0"},
		{positive, kindDuration, "-1s", "more than 0"},
		{positive, kindInt, "0", "more than 0"},
		{atLeast("0s"), kindDuration, "0s", ""},
		{atLeast("0s"), kindDuration, "-1ns", "at least 0s"},
		{atLeast("1s").orOff("0s"), kindDuration, "0s", ""},
		{atLeast("1s").orOff("0s"), kindDuration, "0", ""},
		{atLeast("1s").orOff("0s"), kindDuration, "1s", ""},
		{atLeast("1s").orOff("0s"), kindDuration, "999ms", "at least 1s, or 0s (off)"},
		{between("0s", "100ms"), kindDuration, "100ms", ""},
		{between("0s", "100ms"), kindDuration, "101ms", "from 0s to 100ms"},
		{between("0", "1"), kindFloat, "0.5", ""},
		{between("0", "1"), kindFloat, "1.5", "from 0 to 1"},
		{between("0", "1"), kindFloat, "NaN", "from 0 to 1"},
		{rate, kindFloat, "500", ""},
		{rate, kindFloat, "0", "more than 0 and at most 500"},
		{rate, kindFloat, "+Inf", "more than 0 and at most 500"},
		{nil, kindInt, "-1", ""},
	} {
		err := tc.r.check(tc.k, "x", tc.text)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v takes %s %q: got %v", tc.r, tc.k, tc.text, err)
		case tc.want != "" && (err == nil || err.Error() != "--x must be "+tc.want):
			t.Errorf("%v refuses %s %q: got %v, want --x must be %s", tc.r, tc.k, tc.text, err, tc.want)
		}
	}
}

// TestSettingsHaveRanges: every number or duration of every command is
// bounded, and its default is within its bounds, so that no value is taken
// silently as a default or as something absurd (a setting added without a
// range fails here).
func TestSettingsHaveRanges(t *testing.T) {
	for _, s := range allSettings() {
		switch s.Kind {
		case kindInt, kindFloat, kindDuration:
		default:
			if s.Range != nil {
				t.Errorf("--%s, a %s, has a range", s.Name, s.Kind)
			}
			continue
		}
		if s.Range == nil {
			t.Errorf("--%s, a %s, has no range", s.Name, s.Kind)
			continue
		}
		def := s.Default
		if def == "" {
			def = "0"
		}
		if err := s.check(def); err != nil {
			t.Errorf("--%s: its default %q is out of its range: %v", s.Name, def, err)
		}
	}
}

// TestRangesEverywhere: a value out of its range is refused from the
// command line, the environment, a config file and a reload, and changes
// nothing.
func TestRangesEverywhere(t *testing.T) {
	t.Run("flag", func(t *testing.T) {
		if _, _, err := load(testSettings(t, nil), "--workers", "0"); err == nil || !strings.Contains(err.Error(), "--workers must be from 1 to 64") {
			t.Errorf("--workers 0: %v", err)
		}
	})
	t.Run("variable", func(t *testing.T) {
		settings := testSettings(t, nil)
		t.Setenv("LAPSE_BATCH", "20000")
		if _, _, err := load(settings); err == nil || !strings.Contains(err.Error(), `LAPSE_BATCH="20000": --batch must be from 1 to 10000`) {
			t.Errorf("LAPSE_BATCH=20000: %v", err)
		}
	})
	t.Run("file", func(t *testing.T) {
		path := writeConfig(t, t.TempDir(), "lapse.yaml", "batch: 100\nsweep-interval: 0s\n")
		fs, _, err := load(testSettings(t, nil), "--config", path)
		if err == nil || !strings.Contains(err.Error(), path+":2: sweep-interval") || !strings.Contains(err.Error(), "--sweep-interval must be more than 0") {
			t.Errorf("sweep-interval: 0s in a file: %v", err)
		}
		if value(fs, "batch") != "500" {
			t.Errorf("a refused file changed --batch to %s", value(fs, "batch"))
		}
	})
	t.Run("reload", func(t *testing.T) {
		w, path, a, _, _ := startWatcher(t, "workers: 3\n", nil)
		writeConfig(t, filepath.Dir(path), "lapse.yaml", "workers: 0\nbatch: 200\n")
		err := w.Reload()
		if err == nil || !strings.Contains(err.Error(), "--workers must be from 1 to 64") {
			t.Errorf("reload of workers: 0: %v", err)
		}
		if got := a.take(); len(got) != 0 {
			t.Errorf("a refused file applied %q", got)
		}
	})
}
