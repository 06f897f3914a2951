package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"

	"github.com/lapsehq/lapse/engine"
)

// errUnreconciled makes lapse exit 1: the report found money that does not
// add up.
var errUnreconciled = errors.New("payments and orders do not reconcile")

// reconcile prints payments against orders: per currency, what was captured
// and where it went, then every payment that is not applied, refunded or in
// review and every paid order without exactly one applied payment.
func reconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reconcile", stderr)
	var o options
	if err := parseFlags(fs, reconcileSettings, &o, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("reconcile: unexpected argument %q (the database is --db)", fs.Arg(0))
	}
	flowSet, err := loadFlows(o.flowsDir)
	if err != nil {
		return err
	}
	s, err := openExisting(ctx, o.db) // a report must not create the database it reports on
	if err != nil {
		return err
	}
	defer s.Close()
	// A report moves nothing: what an engine says at start about the work
	// it will do (a ledger that is off winding down) is serve's to say.
	e, err := engine.New(s, flowSet, engine.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	rec, err := e.Reconcile(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d payments and %d group-buy charges in %s\n", rec.Payments, rec.GroupCharges, hidePasswords(o.db))
	if rec.Held > 0 {
		fmt.Fprintf(stdout, "%d payments held without their order, counted as in review until refunded\n", rec.Held)
	}
	for _, cur := range slices.Sorted(maps.Keys(rec.Totals)) {
		t := rec.Totals[cur]
		if t.Overflow {
			// Wrapped sums would print as an equation, one that may even
			// hold: the issue below says why there is none.
			fmt.Fprintf(stdout, "%s (minor units): the totals do not fit in 64 bits, and are not shown\n", plain(cur))
			continue
		}
		fmt.Fprintf(stdout, "%s (minor units): captured %d = applied %d + refunded %d + in review %d + not settled %d\n",
			plain(cur), t.Captured, t.Applied, t.Refunded, t.Review, t.Open)
	}
	// An issue's ids and words are as a provider's callback or a caller
	// sent them: printed plain, so that none can dress up the report.
	for _, is := range rec.Issues {
		if is.TxnID == "" && is.OrderNo == "" { // of the totals, not of an order
			fmt.Fprintf(stdout, "%s\n", plain(is.Problem))
			continue
		}
		if is.TxnID == "" {
			fmt.Fprintf(stdout, "order %s: %s\n", plain(is.OrderNo), plain(is.Problem))
			continue
		}
		fmt.Fprintf(stdout, "payment %s/%s of order %s: %s\n", plain(is.Provider), plain(is.TxnID), plain(is.OrderNo), plain(is.Problem))
	}
	if len(rec.Issues) > 0 {
		return fmt.Errorf("%w: %d issues", errUnreconciled, len(rec.Issues))
	}
	fmt.Fprintln(stdout, "every payment is applied to one paid order, refunded, or in review")
	return nil
}
