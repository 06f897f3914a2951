// Command lapse runs the Lapse service and its tools.
//
//	lapse serve   [--db DSN] [--http ADDR] …   run the API and the deadline engine
//	lapse migrate [--db DSN]                   apply the database migrations
//	lapse reconcile [--db DSN]                 payments against orders; exit 1 if they differ
//	lapse flows   [--flows DIR] [NAME]         list the flows, or print one's state diagram
//	lapse config  [--config FILE] [flags]      the flags of serve: value and source
//
// DSN is a path to an SQLite file (the default, ./lapse.db), a postgres://
// URL or a mysql://user:password@host:3306/database URL. Every flag can also
// be set in the environment as LAPSE_<FLAG>, e.g. LAPSE_DB, LAPSE_HTTP, and
// in a YAML file named by --config FILE (LAPSE_CONFIG), keyed by flag name;
// the command line wins over the environment, which wins over the file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `lapse runs order lifecycles with deadlines.

Usage:
  lapse serve   [flags]   run the HTTP API and the deadline engine
  lapse migrate [flags]   apply the database migrations and exit
  lapse reconcile [flags] check payments against orders; exit 1 when they do not add up
  lapse flows [flags] [NAME]  list the flows, or print the state diagram (Mermaid) of one
  lapse config [flags]    print the flags of serve with their values and where they come from

Every command takes --config FILE: a YAML file of flag values (sweep-interval: 5s).
Run "lapse <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "lapse:", err)
		}
		if errors.Is(err, errUnreconciled) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "migrate":
		return migrate(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return reconcile(ctx, args[1:], stdout, stderr)
	case "flows":
		return showFlows(args[1:], stdout, stderr)
	case "config":
		return showConfig(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
