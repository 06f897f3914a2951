// Command lapse runs the Lapse service and its tools.
//
//	lapse serve   [--db DSN] [--http ADDR] …   run the API and the deadline engine
//	lapse migrate [--db DSN]                   apply the database migrations
//	lapse reconcile [--db DSN]                 payments against orders; exit 1 if they differ
//	lapse flows   [--flows DIR] [NAME]         list the flows, or print one's state diagram
//	lapse config  [--config FILE] [flags]      the flags of serve: value and source
//	lapse apikey  create|list|revoke           the API keys of the services that call Lapse
//	lapse operator add|list|disable            the people who log in, with their TOTP enrolment
//	lapse audit   verify|list                  check the audit log's chain; exit 1 if it is broken
//	lapse close   --order NO… | --user ID | --from T --to T   close orders by hand, as one batch
//	lapse bench   [--db DSN] [--orders N] …     how fast the engine closes a backlog, in a scratch schema
//
// DSN is a path to an SQLite file (the default, ./lapse.db), a postgres://
// URL or a mysql://user:password@host:3306/database URL. Every flag can also
// be set in the environment as LAPSE_<FLAG>, e.g. LAPSE_DB, LAPSE_HTTP, and
// in a YAML file named by --config FILE (LAPSE_CONFIG), keyed by flag name;
// the command line wins over the environment, which wins over the file. The
// arguments of a tool (lapse close --reason, lapse apikey create --name)
// come from the command line only.
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
                          the people who log in; add reads a password from stdin (or makes one)
                          and prints the TOTP enrolment (otpauth URI and QR code)
  lapse audit verify | list [--limit N] [--target T] [--actor A]
                          check the audit log's chain (exit 1 naming the first bad row), or show it
  lapse close (--order NO,… | --user ID | --from T --to T) [--flow F] [--dry-run] [--reason R]
                          preview, then close orders by hand as one resumable batch
  lapse bench [--db DSN] [--orders N] [--not-due F] [--subscribers 0|2] [--batch 500] [--workers 2] [--keep]
                          how fast the engine closes a backlog of due orders, in a scratch schema it drops

Every command takes --config FILE: a YAML file of flag values (sweep-interval: 5s).
apikey, operator, audit and close act on the database (--db) with its own
credentials, as the admin "cli:<OS user>": whoever can reach the database is admin.
Run "lapse <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			// A lapse.Error names the package itself: once is enough.
			fmt.Fprintln(os.Stderr, "lapse:", strings.TrimPrefix(err.Error(), "lapse: "))
		}
		// 1: the command ran and found something wrong; 2: it could not.
		var broken *lapse.AuditBreak
		if errors.Is(err, errUnreconciled) || errors.As(err, &broken) || errors.Is(err, errCloseFailed) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
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
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
