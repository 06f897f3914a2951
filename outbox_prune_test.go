package lapse

import (
	"errors"
	"testing"
	"time"
)

func TestOutboxPruneParamsValidate(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := (&OutboxPruneParams{Before: at, Limit: 1}).Validate(); err != nil {
		t.Errorf("a valid step: %v", err)
	}
	for field, p := range map[string]OutboxPruneParams{
		"before": {Limit: 1},
		"from":   {Before: at, From: -1, Limit: 1},
		"limit":  {Before: at},
	} {
		var e *Error
		if err := p.Validate(); !errors.As(err, &e) || e.Code != EINVALID || e.Field != field {
			t.Errorf("Validate(%+v) = %v, want EINVALID on %s", p, err, field)
		}
	}
}
