package payment

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestAckNote: the schemes whose success answer has room for text say, in
// a success, what Lapse noted (a payment held without its order), as valid
// JSON whatever the note holds; those whose answer is fixed have no AckNote.
func TestAckNote(t *testing.T) {
	t.Parallel()
	const note = `held: no order "A&B" exists` + "\n<x>"
	for name, cb := range map[string]lapse.PaymentCallback{"hmac": &HMAC{}, "stripe": newStripe()} {
		na, ok := cb.(lapse.NoteAcker)
		if !ok {
			t.Fatalf("%s has no AckNote", name)
		}
		w := httptest.NewRecorder()
		na.AckNote(w, note)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusOK || body["message"] != note ||
			w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s AckNote: %d %q (%v)", name, w.Code, w.Body, err)
		}
		if name == "hmac" && body["status"] != "ok" || name == "stripe" && body["received"] != true {
			t.Errorf("%s AckNote is not its success answer: %q", name, w.Body)
		}
	}
	for name, cb := range map[string]lapse.PaymentCallback{"alipay": &Alipay{}, "wechatpay": &WeChatPay{}} {
		if _, ok := cb.(lapse.NoteAcker); ok {
			t.Errorf("%s, whose success answer is fixed, has an AckNote", name)
		}
	}
}
