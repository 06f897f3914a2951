package lapse

import (
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
	}
}
