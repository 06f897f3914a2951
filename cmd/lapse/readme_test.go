package main_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeShell returns the README's walkthrough, the text before "## Run it
// for real", and the lines of its sh blocks with their offsets in it.
func readmeShell(t *testing.T) (text string, lines []string, at []int) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ = strings.Cut(string(b), "\n## Run it for real")
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatchIndex(text, -1) {
		off := m[2]
		for line := range strings.Lines(text[m[2]:m[3]]) {
			lines, at = append(lines, strings.TrimSpace(line)), append(at, off)
			off += len(line)
		}
	}
	return text, lines, at
}

// TestREADMEWalkthrough: the README's walkthrough works as written. Every
// lapse flows command in it runs; and a step that starts lapse serve on the
// port of a server started before it first says to stop that one (Ctrl-C),
// so that no step starts a second server on a port the first still holds.
func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	text, lines, at := readmeShell(t)
	comment := regexp.MustCompile(`\s+#.*$`)
	httpFlag := regexp.MustCompile(`--http[ =](\S+)`)
	running := map[string]int{} // port → where the server on it started
	flows := 0
	for i, line := range lines {
		cmd, ok := strings.CutPrefix(comment.ReplaceAllString(line, ""), "go run ./cmd/lapse ")
		if !ok {
			continue
		}
		args := strings.Fields(strings.TrimSuffix(cmd, "&"))
		switch args[0] {
		case "flows":
			flows++
			if out, errOut, ok := lapseRun(t, "../..", args...); !ok {
				t.Errorf("README: lapse %s fails:\n%s%s", cmd, out, errOut)
			}
		case "serve":
			port := "8080"
			if m := httpFlag.FindStringSubmatch(cmd); m != nil {
				port = m[1][strings.LastIndex(m[1], ":")+1:]
			}
			if from, ok := running[port]; ok && !strings.Contains(text[from:at[i]], "Ctrl-C") {
				t.Errorf("README: %q starts a server on port %s, which the server started before still holds", line, port)
			}
			running[port] = at[i]
		}
	}
	if flows < 2 || len(running) == 0 {
		t.Fatalf("the README's walkthrough has %d lapse flows commands and %d servers; the test reads it wrong", flows, len(running))
	}
}

// TestREADMETestCommand: the command the README's Start gives for the tests
// is the one .ci/run runs, flags and all, so that a newcomer who copies it
// gets CI's run: with Go's default package timeout of 10 minutes, cmd/lapse
// under the race detector is stopped part way on a loaded machine.
func TestREADMETestCommand(t *testing.T) {
	t.Parallel()
	_, lines, _ := readmeShell(t)
	var readme []string
	for _, line := range lines {
		if strings.HasPrefix(line, "go test") && strings.HasSuffix(line, " ./...") {
			readme = append(readme, line)
		}
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^go test .*\./\.\.\.$`).FindString(string(ci))
	if want == "" {
		t.Fatal(".ci/run has no go test … ./... line; the test reads it wrong")
	}
	if len(readme) != 1 || readme[0] != want {
		t.Errorf("the README's test command is %q; .ci/run runs %q", readme, want)
	}
}
