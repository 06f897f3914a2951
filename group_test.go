package lapse_test

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestMaskMethod: a payment method is shown by its last 4 characters at
// most, and a short one not even by those.
func TestMaskMethod(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"tok_visa_4242", "****4242"},
		{"12345678", "****5678"},
		{"1234567", "****"},
		{"tok", "****"},
		{"", "****"},
		{"钱包号码一二三四五六", "****三四五六"},
	} {
		if got := lapse.MaskMethod(c.in); got != c.want {
			t.Errorf("MaskMethod(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	m := &lapse.GroupMember{Method: "tok_visa_4242"}
	if got := m.Masked(); got.Method != "****4242" || m.Method != "tok_visa_4242" {
		t.Errorf("Masked: %q, and the member's own %q", got.Method, m.Method)
	}
}

// TestAuditMaskParams: a join's method is masked in its audit row's
// parameters, in whatever case its key came, a row already masked is kept
// byte for byte, and other actions' parameters are left alone.
func TestAuditMaskParams(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ action, in, want string }{
		{"group.join", `{"user_id":"u","method":"tok_visa_4242"}`, `{"method":"****4242","user_id":"u"}`},
		{"group.join", `{"user_id":"u","METHOD":"tok_visa_4242"}`, `{"METHOD":"****4242","user_id":"u"}`},
		{"group.join", `{"method":7}`, `{"method":"****"}`},
		{"group.join", `{"user_id": "u", "method": "****4242"}`, `{"user_id": "u", "method": "****4242"}`},
		{"group.join", `{"user_id":"u"}`, `{"user_id":"u"}`},
		{"order.create", `{"method":"tok_visa_4242"}`, `{"method":"tok_visa_4242"}`},
	} {
		if got := string(lapse.AuditMaskParams(c.action, []byte(c.in))); got != c.want {
			t.Errorf("AuditMaskParams(%s, %s) = %s, want %s", c.action, c.in, got, c.want)
		}
	}
	if got := string(lapse.AuditMaskParams("group.join", []byte(`["tok_visa_4242"]`))); strings.Contains(got, "tok_visa") {
		t.Errorf("AuditMaskParams of an array = %s", got)
	}
}
