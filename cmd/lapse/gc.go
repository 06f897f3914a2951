package main

import (
	"os"
	"runtime/debug"
)

// defaultGOGC is the garbage collector's target that lapse runs with unless
// GOGC says otherwise. Its live heap is a few megabytes (the database holds
// the orders), so at Go's default of 100 the collector ran every few
// milliseconds under load and took about a third of the deadline engine's
// CPU; at 400 the heap stays within tens of megabytes (see the README's
// performance section for both).
const defaultGOGC = 400

// setGC applies defaultGOGC when GOGC is not set.
func setGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGOGC)
	}
}

// gcPercent is the garbage collector's target now in force.
func gcPercent() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}
