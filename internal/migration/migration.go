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

// Known reports, as an error, the lowest version in recorded (those a database's
// bookkeeping table holds) that ms does not hold: a migration of a newer
// Lapse, applied or under way. A store refuses such a database before it
// applies anything, rather than run with a schema whose meaning this build
// does not know (a newer version may have moved data, or dropped a
// constraint this one relies on).
func Known(ms []Migration, recorded []int64) error {
	for _, v := range slices.Sorted(slices.Values(recorded)) {
		if !slices.ContainsFunc(ms, func(m Migration) bool { return m.Version == v }) {
			return fmt.Errorf("the database has migration %d, which this build does not know; it was migrated by a newer version of Lapse: run that version (or one as new), or restore a copy from before it migrated", v)
		}
	}
	return nil
}

// Current reports, as an error, a database whose schema is not the one this
// build migrates to: one that records a migration ms does not hold (see
// Known), or one that lacks a migration of ms, which lapse migrate applies.
// applied holds the versions a database has recorded as complete. It is for
// the commands that use a database without migrating it.
func Current(ms []Migration, applied []int64) error {
	if err := Known(ms, applied); err != nil {
		return err
	}
	for _, m := range ms {
		if !slices.Contains(applied, m.Version) {
			return fmt.Errorf("the database lacks migration %s of this build: lapse migrate (or lapse serve) applies it", m.Name)
		}
	}
	return nil
}
