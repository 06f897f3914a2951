// Package migration reads the schema changes that a store embeds: numbered
// SQL files, NNNN_what.sql, applied in the order of their numbers. Every
// store reads them the same way; what it does with them (locks, the
// bookkeeping table, its SQL dialect) is its own.
package migration

import (
	"cmp"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int64  // NNNN of its file name
	Name    string // the file name, NNNN_what.sql
	SQL     string
}

// List returns the migrations in directory dir of fsys, the *.sql files
// whose names start with a positive number and _, in version order. A file
// named otherwise, or two files of one version, is an error.
func List(fsys fs.FS, dir string) ([]Migration, error) {
	paths, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, p := range paths {
		name := path.Base(p)
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_what.sql", name)
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s have the same version %d", ms[i-1].Name, ms[i].Name, ms[i].Version)
		}
	}
	return ms, nil
}
