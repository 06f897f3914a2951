// Package sim is a seeded simulator of Lapse: one seed drives, reproducibly,
// a simulated clock and a random workload over the real engine on a real
// store, with faults at every edge, and an auditor checks the invariants of
// SPEC §5 (S1–S8) after every step and at the end.
//
// Run drives one seed. The workload: customers create checkout,
// membership and group-buy orders, submit, start paying, pay at the
// provider (sometimes the wrong amount), cancel, extend and shorten
// deadlines, refund (partly or in full, with and without keys) and join
// groups; the clock moves on (seconds to half an hour); the claimer (RunOnce,
// Sweep) and the deliverer (RunOnce) run when the seed says, never in the
// background. See README.md for the faults and the checks, and for what is
// not simulated.
package sim
