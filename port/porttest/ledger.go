package porttest

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/lapsehq/lapse"
)

// Move is one line of the fake's stock journal: what one applied event did
// to one SKU.
type Move struct {
	Key     string // the Idempotency-Key of the event that made it
	OrderNo string
	Kind    lapse.StockMoveKind
	SKU     string
	Qty     int64
}

// line is the ledger of one SKU.
type line struct{ initial, onHand, reserved int64 }

// orderEvent is what the fake reads of an event's body.
type orderEvent struct {
	Type  string `json:"type"`
	Order *struct {
		OrderNo string       `json:"order_no"`
		Items   []lapse.Item `json:"items"`
	} `json:"order"`
}

// apply performs ev under key, with s.mu held, and returns the answer's
// status and message. The checks all come before the first change, so a
// refused event changes nothing.
func (s *StockService) apply(key string, ev *orderEvent) (int, string) {
	if s.applied[key] > 0 && s.dedup {
		s.stats.Duplicates++
		return http.StatusConflict, "already applied"
	}
	var kind lapse.StockMoveKind
	// The types are spelled out, as in a merchant's code: the protocol is
	// the contract, not Lapse's constants.
	switch ev.Type {
	case "order.created":
		kind = lapse.StockReserve
	case "order.closed":
		kind = lapse.StockRelease
	case "order.paid":
		kind = lapse.StockConsume
	}
	if kind != "" && ev.Order == nil {
		s.stats.Refused++
		return http.StatusUnprocessableEntity, ev.Type + " event carries no order"
	}
	var items []lapse.Item
	switch kind {
	case lapse.StockReserve:
		need := map[string]int64{}
		for _, it := range ev.Order.Items {
			if it.Qty <= 0 {
				s.stats.Refused++
				return http.StatusUnprocessableEntity, fmt.Sprintf("sku %q: quantity must be positive", it.SKU)
			}
			need[it.SKU] += it.Qty
		}
		for _, sku := range slices.Sorted(maps.Keys(need)) {
			l := s.stock[sku]
			switch {
			case l == nil:
				s.stats.Refused++
				return http.StatusUnprocessableEntity, fmt.Sprintf("sku %q: unknown", sku)
			case l.onHand-l.reserved < need[sku]:
				s.stats.Refused++
				return http.StatusUnprocessableEntity, fmt.Sprintf("sku %q: %d available, %d asked", sku, l.onHand-l.reserved, need[sku])
			}
		}
		items = ev.Order.Items
	case lapse.StockRelease, lapse.StockConsume:
		// What was reserved is what goes back or out, whatever the order
		// says now.
		held, ok := s.holds[ev.Order.OrderNo]
		if !ok {
			s.stats.Refused++
			return http.StatusUnprocessableEntity, fmt.Sprintf("order %q holds no stock", ev.Order.OrderNo)
		}
		for _, sku := range slices.Sorted(maps.Keys(held)) {
			items = append(items, lapse.Item{SKU: sku, Qty: held[sku]})
		}
		delete(s.holds, ev.Order.OrderNo)
	}
	for _, it := range items {
		l := s.stock[it.SKU]
		switch kind {
		case lapse.StockReserve:
			l.reserved += it.Qty
			h := s.holds[ev.Order.OrderNo]
			if h == nil {
				h = map[string]int64{}
				s.holds[ev.Order.OrderNo] = h
			}
			h[it.SKU] += it.Qty
		case lapse.StockRelease:
			l.reserved -= it.Qty
		case lapse.StockConsume:
			l.reserved -= it.Qty
			l.onHand -= it.Qty
		}
		s.moves = append(s.moves, Move{Key: key, OrderNo: ev.Order.OrderNo, Kind: kind, SKU: it.SKU, Qty: it.Qty})
	}
	if kind == lapse.StockReserve && s.holds[ev.Order.OrderNo] == nil {
		s.holds[ev.Order.OrderNo] = map[string]int64{} // an order of no items still holds, and may close
	}
	s.applied[key]++
	s.stats.Applied++
	return http.StatusOK, "applied"
}

// Stock returns the ledger line of sku; a zero line for an unknown SKU.
func (s *StockService) Stock(sku string) lapse.Stock {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.stock[sku]
	if l == nil {
		return lapse.Stock{SKU: sku}
	}
	return lapse.Stock{SKU: sku, OnHand: l.onHand, Reserved: l.reserved}
}

// Held returns what order orderNo holds now, by SKU; nil when it holds
// nothing (never reserved, or released or consumed).
func (s *StockService) Held(orderNo string) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.holds[orderNo])
}

// Moves returns the stock journal in the order the moves were applied.
func (s *StockService) Moves() []Move {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.moves)
}

// CheckLedger checks the ledger's invariants: per SKU, 0 ≤ reserved ≤
// on_hand, reserved equals what the orders hold, and on_hand is the initial
// stock less what was consumed; per order, reserved − released − consumed
// equals what it still holds, which is zero once it was closed or paid.
func (s *StockService) CheckLedger() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	held, consumed := map[string]int64{}, map[string]int64{}
	for _, h := range s.holds {
		for sku, q := range h {
			held[sku] += q
		}
	}
	type orderSKU struct{ order, sku string }
	balance := map[orderSKU]int64{}
	for _, m := range s.moves {
		k := orderSKU{m.OrderNo, m.SKU}
		switch m.Kind {
		case lapse.StockReserve:
			balance[k] += m.Qty
		case lapse.StockRelease:
			balance[k] -= m.Qty
		case lapse.StockConsume:
			balance[k] -= m.Qty
			consumed[m.SKU] += m.Qty
		}
	}
	for _, sku := range slices.Sorted(maps.Keys(s.stock)) {
		l := s.stock[sku]
		if l.reserved < 0 || l.onHand < 0 || l.reserved > l.onHand {
			errs = append(errs, fmt.Errorf("sku %q: on_hand %d, reserved %d", sku, l.onHand, l.reserved))
		}
		if l.reserved != held[sku] {
			errs = append(errs, fmt.Errorf("sku %q: reserved %d but orders hold %d", sku, l.reserved, held[sku]))
		}
		if l.onHand != l.initial-consumed[sku] {
			errs = append(errs, fmt.Errorf("sku %q: on_hand %d, expected %d − %d consumed", sku, l.onHand, l.initial, consumed[sku]))
		}
	}
	for k, b := range balance {
		if h := s.holds[k.order][k.sku]; b != h {
			errs = append(errs, fmt.Errorf("order %q, sku %q: reserved − released − consumed = %d, but it holds %d", k.order, k.sku, b, h))
		}
	}
	return errors.Join(errs...)
}

// AssertLedger fails tb when CheckLedger finds a broken invariant.
func (s *StockService) AssertLedger(tb testing.TB) {
	tb.Helper()
	if err := s.CheckLedger(); err != nil {
		tb.Errorf("stock ledger: %v", err)
	}
}

// AssertAppliedAtMostOnce fails tb for every key that was applied more than
// once. With deduplication on the service refuses that itself; with
// Options.DisableDedup the assertion checks the caller's discipline.
func (s *StockService) AssertAppliedAtMostOnce(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(s.applied)) {
		if n := s.applied[key]; n > 1 {
			tb.Errorf("key %s applied %d times (sent %d times)", key, n, s.sent[key])
		}
	}
}
