package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestParseArgs: flags may come before, between and after the positional
// arguments; a boolean flag takes no value; "--" ends the flags.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		reason     string
		dryRun     bool
		positional []string
	}{
		{[]string{"A-1", "--reason", "r"}, "r", false, []string{"A-1"}},
		{[]string{"--reason", "r", "A-1", "A-2"}, "r", false, []string{"A-1", "A-2"}},
		{[]string{"A-1", "--dry-run", "A-2"}, "", true, []string{"A-1", "A-2"}},
		{[]string{"A-1", "-reason=r r", "A-2", "-dry-run=false"}, "r r", false, []string{"A-1", "A-2"}},
		{[]string{"--reason", "--", "A-1"}, "--", false, []string{"A-1"}},
		{[]string{"A-1", "--", "--reason", "r"}, "", false, []string{"A-1", "--reason", "r"}},
		{[]string{"-", "--reason", "r"}, "r", false, []string{"-"}},
		{[]string{"--dry-run", "1", "0"}, "", true, []string{"1", "0"}}, // order numbers
	} {
		fs := newFlagSet("test", io.Discard)
		reason := fs.String("reason", "", "")
		dryRun := fs.Bool("dry-run", false, "")
		if err := parseArgs(fs, tc.args); err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if *reason != tc.reason || *dryRun != tc.dryRun || !slices.Equal(fs.Args(), tc.positional) {
			t.Errorf("%q: reason %q, dry-run %v, arguments %q; want %q, %v, %q", tc.args, *reason, *dryRun, fs.Args(), tc.reason, tc.dryRun, tc.positional)
		}
	}
	fs := newFlagSet("test", io.Discard)
	fs.String("reason", "", "")
	if err := parseArgs(fs, []string{"A-1", "--bogus"}); err == nil {
		t.Errorf("an unknown flag after an argument was taken")
	}
	// A boolean flag's value after a space would be an argument (an order
	// number), and the flag set: refused, whatever the value.
	for _, args := range [][]string{{"A-1", "--dry-run", "false"}, {"--dry-run", "true", "A-1"}, {"--dry-run", "FALSE"}} {
		fs := newFlagSet("test", io.Discard)
		fs.Bool("dry-run", false, "")
		if err := parseArgs(fs, args); err == nil || !strings.Contains(err.Error(), "write -dry-run="+args[slices.Index(args, "--dry-run")+1]) {
			t.Errorf("%q: error %v, want the value refused", args, err)
		}
	}
}
