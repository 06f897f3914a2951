package access

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/secure/precis"

	"github.com/lapsehq/lapse"
)

// MaxNameLen bounds the name of a key or an operator, in characters.
const MaxNameLen = 100

// Names are shown to people (the audit log, the approvals page, lapse
// operator list and apikey list), who tell operators and keys apart by
// them: a name that reads as another's ("аlice" with a Cyrillic а beside
// "alice", a zero-width space in it, full-width letters, another case) is
// refused. An operator's name is a user name of RFC 8265 (precis
// UsernameCaseMapped: letters, digits and ASCII punctuation, no spaces),
// written in its normal form, since it is typed to log in. A key's name
// may hold spaces and symbols ("shop backend"), and repeat: a key replacing
// another is made under its name before the old one is revoked. Names
// stored before these rules keep working as they are.

// checkName returns name without surrounding space, or an EINVALID error
// about field when it is empty, longer than MaxNameLen characters, holds a
// control, format or invisible character, or mixes scripts.
func checkName(field, name string) (string, error) {
	name = strings.TrimSpace(name)
	n := utf8.RuneCountInString(name)
	switch {
	case n == 0:
		return "", lapse.FieldError(field, "is required")
	case n > MaxNameLen:
		return "", lapse.FieldError(field, "must be at most %d characters", MaxNameLen)
	case !utf8.ValidString(name):
		return "", lapse.FieldError(field, "must be UTF-8")
	}
	if i := strings.IndexFunc(name, invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return "", lapse.FieldError(field, "must not hold control, format or invisible characters: it has %U", r)
	}
	if s := scripts(name); len(s) > 1 && !slices.ContainsFunc(eastAsian, func(ok []string) bool { return subset(s, ok) }) {
		return "", lapse.FieldError(field, "mixes scripts (%s): letters of one script may look like another's; use one", strings.Join(s, " and "))
	}
	return name, nil
}

// checkOperatorName is checkName of an operator's name, which must also be
// an RFC 8265 user name in its normal form (width and Unicode form; the
// case is the operator's).
func checkOperatorName(field, name string) (string, error) {
	name, err := checkName(field, name)
	if err != nil {
		return "", err
	}
	norm, err := precis.UsernameCasePreserved.String(name)
	if err != nil {
		return "", lapse.FieldError(field, "must be a user name (RFC 8265): letters, digits and ASCII punctuation, without spaces or other symbols")
	}
	if norm != name {
		return "", lapse.FieldError(field, "is not in its normal form: write it as %q", norm)
	}
	return name, nil
}

// operatorFold is an operator's name as names are compared: its
// UsernameCaseMapped form (case, width and Unicode form folded), or for a
// name stored before that profile was enforced and outside it, keyFold's.
func operatorFold(name string) string {
	if k, err := precis.UsernameCaseMapped.CompareKey(name); err == nil {
		return k
	}
	return keyFold(name)
}

// keyFold is a key's name as names are compared: its RFC 8266 (precis
// Nickname) comparison key, which folds case, width, Unicode form and runs
// of spaces; or, for a name outside that profile, its lower case.
func keyFold(name string) string {
	if k, err := precis.Nickname.CompareKey(name); err == nil {
		return k
	}
	return strings.ToLower(name)
}

// lookAlike returns the name of the first of others (nameOf tells it) that
// reads as name, by fold of its skeleton, and is not name itself; false
// when none does.
func lookAlike[T any](name string, others []*T, nameOf func(*T) string, fold func(string) string) (string, bool) {
	f := fold(skeleton(name))
	for _, o := range others {
		if n := nameOf(o); n != name && fold(skeleton(n)) == f {
			return n, true
		}
	}
	return "", false
}

// skeleton is name with each Cyrillic and Greek letter that reads as a
// Latin one written as that Latin letter, so that a name wholly in one of
// those scripts ("асе", "ТОМ" in Cyrillic) reads as the Latin name it looks
// like ("ace", "TOM"): checkName refuses a name that mixes the scripts, not
// one that swaps every letter.
func skeleton(name string) string {
	return strings.Map(func(r rune) rune {
		if l, ok := latinLookAlike[r]; ok {
			return l
		}
		return r
	}, name)
}

// latinLookAlike are the Cyrillic and Greek letters that read as Latin
// ones, each with that Latin letter, in its case.
var latinLookAlike = map[rune]rune{
	// Cyrillic
	'а': 'a', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'һ': 'h', 'і': 'i', 'ј': 'j', 'ӏ': 'l', 'о': 'o', 'р': 'p',
	'ԛ': 'q', 'ѕ': 's', 'ѵ': 'v', 'ԝ': 'w', 'х': 'x', 'у': 'y', 'ү': 'y',
	'А': 'A', 'В': 'B', 'С': 'C', 'Е': 'E', 'Н': 'H', 'І': 'I', 'Ј': 'J', 'К': 'K', 'М': 'M', 'О': 'O',
	'Р': 'P', 'Ѕ': 'S', 'Т': 'T', 'Х': 'X', 'У': 'Y', 'Ү': 'Y', 'Ԛ': 'Q', 'Ԝ': 'W',
	// Greek
	'α': 'a', 'γ': 'y', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'υ': 'u', 'χ': 'x',
	'ω': 'w',
	'Α': 'A', 'Β': 'B', 'Ε': 'E', 'Ζ': 'Z', 'Η': 'H', 'Ι': 'I', 'Κ': 'K', 'Μ': 'M', 'Ν': 'N', 'Ο': 'O',
	'Ρ': 'P', 'Τ': 'T', 'Υ': 'Y', 'Χ': 'X',
}

// invisible reports whether r is a control, format or otherwise invisible
// character (a default-ignorable code point, a variation selector), or a
// space other than the ASCII space, which reads as one.
func invisible(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) ||
		r != ' ' && unicode.IsSpace(r)
}

// eastAsian are the sets of scripts that names mix as a matter of course
// (Unicode TS 39's highly restrictive level): Latin with Han and kana,
// with Han and Bopomofo, with Han and Hangul.
var eastAsian = [][]string{
	{"Han", "Hiragana", "Katakana", "Latin"},
	{"Bopomofo", "Han", "Latin"},
	{"Han", "Hangul", "Latin"},
}

// scripts returns the scripts of name's characters, sorted, leaving out
// Common and Inherited (digits, punctuation, combining marks), which go
// with any script.
func scripts(name string) []string {
	var out []string
	for _, r := range name {
		for s, t := range unicode.Scripts {
			if s != "Common" && s != "Inherited" && unicode.Is(t, r) && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// subset reports whether every one of s is in of.
func subset(s, of []string) bool {
	for _, x := range s {
		if !slices.Contains(of, x) {
			return false
		}
	}
	return true
}

// errLookAlike is the error of a name that reads as the name of another
// (kind: operator or key).
func errLookAlike(field, kind, other string) error {
	return lapse.FieldError(field, "reads as the %s %q: names may not differ only in case, width, spaces or Unicode form", kind, other)
}
