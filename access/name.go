package access

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
)

// MaxNameLen bounds the name of a key or an operator, in characters.
const MaxNameLen = 100

// checkName returns name without surrounding space, or an EINVALID error
// about field when it is empty, longer than MaxNameLen characters, or holds
// a character that is not printable.
func checkName(field, name string) (string, error) {
	name = strings.TrimSpace(name)
	n := utf8.RuneCountInString(name)
	switch {
	case n == 0:
		return "", lapse.FieldError(field, "is required")
	case n > MaxNameLen:
		return "", lapse.FieldError(field, "must be at most %d characters", MaxNameLen)
	case !utf8.ValidString(name) || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "", lapse.FieldError(field, "must be printable characters only")
	}
	return name, nil
}
