package lapse_test

import (
	"errors"
	"strings"
	"time"

	"testing"

	"github.com/lapsehq/lapse"
)

func TestReviewResolveParamsValidate(t *testing.T) {
	ok := lapse.ReviewResolveParams{ID: 1, At: at, By: "operator:alice", Note: "refunded by hand\n退款已处理"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	for _, p := range []lapse.ReviewResolveParams{
		{DeliveryID: 2, At: at, By: "api"},
		{OrderID: 3, At: at, By: "api", Note: strings.Repeat("注", lapse.MaxNoteLen/3)},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	for _, c := range []struct {
		field string
		edit  func(p *lapse.ReviewResolveParams)
	}{
		{"id", func(p *lapse.ReviewResolveParams) { p.ID = 0 }},
		{"id", func(p *lapse.ReviewResolveParams) { p.DeliveryID = 2 }},
		{"id", func(p *lapse.ReviewResolveParams) { p.ID, p.OrderID = 0, -3 }},
		{"at", func(p *lapse.ReviewResolveParams) { p.At = time.Time{} }},
		{"by", func(p *lapse.ReviewResolveParams) { p.By = "" }},
		{"by", func(p *lapse.ReviewResolveParams) { p.By = "alice\n" }},
		{"by", func(p *lapse.ReviewResolveParams) { p.By = strings.Repeat("a", lapse.MaxReasonLen+1) }},
		{"note", func(p *lapse.ReviewResolveParams) { p.Note = strings.Repeat("a", lapse.MaxNoteLen+1) }},
		{"note", func(p *lapse.ReviewResolveParams) { p.Note = "tab\there" }},
		{"note", func(p *lapse.ReviewResolveParams) { p.Note = "crlf\r\n" }},
		{"note", func(p *lapse.ReviewResolveParams) { p.Note = "nul\x00" }},
		{"note", func(p *lapse.ReviewResolveParams) { p.Note = "c1\u0085" }},
		{"note", func(p *lapse.ReviewResolveParams) { p.Note = "bad \xff" }},
	} {
		p := ok
		c.edit(&p)
		var e *lapse.Error
		if err := p.Validate(); lapse.ErrorCode(err) != lapse.EINVALID || !errors.As(err, &e) || e.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want invalid %s", p, err, c.field)
		}
	}
}
