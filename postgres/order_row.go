package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// oidJSONB is jsonb's type OID (the others are in array_param.go).
const oidJSONB = 3802

// orderRowTypes are the types of orderColumns, in order.
var orderRowTypes = [...]uint32{
	oidInt8, oidText, oidText, oidText, oidTimestamptz, oidInt8, oidText, oidText, oidJSONB, oidText,
	oidJSON, oidInt8, oidTimestamptz, oidTimestamptz, oidTimestamptz, oidText, oidText, oidText, oidTimestamptz, oidText,
	oidTimestamptz, oidTimestamptz,
}

// orderRowDecodable reports whether rows of fds can be read by
// decodeOrderRow: orderColumns, with the integers and times in binary, as
// pgx asks for them. Text, json and jsonb may come in either format.
func orderRowDecodable(fds []pgconn.FieldDescription) bool {
	if len(fds) != len(orderRowTypes) {
		return false
	}
	for i, fd := range fds {
		if fd.DataTypeOID != orderRowTypes[i] {
			return false
		}
		if (fd.DataTypeOID == oidInt8 || fd.DataTypeOID == oidTimestamptz) && fd.Format != pgx.BinaryFormatCode {
			return false
		}
	}
	return true
}

// decodeOrderRow reads one row of orderColumns from its raw values, as
// scanOrder reads it through pgx, without pgx's scan plans: a claim of 500
// due orders spent about 3.7 µs a close in them. The strings of a row share
// one allocation, and its optional times another. fds must be
// orderRowDecodable.
func decodeOrderRow(fds []pgconn.FieldDescription, vals [][]byte) (*lapse.Order, error) {
	if len(vals) != len(orderRowTypes) {
		return nil, fmt.Errorf("%d columns, want %d", len(vals), len(orderRowTypes))
	}
	for _, i := range [...]int{0, 1, 2, 3, 5, 6, 7, 9, 11, 12, 13, 15, 16, 17, 19} {
		if vals[i] == nil {
			return nil, fmt.Errorf("column %s is NULL", fds[i].Name)
		}
	}
	var size int
	for _, i := range [...]int{1, 2, 3, 6, 7, 9, 15, 16, 17, 19} {
		size += len(vals[i])
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, i := range [...]int{1, 2, 3, 6, 7, 9, 15, 16, 17, 19} {
		sb.Write(vals[i])
	}
	all, at := sb.String(), 0
	str := func(i int) string {
		s := all[at : at+len(vals[i])]
		at += len(vals[i])
		return s
	}

	var err error
	num := func(i int) int64 {
		if len(vals[i]) != 8 {
			err = errors.Join(err, fmt.Errorf("column %s: %d bytes for a bigint", fds[i].Name, len(vals[i])))
			return 0
		}
		return int64(binary.BigEndian.Uint64(vals[i]))
	}
	when := func(i int) time.Time {
		if len(vals[i]) != 8 {
			err = errors.Join(err, fmt.Errorf("column %s: %d bytes for a timestamptz", fds[i].Name, len(vals[i])))
			return time.Time{}
		}
		us := int64(binary.BigEndian.Uint64(vals[i]))
		if us == math.MaxInt64 || us == math.MinInt64 {
			err = errors.Join(err, fmt.Errorf("column %s: infinity is not a time", fds[i].Name))
			return time.Time{}
		}
		return time.UnixMicro(us + microsFromUnixToY2K).UTC()
	}
	// The optional times point into one array, allocated only if one is set.
	var opt *[5]time.Time
	maybe := func(k, i int) *time.Time {
		if vals[i] == nil {
			return nil
		}
		if opt == nil {
			opt = new([5]time.Time)
		}
		opt[k] = when(i)
		return &opt[k]
	}

	o := &lapse.Order{
		ID: num(0), OrderNo: str(1), Flow: str(2), State: lapse.State(str(3)), DeadlineAt: maybe(0, 4),
		Amount: num(5), Currency: str(6), UserID: str(7), Coupon: str(9), Version: num(11),
		CreatedAt: when(12), UpdatedAt: when(13), ClosedAt: maybe(1, 14), CloseReason: str(15),
		FiredBy: lapse.FiredBy(str(16)), RequestHash: str(17), IntentAt: maybe(2, 18), IntentProvider: str(19),
		PayBy: maybe(3, 20), ClosedDeadlineAt: maybe(4, 21),
	}
	if err != nil {
		return nil, err
	}
	if items := vals[8]; items != nil {
		if fds[8].Format == pgx.BinaryFormatCode { // jsonb's binary form: a version byte, then the text
			if len(items) == 0 || items[0] != 1 {
				return nil, fmt.Errorf("order %s: items: not jsonb version 1", o.OrderNo)
			}
			items = items[1:]
		}
		if o.Items, err = column.ParseItems(items); err != nil {
			return nil, fmt.Errorf("order %s: items: %w", o.OrderNo, err)
		}
	}
	if len(vals[10]) > 0 { // json's binary form is its text
		o.Metadata = append([]byte(nil), vals[10]...)
	}
	return o, nil
}
