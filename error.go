package lapse

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Error codes. Every error that crosses a Lapse API carries one of these; the
// HTTP layer maps each to a status in one table.
const (
	EINVALID     = "invalid"     // the caller sent something wrong; nothing was written
	ENOTFOUND    = "not_found"   // the thing asked for does not exist
	ECONFLICT    = "conflict"    // the request is well formed but clashes with current state
	EUNAVAILABLE = "unavailable" // a dependency is down or overloaded; try again later
	// EUNAUTHORIZED: the request carries no credential, or one that did not
	// verify (an API key, a session, a provider callback's signature);
	// nothing was written.
	EUNAUTHORIZED = "unauthorized"
	// EFORBIDDEN: the credential is good but may not do this (a scope or
	// role it lacks, a second factor it did not give, a request it made
	// itself and may not approve); nothing was written.
	EFORBIDDEN = "forbidden"
	EINTERNAL  = "internal" // a bug or an unexpected failure; logged at the edge
)

// Error is a Lapse error with a code, a human message, and optionally the
// request field it is about. Messages are written for the API caller.
type Error struct {
	Code    string
	Field   string
	Message string
	// Err is what the error refines, usually a sentinel below, so that
	// errors.Is matches it while Message gives the particulars.
	Err error
}

// Unwrap returns the error this one refines.
func (e *Error) Unwrap() error { return e.Err }

// Refine returns an error with sentinel's code, a particular message, and
// sentinel in its chain: errors.Is(Refine(ErrStockShort, …), ErrStockShort).
func Refine(sentinel *Error, format string, args ...any) *Error {
	return &Error{Code: sentinel.Code, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("lapse: %s: %s", e.Field, e.Message)
	}
	return "lapse: " + e.Message
}

// Is reports a match with another *Error of the same code and message, so that
// the sentinels below work with errors.Is even when wrapped.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && t.Message == e.Message && t.Field == e.Field && t.Err == nil
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError returns an EINVALID error about one request field.
func FieldError(field, format string, args ...any) *Error {
	return &Error{Code: EINVALID, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for
// any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, or a
// generic text for internal errors so that their details never leak to callers.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		if e.Field != "" {
			return e.Field + ": " + e.Message
		}
		return e.Message
	}
	return "internal error"
}

// Sentinels that callers branch on.
var (
	// ErrOrderNotFound: no order has that order_no (or id).
	ErrOrderNotFound = &Error{Code: ENOTFOUND, Message: "order not found"}

	// ErrStale: a guarded update found the order in another state or version
	// than expected. For a timer this is not a failure: the order moved on.
	ErrStale = &Error{Code: ECONFLICT, Message: "order changed concurrently"}

	// ErrLeaseLost: a delivery worker's lease ended before it finished; the
	// delivery belongs to another attempt now.
	ErrLeaseLost = &Error{Code: ECONFLICT, Message: "delivery lease lost"}

	// ErrDeliveryNotFound: no delivery has that id.
	ErrDeliveryNotFound = &Error{Code: ENOTFOUND, Message: "delivery not found"}

	// ErrOrderExists: an order with that order_no exists with a different
	// request body.
	ErrOrderExists = &Error{Code: ECONFLICT, Message: "order_no already used with a different request"}

	// ErrStoreUnavailable: the store's database cannot take work now (it
	// refuses connections, is shutting down or starting, lost the
	// connection, or another process holds its lock too long); nothing was
	// written, and the same call may succeed later. A store returns it
	// wrapped together with the driver's error, so that errors.Is and
	// ErrorCode (EUNAVAILABLE) see it and errors.As still finds the cause.
	ErrStoreUnavailable = &Error{Code: EUNAVAILABLE, Message: "the database is unavailable; try again later"}

	// ErrStoreBusy refines ErrStoreUnavailable: the database gave up on a
	// statement or its transaction rather than wait longer or run it
	// against another (a lock wait past the store's lock timeout, a
	// deadlock it broke, a serialization failure, a statement past the
	// statement timeout, a file another process keeps locked). What the
	// statement or its transaction wrote was rolled back, and the same call
	// may succeed at once. A store returns it wrapped together with the
	// driver's error; errors.Is(err, ErrStoreUnavailable) holds for it too,
	// and its code is EUNAVAILABLE.
	ErrStoreBusy = &Error{Code: EUNAVAILABLE, Message: "the database is busy (a lock wait timed out, or a deadlock or conflict was broken); try again", Err: ErrStoreUnavailable}
)

// MaxReasonLen bounds a reason kept on the books (a payment's, a review's,
// a delivery attempt's error), in bytes.
const MaxReasonLen = 500

// Reason returns err as the books keep it, for operators: its whole text,
// not the caller-safe ErrorMessage, which hides what is not a lapse error
// (a provider's or a port's refusal among them), made safe by CleanReason.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	return CleanReason(strings.TrimPrefix(err.Error(), "lapse: "))
}

// CleanReason makes s fit to keep and show: invalid UTF-8, control
// characters (a provider's answer may hold anything) and bidirectional
// controls (U+202E and its kin, which would show an operator the text
// around them reordered, an amount or an order number other than the
// one kept) become U+FFFD or a space, and it is cut to MaxReasonLen bytes
// on a character boundary, ending in "…" when cut.
func CleanReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t' || r == '\u2028' || r == '\u2029':
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			return '\uFFFD'
		}
		return r
	}, s)
	if len(s) <= MaxReasonLen {
		return s
	}
	cut := MaxReasonLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
