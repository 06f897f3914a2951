package http

import (
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
)

// The first byte of a cursor names the listing it is a position in, and its
// layout: a cursor of one listing is refused by another, where its time and
// id would name a position among other rows, and a layout can change while
// cursors handed out by an older server are still refused cleanly. Orders'
// cursors keep the byte they had when theirs was the only listing.
const (
	orderCursor    = 1 // GET /v1/orders
	reviewCursor   = 2 // GET /v1/reviews
	approvalCursor = 3 // GET /v1/approvals
	closeCursor    = 4 // GET /v1/closes
)

// encodeCursor returns the opaque cursor of a position in the listing kind:
// base64url of kind, the created_at in unix microseconds and the id, both
// big-endian. Clients must not build or read cursors; only this file does.
func encodeCursor(kind byte, at time.Time, id int64) string {
	var b [17]byte
	b[0] = kind
	binary.BigEndian.PutUint64(b[1:9], uint64(at.UnixMicro()))
	binary.BigEndian.PutUint64(b[9:], uint64(id))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeCursor parses a cursor that encodeCursor made for the listing kind
// into its created_at and id, or returns an EINVALID error about the cursor
// parameter.
func decodeCursor(kind byte, s string) (time.Time, int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 17 || b[0] != kind {
		return time.Time{}, 0, lapse.FieldError("cursor", "is not a cursor this server handed out; pass next_cursor unchanged")
	}
	micros, id := int64(binary.BigEndian.Uint64(b[1:9])), int64(binary.BigEndian.Uint64(b[9:]))
	at := time.UnixMicro(micros).UTC()
	// Orders and reviews are created in years 1 to 9999, as RFC 3339
	// writes them; a cursor outside them was made by hand, and a store may
	// read its time wrongly (PostgreSQL's encoding of the earliest
	// overflows, past every row) rather than refuse it.
	if id <= 0 || at.Year() < 1 || at.Year() > 9999 {
		return time.Time{}, 0, lapse.FieldError("cursor", "is not a cursor this server handed out; pass next_cursor unchanged")
	}
	return at, id, nil
}

// idPage is the page a list by id, newest first, asks for: the limit
// query parameter (1 to MaxListLimit, def when left out) and the id below
// which the cursor parameter, made by encodeCursor for kind, reads on (0:
// from the newest). Errors name the parameter.
func idPage(q url.Values, kind byte, def int) (limit int, before int64, err error) {
	limit = def
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return 0, 0, lapse.FieldError("limit", "must be an integer from 1 to %d", MaxListLimit)
		}
		limit = n
	}
	if v := q.Get("cursor"); v != "" {
		if _, before, err = decodeCursor(kind, v); err != nil {
			return 0, 0, err
		}
	}
	return limit, before, nil
}

// pageOf cuts rows, read with one more than limit, to limit, and returns
// the cursor of the next page (of kind, after the last row kept, whose
// created_at and id at gives), nil when rows held no more.
func pageOf[T any](rows []T, limit int, kind byte, at func(T) (time.Time, int64)) ([]T, *string) {
	if len(rows) <= limit {
		return rows, nil
	}
	rows = rows[:limit]
	t, id := at(rows[len(rows)-1])
	cur := encodeCursor(kind, t, id)
	return rows, &cur
}
