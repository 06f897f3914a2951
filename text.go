package lapse

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// CheckReason refuses a reason a caller gives for a change (an event
// fired, a deadline moved, a refund, a close, a retry) that the books could
// not keep as it was given: longer than MaxReasonLen bytes, or not one line
// of UTF-8 text without control characters (which CleanReason would
// change). field names the reason in the error.
func CheckReason(field, s string) error {
	if len(s) > MaxReasonLen || CleanReason(s) != s {
		return FieldError(field, "must be one line of text of at most %d bytes, without control characters (line breaks, tabs) or bidirectional controls", MaxReasonLen)
	}
	return nil
}

// CheckText refuses a short text field (a user id, a payment method) longer
// than max bytes, or not UTF-8 text without control characters.
func CheckText(field, s string, max int) error {
	if len(s) > max || !utf8.ValidString(s) || !textPattern.MatchString(s) {
		return FieldError(field, "must be UTF-8 text of at most %d bytes without control characters", max)
	}
	return nil
}

// StorableText reports whether every store can keep s as text and find it
// again: valid UTF-8 without NUL, which PostgreSQL refuses in text (SQLite
// would keep it). A request whose path or query holds anything else can
// name nothing that exists.
func StorableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// StorableURL reports whether the path of u and every key and value of its
// query are StorableText, as every value a handler reads from them must be.
// A query that does not parse is left to the handler that reads it.
func StorableURL(u *url.URL) bool {
	if !StorableText(u.Path) {
		return false
	}
	q, _ := url.ParseQuery(u.RawQuery)
	for k, vs := range q {
		if !StorableText(k) {
			return false
		}
		for _, v := range vs {
			if !StorableText(v) {
				return false
			}
		}
	}
	return true
}
