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
  lapse audit verify [--checkpoint ROW:HASH]   seal the rows not sealed yet, walk the whole chain, print its
                       checkpoint; exit 1 naming the first row that does not match, or when the chain no longer
                       holds the row of an earlier checkpoint with its hash
  lapse audit list [--limit N] [--target T] [--actor A]   rows, newest first (SEQ - : not sealed yet)

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

// auditVerify seals the rows that are not sealed yet (lapse.AuditSeal), as
// the sealer of a server that is stopped has not, and checks every sealed
// row of the audit log against its hash and the row before it
// (lapse.AuditVerify). When a running server's sealer holds the log's head
// it leaves the sealing to it, and says how many rows it did not check.
func auditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, svc, _, done, err := accessTool(ctx, "audit verify", auditVerifySettings, false, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	var cp *lapse.AuditCheckpoint
	if o.args.checkpoint != "" {
		c, err := lapse.ParseAuditCheckpoint(o.args.checkpoint)
		if err != nil {
			return fmt.Errorf("audit verify: --%s", lapse.ErrorMessage(err))
		}
		cp = &c
	}
	as := svc.Store()
	store, ok := as.(lapse.Store)
	if !ok {
		return fmt.Errorf("audit verify: the store %T cannot be sealed", as)
	}
	// A head that is gone leaves nothing to seal onto: the walk below
	// names it, as a break of the chain.
	if _, err := lapse.AuditSeal(ctx, store, 0); err != nil && !errors.Is(err, lapse.ErrAuditBusy) && !errors.Is(err, lapse.ErrAuditHeadGone) {
		return err
	}
	c, err := lapse.AuditVerify(ctx, as, 1000)
	var brk *lapse.AuditBreak
	switch {
	case errors.As(err, &brk):
		fmt.Fprintf(stdout, "%d rows verified before row %d\n", c.Rows, brk.Seq)
		return brk // lapse exits 1 for it
	case err != nil:
		return err
	}
	if cp != nil {
		if err := lapse.AuditCheckpointHolds(ctx, as, c, *cp); err != nil {
			fmt.Fprintf(stdout, "%d rows verified, but not the checkpoint %s\n", c.Rows, cp)
			return err // an *AuditBreak: lapse exits 1 for it
		}
	}
	fmt.Fprintf(stdout, "%d rows verified: every row matches its hash and chains to the one before it\n", c.Rows)
	if cp != nil {
		fmt.Fprintf(stdout, "the chain holds row %d of the checkpoint with its hash\n", cp.Seq)
	}
	if c.Rows > 0 {
		fmt.Fprintf(stdout, "checkpoint: %s (keep it outside this database; --checkpoint checks it later)\n", c.Checkpoint())
	}
	if c.Unsealed > 0 {
		fmt.Fprintf(stdout, "%d newer rows are not sealed yet (the oldest from %s), which the chain does not cover yet: a running server's sealer is sealing them\n",
			c.Unsealed, when(c.OldestUnsealed))
	}
	return nil
}

func auditList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, svc, _, done, err := accessTool(ctx, "audit list", auditListSettings, false, args, stderr)
	if err != nil {
		return err
	}
	defer done()
	rows, err := svc.Store().AuditList(ctx, &lapse.AuditListParams{Descending: true, Limit: o.args.limit,
		Target: o.args.target, ActorName: o.args.actor})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSEQ\tAT\tACTOR\tACTION\tTARGET\tRESULT\tREASON\tAPPROVER\tBATCH")
	for _, e := range rows {
		seq, batch := "-", "-"
		if e.Sealed() {
			seq = strconv.FormatInt(e.Seq, 10)
		}
		if e.Batch != 0 {
			batch = strconv.FormatInt(e.Batch, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, seq, when(e.At), cell(e.ActorKind+":"+e.ActorName),
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
