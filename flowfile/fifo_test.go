//go:build unix

package flowfile_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flowfile"
)

// TestLoadNamedPipe: a named pipe among the flow files is refused at once,
// not opened: opening one waits for a writer, and lapse serve hung at its
// start, deaf to SIGTERM.
func TestLoadNamedPipe(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := flowfile.Load(path)
	if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "pipe.yaml: not a regular file") {
		t.Errorf("Load of a named pipe: %v", err)
	}
	if _, err := flowfile.LoadDir(filepath.Dir(path)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("LoadDir with a named pipe: %v", err)
	}
}
