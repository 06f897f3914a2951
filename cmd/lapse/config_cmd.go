package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// showConfig prints the flags of lapse serve as serve would take them from
// its defaults, config file, environment and command line: each flag's
// value, secrets hidden, and where it came from. A config file that is no
// good stops it as it would stop serve, unless its last good snapshot is
// used: then it says so on stderr and prints the snapshot's values.
func showConfig(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr) // named as serve's, so that errors read the same
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: lapse config [--config FILE] [serve flags]\n\n"+
			"Prints the flags of lapse serve: value and source (default, file FILE:LINE, env LAPSE_X or flag).\n")
		fs.PrintDefaults()
	}
	cfg, err := loadFlags(fs, serveSettings, &options{}, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}
	for _, w := range cfg.warnings() {
		fmt.Fprintln(stderr, "lapse: warning:", w)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		shown := cfg.settings[f.Name].shown(f.Value.String())
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, quoteBlank(shown), cfg.Sources[f.Name])
	})
	return tw.Flush()
}

// quoteBlank quotes a value that would not show in a column: empty, or with
// blanks.
func quoteBlank(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n") {
		return strconv.Quote(s)
	}
	return s
}
