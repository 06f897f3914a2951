package migration

import (
	"testing"
	"testing/fstest"
)

func TestList(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0010_b.sql": {Data: []byte("B")},
		"m/0002_a.sql": {Data: []byte("A")},
		"m/README.md":  {Data: []byte("not a migration")},
	}
	ms, err := List(fsys, "m")
	if err != nil || len(ms) != 2 || ms[0] != (Migration{2, "0002_a.sql", "A"}) || ms[1] != (Migration{10, "0010_b.sql", "B"}) {
		t.Fatalf("List = %+v, %v; want 0002_a then 0010_b", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no number":    {"m/a.sql": {}},
		"no _":         {"m/0001.sql": {}},
		"zero":         {"m/0000_a.sql": {}},
		"same version": {"m/0001_a.sql": {}, "m/1_b.sql": {}},
	} {
		if _, err := List(fsys, "m"); err == nil {
			t.Errorf("%s: List succeeded", name)
		}
	}
}
