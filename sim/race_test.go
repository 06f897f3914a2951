//go:build race

package sim_test

// raceEnabled: the race detector slows a run about tenfold, so the default
// run is smaller.
const raceEnabled = true
