package lapse

import (
	"errors"
	"testing"
	"time"
)

func TestOutboxPruneParamsValidate(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := (&OutboxPruneParams{Before: at, Now: at, Limit: 1}).Validate(); err != nil {
		t.Errorf("a valid step: %v", err)
	}
	for _, c := range []struct {
		field string
		p     OutboxPruneParams
	}{
		{"before", OutboxPruneParams{Now: at, Limit: 1}},
		{"now", OutboxPruneParams{Before: at, Limit: 1}},
		{"now", OutboxPruneParams{Before: at, Now: at.Add(-time.Millisecond), Limit: 1}},
		{"from", OutboxPruneParams{Before: at, Now: at, From: -1, Limit: 1}},
		{"limit", OutboxPruneParams{Before: at, Now: at}},
	} {
		var e *Error
		if err := c.p.Validate(); !errors.As(err, &e) || e.Code != EINVALID || e.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want EINVALID on %s", c.p, err, c.field)
		}
	}
}
