package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// stockLedger is the built-in stock ledger, on with Config.StockLedger: the
// orders of flows that hold reserve their items when they are created (or
// are refused), and its local subscription, StockSubscriber, gives them
// back or uses them up as the flow says. Its API works whether it is on or
// not, so that stock can be set up before it is. Off, it reserves nothing,
// and winds down what orders reserved while it was on (held).
type stockLedger struct {
	e  *Engine
	on bool
	// held is set when the ledger is off and orders still hold stock it
	// reserved (or the store could not say): its subscription stays, to
	// give that back or use it up as those orders end (S4).
	held bool
}

func newStockLedger(e *Engine, cfg Config, flows []*lapse.Flow) *stockLedger {
	l := &stockLedger{e: e, on: cfg.StockLedger}
	if !l.on && slices.ContainsFunc(flows, holding) {
		l.held = stillHeld(e, "stock", e.store.StockCountReserved, "skus_reserved",
			"orders still hold stock reserved while it was on: new orders reserve nothing, and what these orders hold is given back or used up as they end")
	}
	return l
}

func (l *stockLedger) serves(f *lapse.Flow) bool { return l.on && f.Holds }

func (l *stockLedger) windsDown(f *lapse.Flow) bool { return l.held && f.Holds }

func (l *stockLedger) subscriptions(flows []*lapse.Flow) []Subscription {
	return []Subscription{{Name: StockSubscriber, Events: holdingEvents(flows), Flows: flowNames(flows), Local: stockEffect{l.e},
		Schedule: ledgerSchedule, Concurrency: ledgerConcurrency, Filter: l.holds}}
}

func (l *stockLedger) holds(o *lapse.Order) bool { return len(o.Items) > 0 }

// hold reserves the items of a new order.
func (l *stockLedger) hold(ctx context.Context, tx lapse.Store, o *lapse.Order, now time.Time) error {
	lines, err := lapse.StockLines(o.Items)
	if err != nil {
		return err
	}
	return reserveRefusal(tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: lines, At: now}))
}

// reserveRefusal is the error of a creation whose reservation returned
// err.
func reserveRefusal(err error) error {
	switch {
	case errors.Is(err, lapse.ErrStockNotFound):
		// At creation a missing SKU is the caller's conflict with the
		// ledger, not a missing resource of this request.
		return &lapse.Error{Code: lapse.ECONFLICT, Field: "items", Message: lapse.ErrorMessage(err) + "; set it with PUT /v1/stock/{sku} first", Err: err}
	case errors.Is(err, lapse.ErrStockShort):
		// Too little of a SKU is as much about the items as no line of it.
		return &lapse.Error{Code: lapse.ECONFLICT, Field: "items", Message: lapse.ErrorMessage(err), Err: err}
	}
	return err
}

// SetStock sets the on-hand quantity of a SKU in the built-in ledger. It
// cannot go below what live orders reserve (lapse.ErrStockReserved).
// Errors: EINVALID for a SKU or on-hand that lapse.StockSetParams.Validate
// refuses.
func (e *Engine) SetStock(ctx context.Context, sku string, onHand int64) (*lapse.Stock, error) {
	return e.feat.stock.set(ctx, sku, onHand)
}

func (l *stockLedger) set(ctx context.Context, sku string, onHand int64) (*lapse.Stock, error) {
	return l.e.store.StockSet(ctx, &lapse.StockSetParams{SKU: sku, OnHand: onHand, At: l.e.clock.Now()})
}

// Stock returns the ledger line of a SKU, or lapse.ErrStockNotFound.
func (e *Engine) Stock(ctx context.Context, sku string) (*lapse.Stock, error) {
	return e.feat.stock.get(ctx, sku)
}

func (l *stockLedger) get(ctx context.Context, sku string) (*lapse.Stock, error) {
	return l.e.store.StockGet(ctx, sku)
}

// stockEffect gives back or uses up an order's stock when its flow says so.
// It works from the order's stock journal, so it moves exactly what the order
// still holds; its dedup row makes it happen once per event.
type stockEffect struct{ e *Engine }

func (s stockEffect) Apply(ctx context.Context, tx lapse.Store, d *lapse.Delivery) error {
	now := s.e.clock.Now()
	kind, ok := holdingMove(&s.e.flows, d)
	if !ok {
		if strand, err := stranded(ctx, &s.e.flows, tx, d); err != nil || !strand {
			return err
		}
		held, err := stockHeld(ctx, tx, d.OrderID)
		if err != nil || len(held) == 0 {
			return err
		}
		lines := make([]string, len(held))
		for i, it := range held {
			lines[i] = fmt.Sprintf("%s %d", it.SKU, it.Qty)
		}
		return strandedError(d, "stock reserved ("+strings.Join(lines, ", ")+")")
	}
	first, err := tx.EffectClaim(ctx, d.Subscriber, d.EventID, now)
	if err != nil || !first {
		return err
	}
	held, err := stockHeld(ctx, tx, d.OrderID)
	if err != nil || len(held) == 0 {
		return err
	}
	lines, err := lapse.StockLines(held)
	if err != nil {
		return err
	}
	if kind == releaseMove {
		return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: d.OrderID, Kind: lapse.StockRelease, Lines: lines, At: now})
	}
	return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: d.OrderID, Kind: lapse.StockConsume, Lines: lines, At: now})
}

// stockHeld returns what the order orderID still holds by its stock
// journal: reserved less released and consumed, by SKU, in SKU order.
func stockHeld(ctx context.Context, tx lapse.Store, orderID int64) ([]lapse.Item, error) {
	journal, err := tx.StockMoveList(ctx, orderID)
	if err != nil {
		return nil, err
	}
	bySKU := map[string]int64{}
	for _, m := range journal {
		if m.Kind == lapse.StockReserve {
			bySKU[m.SKU] += m.Qty
		} else {
			bySKU[m.SKU] -= m.Qty
		}
	}
	var held []lapse.Item
	for _, sku := range slices.Sorted(maps.Keys(bySKU)) {
		if qty := bySKU[sku]; qty > 0 {
			held = append(held, lapse.Item{SKU: sku, Qty: qty})
		}
	}
	return held, nil
}
