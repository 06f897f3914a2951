// Package engine is the flow engine of Lapse: every change of an order's state
// goes through it. Engine plans changes with the order's flow and applies them
// through the store as guarded transactions; Claimer is the background service
// that fires deadlines, Deliverer the one that hands events to their
// subscribers, and Prober the synthetic probe that checks, every interval,
// that an order of its own goes through them all (prober.go, probe_run.go).
// HeldMatcher applies the payments held without their order once the order
// exists, and puts them on the operators' desk after their window
// (held_payment.go, held_matcher.go).
//
// # Layout
//
// Engine (engine.go) creates orders, fires events at them and moves their
// deadlines (order.go); every guarded change of an order runs through one
// read–plan–write loop, changeOrder (order_change.go). The rest of its API
// delegates to the features, each a small type that serves the flows that
// use it and owns its subscriptions, its API and its config:
//
//   - stockLedger (stock.go) and couponLedger (coupon.go), the built-in
//     ledgers, with what they share in ledger.go;
//   - payments (payment.go, intent.go, refund.go, order_refund.go,
//     reconcile.go): callbacks, intents, late payments, merchant refunds;
//   - groupBuys (group.go, group_settle.go): joins and settlements;
//   - cardIssuing (issue.go, card.go): issuing and revoking cards.
//
// # Where a new flow feature goes
//
// A new feature (say, confirming receipt seven days after shipping) is a
// type in a file of its own that implements feature (feature.go): serves
// names the flows it acts on by their own fields, and subscriptions returns
// the built-in subscriptions that carry out its effects. New builds it from
// its part of Config and appends it to Engine.features, and one Engine field
// points to it for the Engine methods of its API, which delegate to it. The
// optional interfaces in feature.go let it check or hold something when an
// order is created, name the event of an operator's Retry, report money to
// Reconcile, or, switched off, wind down what it started (windingDown); it
// changes an order's state through Fire or changeOrder.
package engine
