package jsonbody

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// notice is payment.Notice (payment imports this package, so the test
// cannot import it).
type notice struct {
	Kind     lapse.PaymentNoticeKind `json:"kind"`
	TxnID    string                  `json:"txn_id"`
	RefundID string                  `json:"refund_id,omitempty"`
	OrderNo  string                  `json:"order_no"`
	Amount   int64                   `json:"amount"`
	Currency string                  `json:"currency"`
	Merchant string                  `json:"merchant"`
	PaidAt   time.Time               `json:"paid_at"`
}

// orderCreate is the http package's orderCreateRequest.
type orderCreate struct {
	OrderNo    *string         `json:"order_no"`
	Flow       *string         `json:"flow"`
	UserID     *string         `json:"user_id"`
	Amount     *int64          `json:"amount"`
	Currency   *string         `json:"currency"`
	Items      []lapse.Item    `json:"items"`
	Coupon     string          `json:"coupon"`
	TTL        *string         `json:"ttl"`
	DeadlineAt *string         `json:"deadline_at"`
	Metadata   json.RawMessage `json:"metadata"`
}

const (
	callbackBody = `{"kind":"paid","txn_id":"T-C-123","order_no":"C-000123","amount":2500,"currency":"CNY","merchant":"m-1","paid_at":"2026-12-02T14:00:00.123456Z"}`
	orderBody    = `{"order_no":"C-000123","flow":"checkout","user_id":"u-42","amount":7497,"currency":"CNY",
		"items":[{"sku":"tea-green-250g","qty":2},{"sku":"cup-white","qty":1},{"sku":"gift-wrap","qty":1}],
		"coupon":"WINTER10","ttl":"15m",
		"metadata":{"channel":"app","campaign":"满100元立减10元","ab":{"variant":"b","weight":0.25},"tags":["new","mobile"]}}`
)

func BenchmarkDecode(b *testing.B) {
	b.Run("callback", func(b *testing.B) {
		body := []byte(callbackBody)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var n notice
			if err := Decode(body, &n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("order", func(b *testing.B) {
		body := []byte(orderBody)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var o orderCreate
			if err := Decode(body, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheck is the part of Decode before encoding/json's: check, which
// walks a valid body byte by byte, beside the token walk it replaced.
func BenchmarkCheck(b *testing.B) {
	for _, c := range []struct {
		name string
		body string
		typ  reflect.Type
	}{
		{"callback", callbackBody, reflect.TypeFor[notice]()},
		{"order", orderBody, reflect.TypeFor[orderCreate]()},
	} {
		for _, w := range []struct {
			name string
			walk func([]byte, reflect.Type, bool) error
		}{
			{"bytes", check},
			{"tokens", walkTokens},
		} {
			b.Run(c.name+"/"+w.name, func(b *testing.B) {
				body := []byte(c.body)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if err := w.walk(body, c.typ, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
