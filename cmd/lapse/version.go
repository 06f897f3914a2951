package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

// showVersion is lapse version (and lapse --version): the module's version,
// the commit it was built from, and the Go that built it.
func showVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: lapse version\n\nPrints the version of lapse, the commit it was built from and the Go that built it.")
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	bi, _ := debug.ReadBuildInfo()
	_, err := io.WriteString(stdout, versionText(bi))
	return err
}

// versionText returns what lapse version prints of bi, the build
// information of the binary (nil when it has none): the main module's
// version, the VCS revision, time and whether the tree was modified when
// they are recorded, and the Go version and platform.
func versionText(bi *debug.BuildInfo) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	version, path, goVersion := "unknown", "github.com/lapsehq/lapse", runtime.Version()
	if bi != nil {
		if bi.Main.Path != "" {
			path = bi.Main.Path
		}
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	fmt.Fprintf(tw, "lapse\t%s\n", version)
	fmt.Fprintf(tw, "module\t%s\n", path)
	if bi != nil {
		for _, key := range []string{"vcs.revision", "vcs.time", "vcs.modified"} {
			for _, s := range bi.Settings {
				if s.Key == key && s.Value != "" {
					fmt.Fprintf(tw, "%s\t%s\n", strings.TrimPrefix(key, "vcs."), s.Value)
				}
			}
		}
	}
	fmt.Fprintf(tw, "go\t%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	tw.Flush()
	return b.String()
}
