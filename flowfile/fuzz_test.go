package flowfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flowfile"
)

var errorLine = regexp.MustCompile(`^fuzz\.yaml(:[0-9]+)?: `)

// FuzzParse checks that Parse never panics, that what it accepts is a valid
// flow that renders, and that what it refuses is an EINVALID error naming
// the file (and a line, for all but a few YAML parser errors).
func FuzzParse(f *testing.F) {
	f.Add([]byte(autoConfirm))
	f.Add([]byte(checkoutYAML))
	examples, _ := filepath.Glob("../examples/flows/*.yaml")
	for _, path := range examples {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("name: x\ninitial: A\nstates: [{name: A, deadline: {after: 1d1h, event: E}}]\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("name: x\n---\nname: y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := flowfile.Parse("fuzz.yaml", data)
		if err != nil {
			var le *lapse.Error
			if !errors.As(err, &le) || le.Code != lapse.EINVALID || !errorLine.MatchString(le.Message) {
				t.Fatalf("error %q is not an EINVALID fuzz.yaml:LINE: message", err)
			}
			return
		}
		if err := fl.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid flow: %v", err)
		}
		_ = flowfile.Markdown(fl)
	})
}
