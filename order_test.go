package lapse_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestSameRequestLinesInAnyOrder: lines sent in another order are the same
// request; another quantity is not; and an order created before lines were
// taken in any order, whose fingerprint is the digest of its lines as sent,
// is still found to be the same request when it is sent again.
func TestSameRequestLinesInAnyOrder(t *testing.T) {
	req := func(items ...lapse.Item) *lapse.OrderCreate {
		return &lapse.OrderCreate{OrderNo: "A-1", Flow: "checkout", UserID: "u", Amount: 100, Currency: "CNY", Items: items}
	}
	sent := req(lapse.Item{SKU: "b", Qty: 1}, lapse.Item{SKU: "a", Qty: 2}, lapse.Item{SKU: "a", Qty: 1})
	if !req(lapse.Item{SKU: "a", Qty: 1}, lapse.Item{SKU: "b", Qty: 1}, lapse.Item{SKU: "a", Qty: 2}).SameRequest(sent.Fingerprint()) {
		t.Error("the same lines in another order are another request")
	}
	if req(lapse.Item{SKU: "a", Qty: 3}, lapse.Item{SKU: "b", Qty: 1}).SameRequest(sent.Fingerprint()) {
		t.Error("lines of one SKU added up are the same request; the order would show lines it was not sent")
	}
	if req(lapse.Item{SKU: "b", Qty: 2}, lapse.Item{SKU: "a", Qty: 1}, lapse.Item{SKU: "a", Qty: 1}).SameRequest(sent.Fingerprint()) {
		t.Error("other quantities are the same request")
	}
	// The digest an order created by an earlier version kept: its lines as
	// they were sent.
	legacy := sha256.Sum256([]byte(`{"flow":"checkout","user_id":"u","amount":100,"currency":"CNY",` +
		`"items":[{"sku":"b","qty":1},{"sku":"a","qty":2},{"sku":"a","qty":1}],"coupon":"","ttl":0,"deadline_at":"","metadata":null}`))
	if !sent.SameRequest(hex.EncodeToString(legacy[:])) {
		t.Error("the request of an order created before lines were taken in any order, sent again, is another request")
	}
}

// TestSameRequestEmptyMetadata: metadata that is an empty object is the
// same request as none, and an order created with {} before that, whose
// fingerprint has it, still matches {} sent again.
func TestSameRequestEmptyMetadata(t *testing.T) {
	none := &lapse.OrderCreate{OrderNo: "A-1", Flow: "checkout", UserID: "u", Amount: 100, Currency: "CNY"}
	empty := *none
	empty.Metadata = []byte(`{ }`)
	if !empty.SameRequest(none.Fingerprint()) || !none.SameRequest(empty.Fingerprint()) {
		t.Error("metadata {} and none are other requests")
	}
	other := *none
	other.Metadata = []byte(`{"a":{}}`)
	if other.SameRequest(none.Fingerprint()) {
		t.Error(`metadata {"a":{}} is the same request as none`)
	}
	legacy := sha256.Sum256([]byte(`{"flow":"checkout","user_id":"u","amount":100,"currency":"CNY",` +
		`"items":null,"coupon":"","ttl":0,"deadline_at":"","metadata":{}}`))
	if !empty.SameRequest(hex.EncodeToString(legacy[:])) {
		t.Error("the request of an order created with metadata {} before it was taken for none, sent again, is another request")
	}
}
