package postgres

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
)

// Queries whose plans the tests check.
const (
	OrderNextDeadlineSQL = orderNextDeadlineSQL
	OrderCountDueSQL     = orderCountDueSQL
	DeliveryCountSQL     = deliveryCountSQL

	DeliveryCountBySubscriberSQL = deliveryCountBySubscriberSQL
)

// The claim, whose plan the tests check.
var (
	OrderClaimDueSQL       = orderClaimDueSQL
	OrderClaimDueLockedSQL = orderClaimDueLockedSQL
	OrderDeadlineListSQL   = orderDeadlineListAfterSQL
	AuditUnsealedSQL       = auditUnsealedSQL
	AuditChainSQL          = auditChainSQL
)

// Claims whose plans the tests check.
var (
	DeliveryClaimOneSQL  = deliveryClaimOneSQL
	DeliveryClaimManySQL = deliveryClaimManySQL
)

// The statements on many leases, whose plans the tests check.
const (
	DeliveryDoneManySQL = deliveryDoneManySQL
	DeliveryRenewSQL    = deliveryRenewSQL
)

// DeliveryFinishSQL and DeliveryFinishArgs are DeliveryFinish's statement
// and its arguments, whose plan the tests check.
var (
	DeliveryFinishSQL  = deliveryFinishSQL
	DeliveryFinishArgs = deliveryFinishArgs
)

// DeliveryRetrySQL is DeliveryRetry's statement, whose plan the tests check.
const DeliveryRetrySQL = deliveryRetrySQL

// The statements of AuditList, CloseItemList and ReviewList, with their
// arguments, and of ReviewResolve, whose plans the tests check.
var (
	AuditListQuery     = auditListQuery
	CloseItemListQuery = closeItemListQuery
	ReviewListQuery    = reviewListQuery
	ReviewResolveSQL   = reviewResolveSQL
)

// Setting returns the value of a server setting on one of the store's
// connections.
func (s *Store) Setting(ctx context.Context, name string) (string, error) {
	var v string
	err := s.db.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// Sleep runs pg_sleep for d on one of the store's connections.
func (s *Store) Sleep(ctx context.Context, d time.Duration) error {
	_, err := s.db.Exec(ctx, "SELECT pg_sleep($1)", d.Seconds())
	return err
}

// Unavailable is the store's translation of driver errors.
var Unavailable = unavailable

// MigrateTo applies the migrations up to version v, the schema an older
// release left, for tests of an upgrade.
func (s *Store) MigrateTo(ctx context.Context, v int64) error { return s.migrate(ctx, v) }

// SocketOption returns an integer TCP option (level IPPROTO_TCP) of one of
// the pool's connections.
func (s *Store) SocketOption(ctx context.Context, opt int) (int, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	raw, err := c.Conn().PgConn().Conn().(interface {
		SyscallConn() (syscall.RawConn, error)
	}).SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, opt) }); err != nil {
		return 0, err
	}
	return v, serr
}

// HoldPaymentBatches keeps s from writing its batches of applied payments
// (payment_batch.go), so that a test's calls queue up. queued counts the
// calls waiting; release lets one statement take them, up to a batch
// (and starts none when none waits).
func HoldPaymentBatches(s *Store) (queued func() int, release func()) { return hold(s.payments) }

// HoldOrderReads is HoldPaymentBatches for OrderGet's batches.
func HoldOrderReads(s *Store) (queued func() int, release func()) { return hold(s.orderReads) }

// HoldKeyReads is HoldPaymentBatches for APIKeyGet's batches.
func HoldKeyReads(s *Store) (queued func() int, release func()) { return hold(s.keyReads) }

// HoldOrderCreates is HoldPaymentBatches for OrderCreate's batches.
func HoldOrderCreates(s *Store) (queued func() int, release func()) { return hold(s.orderCreates) }

func hold[P, R any](b *batcher[P, R]) (queued func() int, release func()) {
	// A statement that answered its last call may still be in its loop,
	// which would take the calls queued next: the hold starts once it left.
	for {
		b.mu.Lock()
		if b.running == 0 {
			b.running += b.max
			b.mu.Unlock()
			break
		}
		b.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	queued = func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue)
	}
	release = func() {
		b.mu.Lock()
		b.running -= b.max
		start := len(b.queue) > 0
		if start {
			b.running++
		}
		b.mu.Unlock()
		if start {
			go b.run(context.Background())
		}
	}
	return queued, release
}

// QueryRowForTest runs a query of a test's own on s's pool.
func (s *Store) QueryRowForTest(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.db.QueryRow(ctx, sql, args...)
}

// WouldPing reports whether the pool pings a connection idle for d before
// handing it out.
func (s *Store) WouldPing(d time.Duration) bool {
	return s.pool.Config().ShouldPing(context.Background(), pgxpool.ShouldPingParams{IdleDuration: d})
}

// ArrayParamsEcho sends each of vs ([]int64, []string, [][16]byte,
// []time.Time, []*time.Time, or [][]byte as JSON) as an array parameter
// encoded by arrayParams, and returns each as the server reads it, in
// text, with the statement that read them.
func (s *Store) ArrayParamsEcho(ctx context.Context, vs ...any) (sql string, got []string, err error) {
	p := newArrayParams()
	defer p.release()
	var cols []string
	for i, v := range vs {
		typ := ""
		switch v := v.(type) {
		case []int64:
			p.int8s(v)
			typ = "bigint[]"
		case []string:
			p.texts(v)
			typ = "text[]"
		case [][16]byte:
			p.uuids(v)
			typ = "uuid[]"
		case []time.Time:
			p.times(v)
			typ = "timestamptz[]"
		case []*time.Time:
			p.nullTimes(v)
			typ = "timestamptz[]"
		case [][]byte:
			p.jsons(v)
			typ = "json[]"
		default:
			return "", nil, fmt.Errorf("no array of %T", v)
		}
		cols = append(cols, fmt.Sprintf("$%d::%s::text", i+1, typ))
	}
	sql = "SELECT " + strings.Join(cols, ", ")
	err = s.queryArrays(ctx, sql, sql, p, func(row [][]byte) error {
		for _, c := range row {
			got = append(got, string(c))
		}
		return nil
	})
	return sql, got, err
}

// OrderColumns is the column list of every order read.
const OrderColumns = orderColumns

// ScanOrdersBy reads rows of OrderColumns through pgx's scan (decoded
// false) or decodeOrderRow (true), which scanOrders picks between.
func ScanOrdersBy(rows pgx.Rows, decoded bool) ([]*lapse.Order, error) {
	if decoded {
		return scanOrdersAs(rows, readDecoded)
	}
	return scanOrdersAs(rows, readScanned)
}

// ClaimPlans returns how many times the claim inside Tx was planned
// generically and how many times custom, on the connection s runs on.
func (s *Store) ClaimPlans(ctx context.Context) (generic, custom int64, err error) {
	err = s.db.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
		orderClaimDueLockedSQL).Scan(&generic, &custom)
	return generic, custom, err
}

// APIKeyGetManySQL is the batched read of API keys, whose plans the tests
// check.
const APIKeyGetManySQL = apiKeyGetManySQL
