package flows_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/flowfile"
	"github.com/lapsehq/lapse/flows"
)

var update = flag.Bool("update", false, "rewrite docs/flows from the built-in flows")

// docsDir holds one generated Markdown document per built-in flow.
const docsDir = "../docs/flows"

// TestDocs checks that docs/flows documents every built-in flow as it is,
// and nothing else. With -update it makes it so.
func TestDocs(t *testing.T) {
	const howto = "run go test ./flows -run Docs -update"
	if *update {
		if err := os.MkdirAll(docsDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	documented := map[string]bool{}
	for _, f := range flows.Builtin() {
		name := f.Name + ".md"
		documented[name] = true
		path := filepath.Join(docsDir, name)
		want := flowfile.Markdown(f)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		switch {
		case os.IsNotExist(err):
			t.Errorf("docs/flows/%s is missing: %s", name, howto)
		case err != nil:
			t.Error(err)
		case string(got) != want:
			t.Errorf("docs/flows/%s is out of date with flow %s: %s", name, f.Name, howto)
		}
	}
	entries, err := os.ReadDir(docsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".md") || documented[e.Name()] {
			continue
		}
		path := filepath.Join(docsDir, e.Name())
		if *update {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("docs/flows/%s documents no built-in flow: %s", e.Name(), howto)
	}
}
