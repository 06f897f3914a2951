package main

import (
	"strings"
	"unicode"
)

// plain is stored text as lapse prints it to a terminal: what a provider,
// a customer or anyone who wrote it put in it cannot move the cursor,
// recolour, retitle or rewrite the lines around it. Control and
// bidirectional characters become U+FFFD and line breaks blanks, invalid
// UTF-8 U+FFFD too, and nothing is cut (lapse.CleanReason is this, cut to a
// reason's length).
func plain(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t' || r == '\u2028' || r == '\u2029':
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			return '\uFFFD'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
