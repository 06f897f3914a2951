package access_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// wantFieldErr checks that err is EINVALID about field and says msg.
func wantFieldErr(t *testing.T, err error, field, msg string) {
	t.Helper()
	wantErr(t, err, lapse.EINVALID, msg)
	var le *lapse.Error
	if !errors.As(err, &le) || le.Field != field {
		t.Fatalf("error %v: want it about the field %q", err, field)
	}
}

// TestOperatorNamesDifferInMoreThanCase: an operator whose name reads as
// another's (in another case) is refused with a 400 about the name: the
// audit log and the approvals page would read them as one. The same name
// again is taken (409).
func TestOperatorNamesDifferInMoreThanCase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	e.addOperator("alice", access.RoleOperator)
	e.addOperator("josé", access.RoleOperator)
	for _, name := range []string{"Alice", " ALICE ", "JOSÉ", "José"} {
		_, _, err := e.svc.AddOperator(e.ctx, e.root, name, access.RoleViewer, "")
		wantFieldErr(t, err, "name", `reads as the operator "`)
	}
	_, _, err := e.svc.AddOperator(e.ctx, e.root, " alice ", access.RoleViewer, "")
	wantErr(t, err, lapse.ECONFLICT, `an operator named "alice" exists`)
	e.addOperator("alicia", access.RoleViewer)
	// A name wholly in Cyrillic or Greek letters that read as Latin ones
	// reads as the Latin name: it mixes no scripts, and is refused all the
	// same.
	e.addOperator("ace", access.RoleOperator)
	e.addOperator("TOM", access.RoleOperator)
	for _, name := range []string{"\u0430\u0441\u0435", "\u0410\u0421\u0415", "\u0422\u041e\u041c", "\u03a4\u039f\u039c"} {
		_, _, err := e.svc.AddOperator(e.ctx, e.root, name, access.RoleViewer, "")
		wantFieldErr(t, err, "name", `reads as the operator "`)
	}
	e.addOperator("\u0432\u0435\u0440\u0430", access.RoleViewer) // вера: Cyrillic that reads as no one here
	if n := len(e.audit("operator.add")); n != 6 {
		t.Fatalf("%d operator.add rows, want 6", n)
	}
}

// TestOperatorNamesAreNotLookAlikes: an operator's name is a user name of
// RFC 8265 (precis UsernameCaseMapped), in its normal form, of one script
// (or Latin with the Han, kana or Hangul of East Asian names), without
// control, format or invisible characters: each else is a 400 about the
// name, saying what is wrong, and adds no one. Names of one script, or of
// East Asian scripts with Latin, are taken.
func TestOperatorNamesAreNotLookAlikes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	e.addOperator("alice", access.RoleOperator)
	for _, c := range []struct{ name, msg string }{
		{"\u0430lice", "mixes scripts (Cyrillic and Latin)"},         // a Cyrillic а
		{"pаypal", "mixes scripts (Cyrillic and Latin)"},             // one in the middle
		{"ali\u200bce", "invisible characters: it has U+200B"},       // zero-width space
		{"ali\u200dce", "invisible characters: it has U+200D"},       // zero-width joiner
		{"alice\u202e", "invisible characters: it has U+202E"},       // right-to-left override
		{"\u2066alice\u2069", "invisible characters: it has U+2066"}, // bidi isolate
		{"ali\x01ce", "invisible characters: it has U+0001"},         // control
		{"\u3164alice", "invisible characters: it has U+3164"},       // Hangul filler
		{"alice\u034f", "invisible characters: it has U+034F"},       // combining grapheme joiner
		{"alice\ufe0f", "invisible characters: it has U+FE0F"},       // variation selector
		{"ali\u00a0ce", "invisible characters: it has U+00A0"},       // no-break space
		{"jose\u0301", `is not in its normal form: write it as "josé"`},
		{"ＢＯＢ", `is not in its normal form: write it as "BOB"`},
		{"alice smith", "a user name (RFC 8265)"},
		{"alice★", "a user name (RFC 8265)"},
	} {
		_, _, err := e.svc.AddOperator(e.ctx, e.root, c.name, access.RoleViewer, "")
		wantFieldErr(t, err, "name", c.msg)
	}
	for _, name := range []string{"boris", "борис", "张三", "Lily张", "田中たなか", "김민준", "o'brien", "a.b_c-d@e.x", "ülrich"} {
		e.addOperator(name, access.RoleViewer)
	}
	ops, err := e.svc.Operators(e.ctx)
	if err != nil || len(ops) != 10 {
		t.Fatalf("Operators = %d, %v; want alice and the 9 names of one script", len(ops), err)
	}
}

// TestKeyNamesAreNotLookAlikes: a key's name, shown in lapse apikey list
// and in the audit rows of what the key does, may have spaces and symbols
// ("shop backend", "admin (first start)"), but is refused, with a 400 about
// the name, when it holds control, format or invisible characters, mixes
// scripts, or reads as another key's name without being it. The same name
// again is taken: a key replacing another is made before the old one is
// revoked.
func TestKeyNamesAreNotLookAlikes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	scopes := []string{access.ScopeOrdersRead}
	if _, _, err := e.svc.CreateKey(e.ctx, e.root, "shop backend", scopes); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, msg string }{
		{"shop b\u0430ckend", "mixes scripts (Cyrillic and Latin)"},
		{"shop\u200bbackend", "invisible characters: it has U+200B"},
		{"shop backend\u202e", "invisible characters: it has U+202E"},
		{"shop\u00a0backend", "invisible characters: it has U+00A0"},
		{"Shop Backend", `reads as the key "shop backend"`},
		{"ＳＨＯＰ backend", `reads as the key "shop backend"`},
		{"shop  backend", `reads as the key "shop backend"`},
	} {
		_, _, err := e.svc.CreateKey(e.ctx, e.root, c.name, scopes)
		wantFieldErr(t, err, "name", c.msg)
	}
	for _, name := range []string{"shop backend", "admin (first start)", "商店 backend", "склад"} {
		if _, _, err := e.svc.CreateKey(e.ctx, e.root, name, scopes); err != nil {
			t.Errorf("CreateKey(%q): %v", name, err)
		}
	}
	if n := len(e.audit("apikey.create")); n != 5 {
		t.Fatalf("%d apikey.create rows, want 5", n)
	}
}

// TestStoredNamesKeepWorking: an operator stored before names were held to
// RFC 8265 (a space in it, another case) still logs in, and a new name that
// reads as theirs is refused.
func TestStoredNamesKeepWorking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, secret := e.addOperator("mallory", access.RoleOperator)
	if _, err := e.db.OperatorCreate(e.ctx, &lapse.Operator{Name: "Old Timer", Role: access.RoleViewer,
		PasswordHash: e.operator("mallory").PasswordHash, TOTPSecret: secret, Lang: "en", TimeZone: "UTC", CreatedAt: start}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.Login(e.ctx, "Old Timer", password, e.code(secret), ""); err != nil {
		t.Fatalf("the stored name's login: %v", err)
	}
	for _, name := range []string{"old timer", "OLD\u00a0TIMER"} {
		_, _, err := e.svc.AddOperator(e.ctx, e.root, name, access.RoleViewer, "")
		if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(lapse.ErrorMessage(err), "name") {
			t.Errorf("AddOperator(%q) = %v; want a 400 about the name", name, err)
		}
	}
}
