package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// The Store's OrderGet calls outside Tx are batched (batch.go): a payment
// callback reads its order before it writes, and that read was a statement
// and a commit of its own per callback. A batch reads every order it holds
// in one statement, at a snapshot taken after each of its calls was made,
// so each answer is the order as it stood at some moment of its call, as
// a statement of its own would read it. A batch holds an order number once
// (each caller gets an order of its own, which it may change); another
// call for it waits for the next. One read is in flight at a time, as for
// the key reads (apikey.go) and the applied payments (payment_batch.go):
// with two, a call mostly found a slot free and went nearly alone, and
// each statement's fixed cost was paid about twice as often.
const (
	maxOrderReads     = 1
	maxOrderReadBatch = 128
)

// orderReader is the Store's batcher of OrderGet.
type orderReader = batcher[string, *lapse.Order]

func newOrderReader(s *Store, gather time.Duration) *orderReader {
	return &orderReader{max: maxOrderReads, gather: gather, write: s.orderGetMany,
		take: func(queue []*batchCall[string, *lapse.Order]) (batch, rest []*batchCall[string, *lapse.Order]) {
			return takeDistinct(queue, maxOrderReadBatch, func(orderNo string) string { return orderNo })
		}}
}

const orderGetManySQL = "SELECT " + orderColumns + " FROM orders WHERE order_no = ANY($1)"

// orderGetBatched is OrderGet through s's batches.
func (s *Store) orderGetBatched(ctx context.Context, orderNo string) (*lapse.Order, error) {
	c, err := s.orderReads.do(ctx, orderNo)
	if err != nil {
		return nil, fmt.Errorf("postgres: get order %s: %w", orderNo, err)
	}
	if c.decided {
		return c.r, c.err
	}
	return s.orderGet(ctx, orderNo)
}

// orderGetMany reads the orders of a batch, deciding every call when its
// statement succeeds: an order it did not find does not exist. A call
// alone is read by OrderGet's own statement.
func (s *Store) orderGetMany(ctx context.Context, batch []*batchCall[string, *lapse.Order]) {
	if len(batch) == 1 {
		c := batch[0]
		c.r, c.err = s.orderGet(c.ctx, c.p)
		c.decided = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	nos := make([]string, len(batch))
	for i, c := range batch {
		nos[i] = c.p
	}
	rows, err := s.db.Query(ctx, orderGetManySQL, nos)
	if err != nil {
		return // each call is read alone, and reports its own error
	}
	os, err := scanOrders(rows)
	if err != nil {
		return
	}
	byNo := make(map[string]*lapse.Order, len(os))
	for _, o := range os {
		byNo[o.OrderNo] = o
	}
	for _, c := range batch {
		if o := byNo[c.p]; o != nil {
			c.r = o
		} else {
			c.err = lapse.ErrOrderNotFound
		}
		c.decided = true
	}
}

// orderGet is OrderGet's own statement.
func (s *Store) orderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	o, err := scanOrder(s.db.QueryRow(ctx, "SELECT "+orderColumns+" FROM orders WHERE order_no = $1", orderNo))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrOrderNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get order %s: %w", orderNo, err)
	}
	return o, nil
}
