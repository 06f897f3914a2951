package engine

import (
	"regexp"

	"github.com/lapsehq/lapse"
)

// idempotencyKeyPattern is the shape of a caller's Idempotency-Key, on
// every call that takes one (a refund, a card's visit).
var idempotencyKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// checkIdempotencyKey refuses a key of another shape, naming the header it
// comes in. No key ("") is not refused.
func checkIdempotencyKey(key string) error {
	if key != "" && !idempotencyKeyPattern.MatchString(key) {
		return lapse.FieldError("Idempotency-Key", "must be 1 to 100 letters, digits, '.', '_', ':' or '-'")
	}
	return nil
}
