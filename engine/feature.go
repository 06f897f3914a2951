package engine

import (
	"context"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// A feature is one thing that flows do beyond moving through their states:
// the stock and coupon ledgers, payments and refunds, group buys, issuing
// cards. Each is a small type in its own files that New builds from the
// Config. It serves the flows that use it (a flow says so in its own
// fields: Holds, Pays, Group, Issues) and does nothing for the others; it
// owns the built-in subscriptions that carry out its effects, and its part
// of the API, which Engine's methods delegate to.
//
// What the engine does for every order a feature joins in through the
// optional interfaces below; Engine finds them by type assertion, in the
// order of Engine.features.
type feature interface {
	// serves reports whether the feature acts on the orders of flow f.
	serves(f *lapse.Flow) bool
	// subscriptions returns the built-in subscriptions that carry out the
	// feature's effects for flows, the flows of the engine it serves (at
	// least one).
	subscriptions(flows []*lapse.Flow) []Subscription
}

// creationCheck is a feature that checks requests to create orders of the
// flows it serves before anything is written. Its error is EINVALID and
// names the field.
type creationCheck interface {
	checkCreate(req *lapse.OrderCreate) error
}

// creationHold is a feature that holds something for the new orders of the
// flows it serves, in the transaction that creates the order, so that the
// order and what it holds commit together or neither does.
type creationHold interface {
	// holds reports whether creating o holds anything of the feature.
	holds(o *lapse.Order) bool
	// hold holds it through tx; a refusal is a conflict naming the field.
	hold(ctx context.Context, tx lapse.Store, o *lapse.Order, now time.Time) error
}

// operatorRetry is a feature whose automation may give up on an order, for
// an operator to start again (Engine.Retry) by firing the event retryEvent
// names for flow f, or "" when f has none of the feature's.
type operatorRetry interface {
	retryEvent(f *lapse.Flow) lapse.Event
}

// retryCheck is an operatorRetry that refuses to retry an order its retry
// could not help. checkRetry runs in the transaction of the retry's
// transition, through tx, with o as it was read (its ID and OrderNo), and
// returns the error that refuses the retry and rolls the transition back.
type retryCheck interface {
	checkRetry(ctx context.Context, tx lapse.Store, f *lapse.Flow, o *lapse.Order) error
}

// reviveCheck is a feature that refuses to revive a dead delivery of one of
// its subscriptions (Engine.RetryDelivery) when the revival could not do
// what the delivery died of not doing. checkRevive runs through tx: the
// transaction that revives d, before d is made pending, where its error
// refuses the revive and rolls the transaction back; or the engine's
// store, for Engine.Revivable, which only asks.
type reviveCheck interface {
	checkRevive(ctx context.Context, tx lapse.Store, d *lapse.Delivery) error
}

// reconciler is a feature other than payments that takes money for the
// orders of the flows it serves (charging group members), and says in a
// reconciliation (Engine.Reconcile) where the money of flow f's orders went.
type reconciler interface {
	reconcile(ctx context.Context, rec *Reconciliation, f *lapse.Flow) error
}

// windingDown is a feature that is switched off but may still have work of
// its own in the database, taken on while it was on: what orders hold of
// the built-in ledgers. It serves no new order (serves is false), and keeps
// the subscriptions that finish that work for the flows windsDown names, so
// that switching it off never forgets what it started (S4).
type windingDown interface {
	windsDown(f *lapse.Flow) bool
}

// subscribed returns the flows of fs whose events ft's subscriptions
// receive, in the order of fs: those it serves, and those it winds down.
func subscribed(ft feature, fs []*lapse.Flow) []*lapse.Flow {
	w, _ := ft.(windingDown)
	var out []*lapse.Flow
	for _, f := range fs {
		if ft.serves(f) || (w != nil && w.windsDown(f)) {
			out = append(out, f)
		}
	}
	return out
}

// served returns the flows of fs that ft serves, in the order of fs.
func served(ft feature, fs []*lapse.Flow) []*lapse.Flow {
	var out []*lapse.Flow
	for _, f := range fs {
		if ft.serves(f) {
			out = append(out, f)
		}
	}
	return out
}

// flowNames returns the names of fs.
func flowNames(fs []*lapse.Flow) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// addNew appends to *to each of types that it does not hold yet.
func addNew(to *[]string, types ...string) {
	for _, t := range types {
		if !slices.Contains(*to, t) {
			*to = append(*to, t)
		}
	}
}
