package main

import (
	"fmt"
	"strconv"
	"time"
)

// A valueRange bounds the values of an int, float or duration setting. Its
// bounds are written as the setting's values are ("1s", "10000"); an empty
// one is no bound. Every value of the setting, from the command line, the
// environment, a config file or a reload, is checked against it
// (setting.check), so that a value out of range stops the command, or
// leaves a running lapse serve as it was, rather than being taken as a
// default or as something absurd.
type valueRange struct {
	min, max string
	above    bool   // min itself is refused: the value must be more than min
	off      string // a value outside the bounds that is taken too: the one that turns the setting off
}

// positive is the range of counts and durations that must be more than 0.
var positive = &valueRange{min: "0", above: true}

// atLeast is the range of values of min or more.
func atLeast(min string) *valueRange { return &valueRange{min: min} }

// between is the range of values from min to max.
func between(min, max string) *valueRange { return &valueRange{min: min, max: max} }

// orOff returns r, taking off too.
func (r *valueRange) orOff(off string) *valueRange {
	out := *r
	out.off = off
	return &out
}

// check returns why text, a value of kind k of the setting name, is out of
// r, or nil. A text that is not a value of k is left to the kind's own
// check.
func (r *valueRange) check(k kind, name, text string) error {
	if r == nil {
		return nil
	}
	v, err := rangeNumber(k, text)
	if err != nil {
		return nil
	}
	if r.off != "" {
		if off, err := rangeNumber(k, r.off); err == nil && v == off {
			return nil
		}
	}
	in := true
	if r.min != "" {
		min, err := rangeNumber(k, r.min)
		in = err == nil && (v > min || v == min && !r.above)
	}
	if in && r.max != "" {
		max, err := rangeNumber(k, r.max)
		in = err == nil && v <= max
	}
	if in {
		return nil
	}
	return fmt.Errorf("--%s must be %s", name, r)
}

// String says what r takes: "from 1 to 10000", "more than 0", "at least
// 1s, or 0s (off)".
func (r *valueRange) String() string {
	var s string
	switch {
	case r.min != "" && r.above && r.max != "":
		s = "more than " + r.min + " and at most " + r.max
	case r.min != "" && r.max != "":
		s = "from " + r.min + " to " + r.max
	case r.min != "" && r.above:
		s = "more than " + r.min
	case r.min != "":
		s = "at least " + r.min
	default:
		s = "at most " + r.max
	}
	if r.off != "" {
		s += ", or " + r.off + " (off)"
	}
	return s
}

// rangeNumber is text, a value of kind k, as a number to compare: a
// duration in nanoseconds.
func rangeNumber(k kind, text string) (float64, error) {
	switch k {
	case kindInt:
		n, err := strconv.Atoi(text)
		return float64(n), err
	case kindFloat:
		return strconv.ParseFloat(text, 64)
	case kindDuration:
		d, err := time.ParseDuration(text)
		return float64(d), err
	}
	return 0, fmt.Errorf("a %s has no range", k)
}
