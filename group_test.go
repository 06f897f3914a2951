package lapse_test

import (
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
