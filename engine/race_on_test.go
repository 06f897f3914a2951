//go:build race

package engine_test

// raceEnabled: the race detector slows the engine about tenfold, so the
// longest randomized tests run fewer cases under it.
const raceEnabled = true
