package http

import (
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/lapsehq/lapse"
)

// cursorVersion leads every cursor so that its layout can change while
// cursors handed out by an older server are still refused cleanly.
const cursorVersion = 1

// encodeCursor returns the opaque cursor of a listing position: base64url of
// a version byte, the created_at in unix microseconds and the order id, both
// big-endian. Clients must not build or read cursors; only this file does.
func encodeCursor(c lapse.OrderCursor) string {
	var b [17]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(c.CreatedAt.UnixMicro()))
	binary.BigEndian.PutUint64(b[9:], uint64(c.ID))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeCursor parses a cursor made by encodeCursor, or returns an EINVALID
// error about the cursor parameter.
func decodeCursor(s string) (*lapse.OrderCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 17 || b[0] != cursorVersion {
		return nil, lapse.FieldError("cursor", "is not a cursor this server handed out; pass next_cursor unchanged")
	}
	micros, id := int64(binary.BigEndian.Uint64(b[1:9])), int64(binary.BigEndian.Uint64(b[9:]))
	if id <= 0 {
		return nil, lapse.FieldError("cursor", "is not a cursor this server handed out; pass next_cursor unchanged")
	}
	return &lapse.OrderCursor{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}, nil
}
