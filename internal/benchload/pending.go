// Package benchload fills a PostgreSQL store with millions of pending
// orders quickly, for the benchmarks of an idle engine, of its memory and
// of a long transaction. It is no part of Lapse itself.
package benchload

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/postgres"
)

// Templates is how many orders Pending writes through OrderCreateMany; the
// others are copies of them.
const Templates = 1000

// Pending loads the n orders order(0) … order(n-1) with their creation log
// rows and deadline rows into s (whose database dsn names), as
// OrderCreateMany would write them, without their outbox rows (their
// order.created events are taken as delivered).
//
// Only the first Templates orders go through OrderCreateMany (COPY); the
// server makes the rest from them, chunk by chunk, in one statement each:
// order i is a copy of order i % Templates, with its log row, but for its
// number, deadline and request hash. So order must number order i
// prefix + i in eight digits, and may differ from order i % Templates in
// nothing else. The first and the last orders are read back and compared
// with what order makes, so a loader that breaks this fails.
func Pending(ctx context.Context, s *postgres.Store, dsn, prefix string, n int, order func(i int) *lapse.OrderCreateParams) error {
	const chunk, loaders = 100000, 2
	if n < 1 {
		return errors.New("benchload: no orders to load")
	}
	if no := order(0).Order.OrderNo; no != number(prefix, 0) {
		return fmt.Errorf("benchload: order 0 is numbered %q, want %q", no, number(prefix, 0))
	}
	first := make([]*lapse.OrderCreateParams, 0, min(n, Templates))
	for i := range min(n, Templates) {
		p := order(i)
		p.Outbox = nil
		first = append(first, p)
	}
	if err := s.OrderCreateMany(ctx, first); err != nil {
		return err
	}
	var next atomic.Int64
	next.Store(Templates)
	var wg sync.WaitGroup
	errs := make(chan error, loaders)
	for range loaders {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			for {
				from := int(next.Add(chunk)) - chunk
				if from >= n {
					return
				}
				ats := make([]time.Time, 0, chunk)
				hashes := make([]string, 0, chunk)
				for i := from; i < min(from+chunk, n); i++ {
					p := order(i)
					ats, hashes = append(ats, *p.Order.DeadlineAt), append(hashes, p.Order.RequestHash)
				}
				if _, err := conn.Exec(ctx, fromTemplates, prefix, from, ats, hashes, Templates); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for _, i := range []int{0, n - 1} {
		if err := readsBack(ctx, s, order(i)); err != nil {
			return fmt.Errorf("benchload: order %d: %w", i, err)
		}
	}
	return nil
}

func number(prefix string, i int) string { return fmt.Sprintf("%s%08d", prefix, i) }

// readsBack checks that the order of want is stored as want says, with its
// log row, to the microsecond and in UTC.
func readsBack(ctx context.Context, s *postgres.Store, want *lapse.OrderCreateParams) error {
	got, err := s.OrderGet(ctx, want.Order.OrderNo)
	if err != nil {
		return err
	}
	log, err := s.TransitionList(ctx, got.ID)
	if err != nil {
		return err
	}
	o, l := *want.Order, want.Log
	at := lapse.Truncate(*o.DeadlineAt)
	o.ID, o.DeadlineAt, o.CreatedAt, o.UpdatedAt, l.CreatedAt = got.ID, &at, lapse.Truncate(o.CreatedAt), lapse.Truncate(o.UpdatedAt), lapse.Truncate(l.CreatedAt)
	if len(log) == 1 {
		l.ID, l.OrderID = log[0].ID, got.ID
	}
	if !reflect.DeepEqual(got, &o) || len(log) != 1 || !reflect.DeepEqual(*log[0], l) {
		return fmt.Errorf("reads back as %+v with log %+v, want %+v with %+v", got, log, &o, l)
	}
	return nil
}

// fromTemplates inserts the orders numbered $2 onwards, prefixed $1, due at
// $3 with request hashes $4, each a copy of template $2 % $5 with its
// creation log row and its deadline row.
const fromTemplates = `WITH g AS (
	SELECT $2::bigint + k - 1 AS i, at, hash FROM unnest($3::timestamptz[], $4::text[]) WITH ORDINALITY AS u(at, hash, k)
), o AS (
	INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon, metadata,
		version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash)
	SELECT $1 || lpad(g.i::text, 8, '0'), t.flow, t.state, g.at, t.amount, t.currency, t.user_id, t.items, t.coupon, t.metadata,
		t.version, t.created_at, t.updated_at, t.closed_at, t.close_reason, t.fired_by, g.hash
	FROM g JOIN orders t ON t.order_no = $1 || lpad((g.i % $5)::text, 8, '0')
	ORDER BY g.i
	RETURNING id, deadline_at, flow
), d AS (
	INSERT INTO order_deadlines (order_id, deadline_at, flow) SELECT id, deadline_at, flow FROM o
)
INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
SELECT o.id, l.from_state, l.to_state, l.event, l.version, l.fired_by, l.actor, l.reason, l.created_at
FROM o, (SELECT * FROM transitions WHERE order_id = (SELECT id FROM orders WHERE order_no = $1 || lpad('0', 8, '0'))) l`

// Vacuum runs VACUUM ANALYZE on the tables that hold the orders just
// loaded (orders, and order_deadlines where the schema has it), as
// autovacuum would have done for orders created long before their
// deadline.
func Vacuum(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tables := "orders"
	var deadlines *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('order_deadlines')::text").Scan(&deadlines); err != nil {
		return err
	}
	if deadlines != nil {
		tables += ", order_deadlines"
	}
	_, err = conn.Exec(ctx, "VACUUM ANALYZE "+tables)
	return err
}
