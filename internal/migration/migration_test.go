package migration

import (
	"strings"
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

func TestKnown(t *testing.T) {
	ms := []Migration{{Version: 1}, {Version: 2}, {Version: 4}}
	if err := Known(ms, []int64{4, 1, 2}); err != nil {
		t.Errorf("Known of recorded versions all known = %v", err)
	}
	if err := Known(ms, nil); err != nil {
		t.Errorf("Known of nothing recorded = %v", err)
	}
	err := Known(ms, []int64{9, 1, 5, 2})
	if err == nil || !strings.Contains(err.Error(), "migration 5,") {
		t.Errorf("Known with 5 and 9 unknown = %v, want an error naming the lower, 5", err)
	}
}

func TestCurrent(t *testing.T) {
	ms := []Migration{{Version: 1, Name: "0001_a.sql"}, {Version: 2, Name: "0002_b.sql"}}
	if err := Current(ms, []int64{2, 1}); err != nil {
		t.Errorf("Current of every migration applied = %v", err)
	}
	if err := Current(ms, []int64{1}); err == nil || !strings.Contains(err.Error(), "0002_b.sql") {
		t.Errorf("Current without 0002 = %v, want an error naming 0002_b.sql", err)
	}
	if err := Current(ms, []int64{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "migration 3,") {
		t.Errorf("Current with 3 recorded = %v, want an error naming 3", err)
	}
}
