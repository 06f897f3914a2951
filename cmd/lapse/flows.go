package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flowfile"
	"github.com/lapsehq/lapse/flows"
)

// loadFlows returns the built-in flows and, when dir is not empty, the flows
// of the YAML files in it. A file whose flow has the name of another flow,
// built in or in another file, is an error naming both.
func loadFlows(dir string) ([]*lapse.Flow, error) {
	out := flows.Builtin()
	if dir == "" {
		return out, nil
	}
	defined := map[string]string{} // flow name → where it is defined
	for _, f := range out {
		defined[f.Name] = "the built-in flows"
	}
	paths, err := flowfile.Files(dir)
	if err != nil {
		return nil, flowFileError(err)
	}
	for _, path := range paths {
		f, err := flowfile.Load(path)
		if err != nil {
			return nil, flowFileError(err)
		}
		if other, ok := defined[f.Name]; ok {
			return nil, fmt.Errorf("--flows: %s defines flow %q, which %s define already", path, f.Name, other)
		}
		defined[f.Name] = path
		out = append(out, f)
	}
	return out, nil
}

// flowsDigest sums the names and contents of the flow files in dir (see
// flowfile.Files), so that a running lapse serve can tell that they changed
// after it loaded them; "" when dir is "". A file that is not regular or
// cannot be read counts by what keeps it from being read, not by its
// contents: opening a named pipe would wait for a writer.
func flowsDigest(dir string) string {
	if dir == "" {
		return ""
	}
	h := sha256.New()
	paths, err := flowfile.Files(dir)
	if err != nil {
		fmt.Fprintf(h, "error %v", err)
	}
	for _, path := range paths {
		fmt.Fprintf(h, "%s\x00", filepath.Base(path))
		fi, err := os.Stat(path)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		var data []byte
		if err == nil {
			var f *os.File
			if f, err = os.Open(path); err == nil {
				data, err = io.ReadAll(io.LimitReader(f, flowfile.MaxSize+1))
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(h, "error %v\x00", err)
			continue
		}
		fmt.Fprintf(h, "%d\x00", len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// flowFileError leaves out the "lapse: " of a lapse error, which main
// prints already: the message reads "--flows: FILE:LINE: problem".
func flowFileError(err error) error {
	var le *lapse.Error
	if errors.As(err, &le) {
		return fmt.Errorf("--flows: %s", le.Message)
	}
	return fmt.Errorf("--flows: %w", err)
}

// showFlows lists the flows, or prints the Mermaid state diagram of the one
// named.
func showFlows(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("flows", stderr)
	var o options
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: lapse flows [--flows DIR] [NAME]\n\nLists the flows, or prints the state diagram (Mermaid) of flow NAME.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, flowsSettings, &o, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("flows: unexpected argument %q", fs.Arg(1))
	}
	all, err := loadFlows(o.flowsDir)
	if err != nil {
		return err
	}
	slices.SortFunc(all, func(a, b *lapse.Flow) int { return strings.Compare(a.Name, b.Name) })
	if name := fs.Arg(0); name != "" {
		i := slices.IndexFunc(all, func(f *lapse.Flow) bool { return f.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for i, f := range all {
				names[i] = f.Name
			}
			return fmt.Errorf("flows: no flow %q (the flows are %s)", name, strings.Join(names, ", "))
		}
		_, err := io.WriteString(stdout, all[i].Mermaid())
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, f := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d states\n", f.Name, f.Initial, len(f.States))
	}
	return tw.Flush()
}
