package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lapseBin is the lapse binary built for these tests.
var lapseBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lapse-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lapseBin = filepath.Join(dir, "lapse")
	build := exec.Command("go", "build", "-o", lapseBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building lapse:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `lapse serve`.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	URL  string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

// testAdminKey is the admin key startServe gives lapse serve, and client
// sends.
const testAdminKey = "test-admin-key-0123456789abcdefghijklmnop"

// startServe runs `lapse serve` in dir with args and waits until it listens.
// It starts with --admin-key testAdminKey unless args give --admin-key
// (--admin-key= for none), and without the synthetic probe, whose orders
// and events would otherwise come into the tests' counts at the turn of a
// minute, unless args give --probe-interval.
func startServe(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	given := func(flag string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
	}
	if !given("--admin-key") {
		args = append([]string{"--admin-key", testAdminKey}, args...)
	}
	if !given("--probe-interval") {
		args = append([]string{"--probe-interval", "0"}, args...)
	}
	if !given("--http") {
		args = append([]string{"--http", "127.0.0.1:0"}, args...)
	}
	args = append([]string{"serve", "--log-format", "json"}, args...)
	cmd := exec.Command(lapseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_HTTP=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, done: make(chan error, 1)}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				HTTP string `json:"http"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "lapse serving" {
				listening <- rec.HTTP
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("logs of lapse %v:\n%s", args, p.Logs())
		}
	})
	select {
	case p.URL = <-listening:
		return p
	case err := <-p.done:
		t.Fatalf("lapse serve exited before listening: %v\n%s", err, p.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("lapse serve did not listen within a minute\n%s", p.Logs())
	}
	return nil
}

// Logs returns what the process logged so far.
func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Terminate sends SIGTERM and returns the exit error once the process ends.
func (p *proc) Terminate(timeout time.Duration) error {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.done:
		return err
	case <-time.After(timeout):
		p.t.Fatalf("lapse did not stop within %v of SIGTERM", timeout)
		return nil
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *proc) Kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// client calls lapse serve with testAdminKey, unless a request has its own
// Authorization; plainClient sends none.
var (
	client      = &http.Client{Timeout: 30 * time.Second, Transport: withKey{&http.Transport{MaxIdleConnsPerHost: 64}}}
	plainClient = &http.Client{Timeout: 30 * time.Second}
)

// withKey adds Authorization: Bearer testAdminKey to requests that have no
// Authorization header.
type withKey struct{ base http.RoundTripper }

func (k withKey) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+testAdminKey)
	}
	return k.base.RoundTrip(r)
}

// call sends a JSON request and decodes a JSON answer into out (if not nil).
func call(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 && strings.Contains(resp.Header.Get("Content-Type"), "json") {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Errorf("%s %s: decoding %q: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

// callQuiet sends a JSON request and returns the status, or 0 when there was
// no answer (the process is down), without failing the test.
func callQuiet(method, url string, body any) int {
	b, err := json.Marshal(body)
	if err != nil {
		return 0
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
