package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
)

// errCloseFailed makes lapse exit 1: a close batch ended with orders it
// could not close.
var errCloseFailed = errors.New("some orders could not be closed")

const closeUsage = `Usage: lapse close (--order NO[,NO…]… | NO… | --user ID | --from T --to T) [--flow F] [--dry-run] [--reason R] [serve flags]

Closes orders by hand, when automation failed: each through its flow, as its
deadline would (the deadline event, fired_by operator, with its log row, its
outbox events and what they release: stock, coupons). An order whose customer
started paying is settled with its payment provider first. It previews the
count and a sample, then closes them all as one batch, with its counts and
audit rows; killed part way, the same command carries on with the batch.
What the closes release is delivered by lapse serve, as every close's is.

T is an RFC 3339 time (2026-11-29T09:00:00Z): --from inclusive, --to exclusive.
--reason is required unless --dry-run.

lapse close takes every flag of lapse serve (and its --config file and LAPSE_*
variables) and builds the engine serve runs from them: give it the same ones,
so that it runs the same flows and subscribers and asks the same payment
providers. It acts with the database's own credentials, as the admin
"cli:<OS user>": whoever can reach the database is admin, and four eyes do
not apply to it. The same as POST /v1/closes.

`

// closeOrders is lapse close.
func closeOrders(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("close", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, closeUsage)
		fs.PrintDefaults()
	}
	o := &options{}
	cfg, err := loadFlags(fs, closeSettings, o, args)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	cfg.Log(log)
	sel, err := o.args.selector(fs.Args())
	if err != nil {
		return err
	}
	if !o.args.dryRun && strings.TrimSpace(o.args.reason) == "" {
		return fmt.Errorf("close: give --reason (why these orders are closed by hand), or --dry-run")
	}
	// Refused here, before anything is read: a batch refuses it too, but
	// none starts when nothing is left to close or a batch is resumed.
	if err := lapse.CheckReason("reason", o.args.reason); err != nil {
		return fmt.Errorf("close: --%s", lapse.ErrorMessage(err))
	}

	flowSet, err := loadFlows(o.flowsDir)
	if err != nil {
		return err
	}
	if err := o.pf.applyGrace(flowSet); err != nil {
		return err
	}
	store, err := openExisting(ctx, o.db)
	if err != nil {
		return err
	}
	defer store.Close()
	pays, err := o.pf.build(ctx, "", store, log)
	if err != nil {
		return err
	}
	if len(pays.engine.Providers) == 0 {
		log.Warn("no payment provider port is configured (--sandbox, --payment-providers): an order whose customer started paying is closed without asking the provider; give lapse close the payment flags serve runs with")
	}
	subs, err := o.sf.fanOut(ctx)
	if err != nil {
		return err
	}
	eng, err := engine.New(store, flowSet, engine.Config{Logger: log, Subscriptions: subs,
		StockLedger: o.sf.stockLedger, CouponLedger: o.sf.couponLedger, Payments: pays.engine})
	if err != nil {
		return err
	}
	closer, err := closes.New(eng, store)
	if err != nil {
		return err
	}

	pv, err := closer.Preview(ctx, sel)
	if err != nil {
		return err
	}
	printPreview(stdout, pv)
	if o.args.dryRun {
		fmt.Fprintln(stdout, "dry run: nothing was changed")
		return nil
	}

	by := cliPrincipal().Entry(closes.ActionBatch, "close", nil)
	b, err := closer.FindRunning(ctx, sel)
	switch {
	case err != nil:
		return err
	case b != nil:
		fmt.Fprintf(stdout, "resuming batch %d, started %s by %s (reason %q): %d of %d orders settled\n",
			b.ID, when(b.CreatedAt), b.CreatedBy, b.Reason, b.Closed+b.Skipped+b.Failed, b.Total)
		if o.args.reason != b.Reason {
			// Its orders close as the batch started them, for the reason
			// its audit row and its first orders' rows already give.
			fmt.Fprintf(stdout, "the batch keeps the reason it was started with; --reason %q is not used\n", o.args.reason)
		}
	case pv.Count == 0:
		fmt.Fprintln(stdout, "nothing to close")
		return nil
	default:
		if b, err = closer.Start(ctx, sel, o.args.reason, by, nil, pv); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "batch %d: closing %d orders\n", b.ID, b.Total)
	}

	bar := newProgress(stderr)
	got, err := closer.Run(ctx, b.ID, by, bar.show)
	bar.end()
	if err != nil {
		if got != nil {
			err = fmt.Errorf("batch %d stopped with %d of %d orders settled; run the same command again to carry on: %w",
				b.ID, got.Closed+got.Skipped+got.Failed, got.Total, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "batch %d done: %d orders, %d closed, %d skipped (no longer closable), %d failed\n",
		got.ID, got.Total, got.Closed, got.Skipped, got.Failed)
	if got.Failed == 0 {
		return nil
	}
	var failed []*lapse.CloseItem
	if as, ok := store.(lapse.AccessStore); ok {
		if failed, err = as.CloseItemList(ctx, got.ID, lapse.CloseItemFailed, "", 20); err != nil {
			return err
		}
	}
	for _, it := range failed {
		fmt.Fprintf(stdout, "  %s: %s\n", it.OrderNo, lapse.CleanReason(it.Detail))
	}
	if got.Failed > int64(len(failed)) {
		fmt.Fprintf(stdout, "  … and %d more (GET /v1/closes/%d)\n", got.Failed-int64(len(failed)), got.ID)
	}
	return fmt.Errorf("%w: %d of batch %d; run the same command again to try them", errCloseFailed, got.Failed, got.ID)
}

// selector is the orders the arguments choose: --order and the order
// numbers after the flags, --user, or --from and --to; and --flow.
func (a *toolArgs) selector(positional []string) (*closes.Selector, error) {
	sel := &closes.Selector{UserID: a.user, Flow: a.flow}
	sel.OrderNos = splitList(a.orders)
	for _, p := range positional {
		if strings.HasPrefix(p, "-") {
			return nil, fmt.Errorf("close: %s comes after an order number: give the flags before the order numbers", p)
		}
		sel.OrderNos = append(sel.OrderNos, splitList(p)...)
	}
	for _, t := range []struct {
		flag, text string
		dst        **time.Time
	}{{"from", a.from, &sel.From}, {"to", a.to, &sel.To}} {
		if t.text == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.text)
		if err != nil {
			return nil, fmt.Errorf("--%s %q: want an RFC 3339 time such as 2026-11-29T09:00:00Z", t.flag, t.text)
		}
		*t.dst = &v
	}
	if len(sel.OrderNos) == 0 && sel.UserID == "" && sel.From == nil && sel.To == nil {
		return nil, fmt.Errorf("close: choose the orders: --order NO,…, --user ID, or --from T --to T")
	}
	if err := sel.Validate(); err != nil {
		return nil, fmt.Errorf("close: %s (choose by --order, --user, or --from and --to)", lapse.ErrorMessage(err))
	}
	return sel, nil
}

// printPreview prints what a close would close: the count, what it leaves,
// and a sample.
func printPreview(w io.Writer, pv *closes.Preview) {
	fmt.Fprintf(w, "%d orders to close", pv.Count)
	if pv.Skipped > 0 {
		fmt.Fprintf(w, "; %d more chosen are left as they are (paid, closed, not waiting for payment, not found, or of another flow)", pv.Skipped)
	}
	fmt.Fprintln(w)
	if len(pv.Sample) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tFLOW\tSTATE\tUSER\tAMOUNT\tCREATED\tDEADLINE")
	for _, o := range pv.Sample {
		deadline := "-"
		if o.DeadlineAt != nil {
			deadline = when(*o.DeadlineAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\t%s\t%s\n", cell(o.OrderNo), o.Flow, o.State, cell(o.UserID),
			strconv.FormatInt(o.Amount, 10), o.Currency, when(o.CreatedAt), deadline)
	}
	tw.Flush()
	if pv.Count > int64(len(pv.Sample)) {
		fmt.Fprintf(w, "… and %d more\n", pv.Count-int64(len(pv.Sample)))
	}
}
