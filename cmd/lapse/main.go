// Command lapse runs the Lapse service and its tools.
//
//	lapse serve   [--db DSN] [--http ADDR] …   run the API and the deadline engine
//	lapse migrate [--db DSN]                   apply the database migrations
//	lapse reconcile [--db DSN]                 payments against orders; exit 1 if they differ
//	lapse flows   [--flows DIR] [NAME]         list the flows, or print one's state diagram
//	lapse config  [--config FILE] [flags]      the flags of serve: value and source
//	lapse apikey  create|list|revoke           the API keys of the services that call Lapse
//	lapse operator add|list|disable|enable|role|reset
//	                                           the people who log in, with their TOTP enrolment
//	lapse audit   verify|list                  check the audit log's chain; exit 1 if it is broken
//	lapse close   --order NO… | --user ID | --from T --to T   close orders by hand, as one batch
//	lapse bench   [--db DSN] [--orders N] …     how fast the engine closes a backlog, in a scratch schema
//	lapse demo    [--duration D] [--rate N]    live traffic with failures on a fresh embedded store, with a display
//	lapse version                              the version, the commit it was built from, the Go that built it
//
// DSN is a path to an SQLite file (the default, ./lapse.db), a postgres://
// URL or a mysql://user:password@host:3306/database URL. Every flag can also
// be set in the environment as LAPSE_<FLAG>, e.g. LAPSE_DB, LAPSE_HTTP, and
// in a YAML file named by --config FILE (LAPSE_CONFIG), keyed by flag name;
// the command line wins over the environment, which wins over the file. One
// file serves every command: each takes the keys of its own flags and checks
// the others. The arguments of a tool (lapse close --reason, lapse apikey
// create --name) come from the command line only. Flags may follow the
// positional arguments (lapse flows auto_confirm --flows DIR).
//
// lapse exits 0 when the command did its work (or printed the help that -h
// asked for), 1 when it ran and found something wrong (reconcile, audit
// verify, close), and 2 when it could not run: a bad flag, a missing
// argument, an error.
//
// The tools act on the database with its own credentials, as the OS user
// running them (access.CLI) with the admin scope: whoever can reach the
// database can change anything in it, so the command line needs no key,
// and four eyes and the second factor do not apply to it. They apply no
// migrations, and refuse an SQLite file that is not there. lapse bench
// leaves the database alone: it makes a scratch schema (a database on
// MySQL, a directory beside the file on SQLite), migrates and loads it, and
// drops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	_ "time/tzdata" // operators' time zones, on machines without a zone database

	"github.com/lapsehq/lapse"
)

const usage = `lapse runs order lifecycles with deadlines.

Usage:
  lapse serve   [flags]   run the HTTP API and the deadline engine
  lapse migrate [flags]   apply the database migrations and exit
  lapse reconcile [flags] check payments against orders; exit 1 when they do not add up
  lapse flows [flags] [NAME]  list the flows, or print the state diagram (Mermaid) of one
  lapse config [flags]    print the flags of serve with their values and where they come from
  lapse apikey create --name NAME --scopes SCOPES | list | revoke PREFIX
                          the API keys of the services that call Lapse; a new key is printed once
  lapse operator add --name NAME --role viewer|operator|admin | list | disable NAME
                 | enable NAME | role NAME ROLE | reset NAME
                          the people who log in; add and reset read a password from stdin (or
                          make one) and print the TOTP enrolment (otpauth URI and QR code)
  lapse audit verify | list [--limit N] [--target T] [--actor A]
                          check the audit log's chain (exit 1 naming the first bad row), or show it
  lapse close (--order NO,… | --user ID | --from T --to T) [--flow F] [--dry-run] [--reason R]
                          preview, then close orders by hand as one resumable batch
  lapse bench [--db DSN] [--orders N] [--not-due F] [--subscribers 0-8] [--batch 500] [--workers 2] [--keep]
                          how fast the engine closes a backlog of due orders, in a scratch schema it drops
  lapse demo [--duration D] [--rate N] [--db FILE] [--http ADDR]
                          live traffic with failures on a fresh SQLite file, through the API, with a
                          display; then a summary and lapse reconcile (exit 1 when it is not clean)
  lapse version           the version, the commit it was built from and the Go that built it

Every command takes --config FILE: a YAML file of flag values (sweep-interval: 5s),
the same file for all of them: each takes the keys of its own flags.
apikey, operator, audit and close act on the database (--db) with its own
credentials, as the admin "cli:<OS user>": whoever can reach the database is admin.
Run "lapse <command> -h" for the flags of a command.
`

func main() {
	setGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr), os.Stderr))
}

// errUsage is the error of a command line that names no command (lapse, or
// lapse apikey alone): the usage is printed already, and lapse exits 2.
var errUsage = errors.New("no command given")

// exitCode prints err, unless the help asked for or the usage says it
// already, and returns the exit status of lapse for it: 0 when the command
// did its work or printed the help that -h asked for; 1 when it ran and
// found something wrong; 2 when it could not run.
func exitCode(err error, stderr io.Writer) int {
	var broken *lapse.AuditBreak
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	// A lapse.Error names the package itself: once is enough.
	fmt.Fprintln(stderr, "lapse:", strings.TrimPrefix(err.Error(), "lapse: "))
	if errors.Is(err, errUnreconciled) || errors.As(err, &broken) || errors.Is(err, errCloseFailed) {
		return 1
	}
	return 2
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
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
	case "apikey":
		return apikey(ctx, args[1:], stdout, stderr)
	case "operator":
		return operator(ctx, args[1:], stdin, stdout, stderr)
	case "audit":
		return audit(ctx, args[1:], stdout, stderr)
	case "close":
		return closeOrders(ctx, args[1:], stdout, stderr)
	case "bench":
		return bench(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return showVersion(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
