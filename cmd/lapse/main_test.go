package main_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// lapseExit runs the lapse binary in dir with args and the variables env,
// and returns its stdout, its stderr and its exit status.
func lapseExit(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lapseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_HTTP=", "LAPSE_FLOWS=", "LAPSE_CONFIG=")
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("lapse %v did not exit within a minute:\n%s", args, errOut.String())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("lapse %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// commands are the command lines of every command of lapse, without flags.
var commands = [][]string{
	{"serve"}, {"migrate"}, {"reconcile"}, {"flows"}, {"config"},
	{"apikey", "create"}, {"apikey", "list"}, {"apikey", "revoke"},
	{"operator", "add"}, {"operator", "list"}, {"operator", "disable"},
	{"operator", "enable"}, {"operator", "role"}, {"operator", "reset"},
	{"audit", "verify"}, {"audit", "list"},
	{"close"}, {"bench"}, {"demo"}, {"version"},
}

// TestHelpExitCodes: -h prints a command's usage and exits 0, a flag the
// command does not have exits 2, on every command; so does a command line
// without its command.
func TestHelpExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range commands {
		name := strings.Join(c, " ")
		for _, help := range []string{"-h", "--help"} {
			_, errOut, code := lapseExit(t, dir, nil, append(c, help)...)
			if code != 0 || !strings.Contains(errOut, "Usage") {
				t.Errorf("lapse %s %s: exit %d, want 0 and the usage:\n%s", name, help, code, errOut)
			}
		}
		if _, errOut, code := lapseExit(t, dir, nil, append(c, "--no-such-flag")...); code != 2 || !strings.Contains(errOut, "no-such-flag") {
			t.Errorf("lapse %s --no-such-flag: exit %d, want 2 naming the flag:\n%s", name, code, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 2}, {[]string{"nope"}, 2}, {[]string{"help"}, 0}, {[]string{"-h"}, 0},
		{[]string{"apikey"}, 2}, {[]string{"operator"}, 2}, {[]string{"audit"}, 2},
		{[]string{"apikey", "help"}, 0}, {[]string{"audit", "nope"}, 2},
	} {
		if _, errOut, code := lapseExit(t, dir, nil, tc.args...); code != tc.code || !strings.Contains(errOut+"Usage", "Usage") {
			t.Errorf("lapse %q: exit %d, want %d:\n%s", tc.args, code, tc.code, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the help made files: %v", entries)
	}
}

// TestUnexpectedArguments: a command that takes no positional argument
// refuses one, naming it, with exit 2 and before it makes anything: lapse
// migrate postgres://… must not migrate (and make) ./lapse.db.
func TestUnexpectedArguments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range [][]string{
		{"serve"}, {"migrate"}, {"reconcile"}, {"config"}, {"apikey", "create"}, {"apikey", "list"},
		{"operator", "add"}, {"operator", "list"}, {"audit", "verify"}, {"audit", "list"},
		{"bench"}, {"demo"}, {"version"},
	} {
		args := append(slices.Clone(c), "postgres://lapse@db:5432/lapse")
		if _, errOut, code := lapseExit(t, dir, nil, args...); code != 2 || !strings.Contains(errOut, `unexpected argument "postgres://lapse@db:5432/lapse"`) {
			t.Errorf("lapse %s DSN: exit %d, want 2 naming the argument:\n%s", strings.Join(c, " "), code, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused command lines made files: %v", entries)
	}
}

// TestFlagGivenTwice: a flag given twice is refused, as a key given twice
// in a config file is, rather than the last one taken: --hmac-secrets A
// --hmac-secrets B kept B alone, dropping the secret being rotated out.
// A list argument (lapse close --order) adds up over its uses.
func TestFlagGivenTwice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"config", "--workers", "2", "--workers", "3"},
		{"config", "--hmac-secrets", "0123456789abcdef-a", "--hmac-secrets=0123456789abcdef-b"},
		{"serve", "--http", "127.0.0.1:0", "-http=127.0.0.1:0"},
		{"migrate", "--db", "a.db", "--db", "b.db"},
		{"close", "--dry-run", "--order", "A-1", "--dry-run"},
	} {
		_, errOut, code := lapseExit(t, dir, nil, args...)
		if code != 2 || !strings.Contains(errOut, "is given twice") {
			t.Errorf("lapse %q: exit %d, want 2 saying the flag is given twice:\n%s", args, code, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("refused command lines made files: %v", entries)
	}
	if _, errOut, code := lapseExit(t, dir, nil, "migrate"); code != 0 {
		t.Fatalf("lapse migrate: exit %d:\n%s", code, errOut)
	}
	out, errOut, code := lapseExit(t, dir, nil, "close", "--order", "A-1", "--order", "A-2", "--dry-run")
	if code != 0 || !strings.Contains(out, "2 more chosen") {
		t.Errorf("lapse close --order A-1 --order A-2 --dry-run: exit %d, want both orders chosen:\n%s%s", code, out, errOut)
	}
}

// TestServeRefusesBeforeOpening: lapse serve refuses a subscriber's, a
// payment provider's or a listener's setting before it opens the database,
// so that on a first start it makes neither the database nor an admin key.
func TestServeRefusesBeforeOpening(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook", "http://127.0.0.1:1/hook", "--webhook-secret", "short"}, "--webhook"},
		{[]string{"--stock-port", "not-a-url"}, `invalid value "not-a-url" for flag -stock-port: not a URL`},
		{[]string{"--alipay-app-id", "2021", "--alipay-seller-id", "2088", "--alipay-public-key", "no-such-file.pem"}, "--alipay-public-key"},
		{[]string{"--http", taken.Addr().String()}, "--http"},
		{[]string{"--metrics-http", taken.Addr().String()}, "--metrics-http"},
		{[]string{"--console-http", "127.0.0.1:99999"}, "--console-http"},
		// A URL refused is shown without its secrets: a password, a token
		// as its user or in its query.
		{[]string{"--webhook", "https://u:s3cret@h.example/x?token=s3cret#frag", "--webhook-secret", "0123456789abcdef0123"}, "--webhook"},
		{[]string{"--stock-port", "ftp://s3cret@h.example/x?token=s3cret"}, "--stock-port"},
		{[]string{"--payment-providers", "p=https://u:s3cret@h.example/x?token=s3cret", "--payment-provider-secrets", "p=0123456789abcdef0123"},
			"--payment-providers"},
	} {
		dir := t.TempDir()
		args := append([]string{"serve"}, tc.args...)
		if !slices.Contains(args, "--http") {
			args = append(args, "--http", "127.0.0.1:0")
		}
		if _, errOut, code := lapseExit(t, dir, nil, args...); code != 2 || !strings.Contains(errOut, "lapse: "+tc.want) || strings.Contains(errOut, "s3cret") {
			t.Errorf("lapse %q: exit %d, want 2 naming %s, showing no secret:\n%s", args, code, tc.want, errOut)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("lapse %q made files: %v", args, entries)
		}
	}
}

// TestVersionCommand: lapse version and lapse --version print the module,
// its version and the Go that built it.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version", "-version"} {
		out, errOut, code := lapseExit(t, t.TempDir(), nil, arg)
		if code != 0 || errOut != "" {
			t.Errorf("lapse %s: exit %d, stderr %q", arg, code, errOut)
		}
		for _, want := range []string{"lapse ", "module  github.com/lapsehq/lapse\n", "go      " + runtime.Version() + " "} {
			if !strings.Contains(out, want) {
				t.Errorf("lapse %s printed %q, without %q", arg, out, want)
			}
		}
	}
	if _, _, code := lapseExit(t, t.TempDir(), nil, "version", "extra"); code != 2 {
		t.Errorf("lapse version extra: exit %d, want 2", code)
	}
}

// TestFlagsAfterArguments: every command takes its flags after its
// positional arguments too, and "--" ends them.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	dir, examples := t.TempDir(), examplesDir(t)
	out, errOut, code := lapseExit(t, dir, nil, "flows", "auto_confirm", "--flows", examples)
	if code != 0 || !strings.Contains(out, "[*] --> PAID") {
		t.Errorf("lapse flows auto_confirm --flows DIR: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = lapseExit(t, dir, nil, "flows", "--flows="+examples, "auto_refund")
	if code != 0 || !strings.Contains(out, "AUTO_REFUND") {
		t.Errorf("lapse flows --flows=DIR auto_refund: exit %d\n%s%s", code, out, errOut)
	}
	db := filepath.Join(dir, "lapse.db")
	if _, errOut, code := lapseExit(t, dir, nil, "migrate", "--db", db); code != 0 {
		t.Fatalf("lapse migrate: exit %d\n%s", code, errOut)
	}
	// A boolean flag between the order numbers takes no value.
	out, errOut, code = lapseExit(t, dir, nil, "close", "A-1", "--dry-run", "A-2", "--db", db)
	if code != 0 || !strings.Contains(out, "dry run: nothing was changed") {
		t.Errorf("lapse close A-1 --dry-run A-2 --db DB: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = lapseExit(t, dir, nil, "flows", "--", "--flows")
	if code != 2 || !strings.Contains(errOut, `no flow "--flows"`) {
		t.Errorf("lapse flows -- --flows: exit %d, want 2 and no such flow:\n%s", code, errOut)
	}
}

// TestFlowsCommandSettings: lapse flows takes its directory from --flows,
// LAPSE_FLOWS or the config file, as lapse serve does.
func TestFlowsCommandSettings(t *testing.T) {
	t.Parallel()
	dir, examples := t.TempDir(), examplesDir(t)
	out, errOut, code := lapseExit(t, dir, []string{"LAPSE_FLOWS=" + examples}, "flows", "auto_confirm")
	if code != 0 || !strings.Contains(out, "[*] --> PAID") {
		t.Errorf("LAPSE_FLOWS=DIR lapse flows auto_confirm: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "lapse.yaml"), []byte("flows: "+examples+"\nsweep-interval: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = lapseExit(t, dir, nil, "flows", "--config", "lapse.yaml")
	if code != 0 || !strings.Contains(out, "auto_confirm") {
		t.Errorf("lapse flows --config FILE: exit %d\n%s%s", code, out, errOut)
	}
}
