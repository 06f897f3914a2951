package postgres_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestDecodeOrderRow checks that the orders the store decodes from raw
// rows are those pgx's scan reads, field for field, over every column set
// and unset, spellings of items that jsonb and callers make, times before
// and after PostgreSQL's epoch, and strings of many bytes a character; that
// rows in the text format (statements not described first) are not taken
// for it; and that a time that is infinity is refused both ways.
func TestDecodeOrderRow(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 12, 0, 0, 123456000, time.UTC)
	deadline := now.Add(15 * time.Minute)
	var ps []*lapse.OrderCreateParams
	for i := range 12 {
		var d *time.Time
		if i%2 == 0 {
			d = &deadline
		}
		ps = append(ps, createParams(fmt.Sprintf("DR-%02d", i), d, now))
	}
	// Enough rows, each with metadata of its own, that pgx reads them into
	// its buffer more than once: what a row keeps must be its own copy.
	for i := range 2000 {
		p := createParams(fmt.Sprintf("DS-%04d", i), nil, now)
		p.Order.Metadata = []byte(fmt.Sprintf(`{"n":%d,"pad":"%0100d"}`, i, i))
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	for _, q := range []string{
		`UPDATE orders SET items = NULL, metadata = NULL WHERE order_no = 'DR-01'`,
		`UPDATE orders SET items = '[]', metadata = '{ "spaced" : [1, 2] }' WHERE order_no = 'DR-02'`,
		`UPDATE orders SET items = '[{"sku": "ü-ß", "qty": 3, "note": "x"}]', coupon = ' C-飞 ' WHERE order_no = 'DR-03'`,
		`UPDATE orders SET items = '[{"qty": 2, "sku": "b\"q"}]', user_id = 'ユーザー' WHERE order_no = 'DR-04'`,
		`UPDATE orders SET state = 'CLOSED', closed_at = '1999-12-31 23:59:59.999999+00', close_reason = 'TIMEOUT',
			fired_by = 'sweep', closed_deadline_at = '1970-01-01 00:00:00.000001+00', amount = -9223372036854775807 WHERE order_no = 'DR-05'`,
		`UPDATE orders SET intent_at = '2026-12-02 12:01:02.000003+00', intent_provider = 'wechat', pay_by = '2100-01-01 00:00:00+00',
			version = 9223372036854775807, request_hash = '' WHERE order_no = 'DR-06'`,
		`UPDATE orders SET metadata = 'null', items = 'null' WHERE order_no = 'DR-07'`,
		`UPDATE orders SET order_no = '' || order_no, flow = 'group', currency = '' WHERE order_no = 'DR-08'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	query := "SELECT " + postgres.OrderColumns + " FROM orders ORDER BY id"
	read := func(mode pgx.QueryExecMode, decoded bool) ([]*lapse.Order, error) {
		rows, err := conn.Query(ctx, query, mode)
		if err != nil {
			return nil, err
		}
		return postgres.ScanOrdersBy(rows, decoded)
	}
	want, err := read(pgx.QueryExecModeCacheStatement, false)
	if err != nil || len(want) != 2012 {
		t.Fatalf("pgx's scan: %d orders, %v", len(want), err)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		got, err := read(mode, true)
		if err != nil {
			t.Fatalf("decoded in mode %v: %v", mode, err)
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("mode %v, order %s:\n decoded %+v\n pgx     %+v", mode, want[i].OrderNo, got[i], want[i])
			}
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		if _, err := read(mode, true); err == nil {
			t.Errorf("rows in the text format (mode %v) were taken as decodable", mode)
		}
	}
	// The store's own reads take the decoded path or, in text, pgx's scan.
	for i, o := range want {
		got, err := s.OrderGet(ctx, o.OrderNo)
		if err != nil || !reflect.DeepEqual(got, want[i]) {
			t.Errorf("OrderGet(%s) = %+v, %v; want %+v", o.OrderNo, got, err, want[i])
		}
	}
	claimed, err := s.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: deadline, Flows: []string{"checkout"}, Limit: 100})
	if err != nil || len(claimed) == 0 {
		t.Fatalf("OrderClaimDue = %d, %v", len(claimed), err)
	}
	for _, o := range claimed {
		for _, w := range want {
			if w.ID == o.ID && !reflect.DeepEqual(o, w) {
				t.Errorf("claimed %s = %+v; want %+v", o.OrderNo, o, w)
			}
		}
	}

	if _, err := conn.Exec(ctx, `UPDATE orders SET closed_at = 'infinity' WHERE order_no = 'DR-09'`); err != nil {
		t.Fatal(err)
	}
	if _, err := read(pgx.QueryExecModeCacheStatement, false); err == nil {
		t.Error("pgx's scan read an infinite time")
	}
	if _, err := read(pgx.QueryExecModeCacheStatement, true); err == nil {
		t.Error("the decoder read an infinite time")
	}
}

// BenchmarkScanOrders reads 500 orders, as a claim of due orders does,
// through pgx's scan and through the store's decoder.
func BenchmarkScanOrders(b *testing.B) {
	dsn := testenv.PostgresSchema(b)
	s := openStore(b, dsn, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 500 {
		d := now.Add(time.Duration(i) * time.Second)
		ps = append(ps, createParams(fmt.Sprintf("SB-%04d", i), &d, now))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		b.Fatal(err)
	}
	conn := connect(b, dsn)
	query := "SELECT " + postgres.OrderColumns + " FROM orders ORDER BY id"
	for _, decoded := range []bool{false, true} {
		name := "pgx"
		if decoded {
			name = "decoded"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rows, err := conn.Query(ctx, query)
				if err != nil {
					b.Fatal(err)
				}
				if os, err := postgres.ScanOrdersBy(rows, decoded); err != nil || len(os) != 500 {
					b.Fatal(len(os), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*500), "ns/order")
		})
	}
}
