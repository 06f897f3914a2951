package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/lapsehq/lapse"
)

const auditUsage = `Usage:
  lapse audit verify   walk the whole chain; exit 1 naming the first row that does not match
  lapse audit list [--limit N] [--target T] [--actor A]   rows, newest first

Each takes --db DSN and --config FILE.
`

// audit reads the audit log.
func audit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return errUsage
	}
	switch args[0] {
	case "verify":
		return auditVerify(ctx, args[1:], stdout, stderr)
	case "list":
		return auditList(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, auditUsage)
		return nil
	default:
		fmt.Fprint(stderr, auditUsage)
		return fmt.Errorf("audit: unknown command %q", args[0])
	}
}

// auditVerify checks every row of the audit log against its hash and the
// row before it (lapse.AuditVerify).
func auditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, svc, rest, done, err := accessTool(ctx, "audit verify", dbSettings, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) > 0 {
		return fmt.Errorf("audit verify: unexpected argument %q", rest[0])
	}
	n, err := lapse.AuditVerify(ctx, svc.Store(), 1000)
	var brk *lapse.AuditBreak
	switch {
	case errors.As(err, &brk):
		fmt.Fprintf(stdout, "%d rows verified before row %d\n", n, brk.Seq)
		return brk // lapse exits 1 for it
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "%d rows verified: every row matches its hash and chains to the one before it\n", n)
	return nil
}

func auditList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, svc, rest, done, err := accessTool(ctx, "audit list", auditListSettings, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	if len(rest) > 0 {
		return fmt.Errorf("audit list: unexpected argument %q", rest[0])
	}
	if o.args.limit < 1 {
		return fmt.Errorf("--limit must be at least 1")
	}
	rows, err := svc.Store().AuditList(ctx, &lapse.AuditListParams{Descending: true, Limit: o.args.limit,
		Target: o.args.target, ActorName: o.args.actor})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tTARGET\tRESULT\tREASON\tAPPROVER\tBATCH")
	for _, e := range rows {
		batch := "-"
		if e.Batch != 0 {
			batch = strconv.FormatInt(e.Batch, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, when(e.At), cell(e.ActorKind+":"+e.ActorName),
			e.Action, cell(e.Target), cell(e.Result), cell(e.Reason), cell(e.Approver), batch)
	}
	return tw.Flush()
}

// cell is text as a column of a table shows it: on one line, "-" when
// empty, quoted when it has blanks.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return quoteBlank(lapse.CleanReason(s))
}
