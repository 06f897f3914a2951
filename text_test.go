package lapse

import (
	"errors"
	"strings"
	"testing"
)

func TestCleanReason(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"refused: card declined", "refused: card declined"},
		{"line one\nline two\tend", "line one line two end"},
		{"nul\x00bell\x07", "nul\uFFFDbell\uFFFD"},
		{"bad \xff utf-8", "bad \uFFFD utf-8"},
		// Bidirectional controls would show the text after them reversed:
		// "paid 0001 CNY" read as "paid 1000 CNY".
		{"paid \u202E1000\u202C CNY", "paid \uFFFD1000\uFFFD CNY"},
		{"a\u2066b\u2069c\u200Fd\u061Ce", "a\uFFFDb\uFFFDc\uFFFDd\uFFFDe"},
		{"line\u2028separator\u2029paragraph", "line separator paragraph"},
		{"退款失败：余额不足", "退款失败：余额不足"},
		{"مرفوض", "مرفوض"},
	} {
		if got := CleanReason(c.in); got != c.want {
			t.Errorf("CleanReason(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("é", MaxReasonLen)
	if got := CleanReason(long); len(got) > MaxReasonLen || !strings.HasSuffix(got, "…") {
		t.Errorf("CleanReason of %d bytes = %d bytes %q…, want at most %d ending in …", len(long), len(got), got[:10], MaxReasonLen)
	}
}

func TestCheckReasonRefusesBidiControls(t *testing.T) {
	if err := CheckReason("reason", "customer asked"); err != nil {
		t.Fatalf("CheckReason(plain) = %v", err)
	}
	for _, s := range []string{"refund \u202Eevil", "x\u2067y", "two\nlines"} {
		if err := CheckReason("reason", s); ErrorCode(err) != EINVALID {
			t.Errorf("CheckReason(%q) = %v, want invalid", s, err)
		}
		// A short reason refused for what it holds says what that is, not
		// only the length it is well within.
		if err := CheckReason("reason", s); err == nil || !strings.Contains(err.Error(), "control characters") {
			t.Errorf("CheckReason(%q) = %v, want it to name control characters", s, err)
		}
	}
}

// TestCheckTextRefusesControls: a short text field (a user id, a payment
// method, a SKU) is refused with a control character of either set (C0, or
// C1 such as U+0085, which log readers take for a line's end), a line or
// paragraph separator, or a bidirectional control, which would show an
// operator the text around it reordered; other scripts are text.
func TestCheckTextRefusesControls(t *testing.T) {
	for _, s := range []string{"u-1", "用户", "مستخدم", "tok_visa_1", "café"} {
		if err := CheckText("user_id", s, 128); err != nil {
			t.Errorf("CheckText(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"u\x00", "u\n1", "u\x7f", "u\u0085x", "u\u009fx", "u\u202ex", "u\u2066x", "u\u200fx", "u\u061cx", "u\u2028x"} {
		if err := CheckText("user_id", s, 128); ErrorCode(err) != EINVALID {
			t.Errorf("CheckText(%q) = %v, want invalid", s, err)
		}
		c := OrderCreate{OrderNo: "A-1", Flow: "checkout", UserID: s, Amount: 1, Currency: "CNY"}
		if err := c.Validate(); ErrorCode(err) != EINVALID {
			t.Errorf("OrderCreate with user_id %q: %v, want invalid", s, err)
		}
	}
}

// TestOrderCreateLengthsInBytes: the limits on an order's user_id and
// coupon are in bytes, as every store keeps them and as the group and close
// routes say; the refusal must say so, and not call 65 characters "longer
// than 128 characters". An order_no that is not ASCII is refused for what
// it holds, not for a length in characters it does not have.
func TestOrderCreateLengthsInBytes(t *testing.T) {
	for _, c := range []struct {
		name  string
		req   OrderCreate
		field string
		want  string
	}{
		{"user_id", OrderCreate{OrderNo: "A-1", Flow: "checkout", UserID: strings.Repeat("é", 65), Amount: 1, Currency: "CNY"},
			"user_id", "128 bytes"},
		{"coupon", OrderCreate{OrderNo: "A-1", Flow: "checkout", UserID: "u", Amount: 1, Currency: "CNY", Coupon: strings.Repeat("é", 33)},
			"coupon", "64 bytes"},
		{"order_no", OrderCreate{OrderNo: strings.Repeat("é", 40), Flow: "checkout", UserID: "u", Amount: 1, Currency: "CNY"},
			"order_no", "may hold only letters"},
	} {
		err := c.req.Validate()
		var le *Error
		if !errors.As(err, &le) || le.Code != EINVALID || le.Field != c.field || !strings.Contains(le.Message, c.want) {
			t.Errorf("%s: Validate() = %v; want invalid %s saying %q", c.name, err, c.field, c.want)
		}
	}
	// At the limit in bytes, in characters of two bytes each, they are taken.
	ok := OrderCreate{OrderNo: "A-1", Flow: "checkout", UserID: strings.Repeat("é", MaxUserIDLen/2), Amount: 1, Currency: "CNY",
		Coupon: strings.Repeat("é", MaxOrderNoLen/2)}
	if err := ok.Validate(); err != nil {
		t.Errorf("user_id and coupon at their limits in bytes: %v", err)
	}
}
