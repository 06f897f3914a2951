package main

import (
	"math"
	"testing"
)

// TestDemoPickKeepsShares: from the first arrival on, every scenario has
// been started in its share of the arrivals so far, give or take one, so
// that a demo of a few seconds shows them all.
func TestDemoPickKeepsShares(t *testing.T) {
	tr := newDemoTraffic("", "", nil)
	started := map[string]int{}
	for n := 1; n <= 1000; n++ {
		started[tr.pick().name]++
		for _, sc := range demoScenarios {
			if d := float64(started[sc.name]) - sc.share*float64(n); math.Abs(d) > 1 {
				t.Fatalf("after %d arrivals, %d of %q, want %.2f give or take one", n, started[sc.name], sc.name, sc.share*float64(n))
			}
		}
	}
}
