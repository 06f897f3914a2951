package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// SignatureHeader carries the signature of Lapse's generic HMAC scheme:
//
//	Lapse-Signature: t=1764460800,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//
// t is the sending time in Unix seconds; v1 is the lowercase hex
// HMAC-SHA256, under the shared secret, of t, a '.', and the raw body:
// HMAC(secret, "1764460800." + body). A header may carry several v1 values
// (one per secret while a secret is rotated); one match verifies.
const SignatureHeader = "Lapse-Signature"

// DefaultTolerance is how far a callback's timestamp may be from now, either
// way, unless configured otherwise.
const DefaultTolerance = 5 * time.Minute

// HMAC verifies callbacks signed with Lapse's generic scheme (see
// SignatureHeader) whose body is a Notice in JSON. The zero Tolerance is
// DefaultTolerance.
type HMAC struct {
	Provider  string   // the name notices carry, as in the callback URL
	Secrets   [][]byte // every secret that may have signed; the first signs
	Tolerance time.Duration
}

var _ lapse.PaymentCallback = (*HMAC)(nil)

// Notice is the JSON body of an HMAC-scheme callback. amount is in minor
// units (a refunded notice's is that refund's own); paid_at is RFC 3339.
type Notice struct {
	Kind     lapse.PaymentNoticeKind `json:"kind"`
	TxnID    string                  `json:"txn_id"`
	RefundID string                  `json:"refund_id,omitempty"`
	OrderNo  string                  `json:"order_no"`
	Amount   int64                   `json:"amount"`
	Currency string                  `json:"currency"`
	Merchant string                  `json:"merchant"`
	PaidAt   time.Time               `json:"paid_at"`
}

// Sign returns the SignatureHeader value for body sent at t, signed with the
// first secret.
func (h *HMAC) Sign(body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(h.Secrets[0], ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks the SignatureHeader of a callback against every secret and
// its timestamp against the tolerance, then reads its Notice.
func (h *HMAC) Verify(hdr http.Header, body []byte, now time.Time) (*lapse.PaymentNotice, error) {
	header := hdr.Get(SignatureHeader)
	if header == "" {
		return nil, lapse.Refine(lapse.ErrSignature, "the %s header is missing", SignatureHeader)
	}
	if err := checkSignature(header, h.Secrets, body, now, h.tolerance(), "body"); err != nil {
		return nil, err
	}
	var n noticeWire
	if err := decodeStrict(body, &n); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the callback body: %s", lapse.ErrorMessage(err))
	}
	return n.notice(h.Provider, body)
}

// noticeWire is a Notice as Verify reads it: the amount and the time as
// sent, so that a verified callback with one Lapse cannot take is
// unreadable, not refused.
type noticeWire struct {
	Kind     lapse.PaymentNoticeKind `json:"kind"`
	TxnID    string                  `json:"txn_id"`
	RefundID string                  `json:"refund_id,omitempty"`
	OrderNo  string                  `json:"order_no"`
	Amount   json.RawMessage         `json:"amount"`
	Currency string                  `json:"currency"`
	Merchant string                  `json:"merchant"`
	PaidAt   json.RawMessage         `json:"paid_at"`
}

// checkSignature checks a SignatureHeader value: its timestamp within tol of
// now, and one of its v1 signatures the HMAC, under one of secrets, of the
// timestamp (in decimal), a '.' and msg (what names msg in the error). Every
// error wraps lapse.ErrSignature.
func checkSignature(header string, secrets [][]byte, msg []byte, now time.Time, tol time.Duration, what string) error {
	sec, sigs, err := parseTimedSignature(header, SignatureHeader)
	if err != nil {
		return err
	}
	if err := inWindow(time.Unix(sec, 0), now, tol); err != nil {
		return err
	}
	if !signedBy(secrets, sigs, strconv.FormatInt(sec, 10), msg) {
		return lapse.Refine(lapse.ErrSignature, "no signature in the %s header matches the %s", SignatureHeader, what)
	}
	return nil
}

// signedBy reports whether one of sigs is the HMAC, under one of secrets,
// of ts, a '.' and msg. An empty secret never matches: anyone can compute
// the HMAC under an empty key.
func signedBy(secrets, sigs [][]byte, ts string, msg []byte) bool {
	for _, secret := range secrets {
		if len(secret) == 0 {
			continue
		}
		want := mac(secret, ts, msg)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}

// parseTimedSignature returns the timestamp and the v1 signatures of a
// header of the form t=<unix seconds>,v1=<hex>[,v1=<hex>…], named name in
// its errors (Lapse's SignatureHeader and Stripe's use one form). A header
// without exactly one t, or without a v1 that is hex, is refused: with two
// timestamps, which one was signed?
func parseTimedSignature(header, name string) (int64, [][]byte, error) {
	malformed := lapse.Refine(lapse.ErrSignature, "the %s header is malformed: want t=<unix seconds>,v1=<hex>", name)
	var ts []string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = append(ts, v)
		case "v1":
			// Like Stripe's libraries, skip a v1 that is not hex rather
			// than fail: another v1 may still match.
			if sig, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	if len(ts) != 1 || len(sigs) == 0 {
		return 0, nil, malformed
	}
	sec, err := strconv.ParseInt(ts[0], 10, 64)
	if err != nil {
		return 0, nil, malformed
	}
	return sec, sigs, nil
}

// notice checks w and returns it in Lapse's terms: EINVALID when it names
// no transaction, order or (for a refund) refund; unreadable when its kind,
// amount or time cannot be taken as they are.
func (w *noticeWire) notice(provider string, raw []byte) (*lapse.PaymentNotice, error) {
	switch {
	case w.TxnID == "":
		return nil, lapse.Errorf(lapse.EINVALID, "txn_id is missing")
	case w.Kind == lapse.NoticeRefunded && w.RefundID == "":
		return nil, lapse.Errorf(lapse.EINVALID, "refund_id is missing from a refund notice")
	case w.OrderNo == "":
		return nil, lapse.Errorf(lapse.EINVALID, "order_no is missing")
	}
	n := &lapse.PaymentNotice{Provider: provider, Kind: w.Kind, TxnID: w.TxnID, RefundID: w.RefundID, OrderNo: w.OrderNo,
		Currency: w.Currency, Merchant: w.Merchant, Raw: raw}
	amount, ok := minorUnits(w.Amount)
	var at time.Time
	terr := at.UnmarshalJSON(w.PaidAt)
	switch {
	case w.Kind != lapse.NoticePaid && w.Kind != lapse.NoticeRefunded:
		return unreadable(n, "kind %q is not paid or refunded", w.Kind), nil
	case !ok:
		return unreadable(n, "amount %s is not a positive integer number of minor units", sent(w.Amount)), nil
	case terr != nil || at.IsZero():
		return unreadable(n, "paid_at %s is not an RFC 3339 time", sent(w.PaidAt)), nil
	}
	n.Amount, n.PaidAt = amount, at.UTC()
	return n, nil
}

// Ack answers 200 {"status":"ok"} for a callback handled, and otherwise a
// status by the error's code with {"status":"error","message":…}, so that
// the sender retries.
func (h *HMAC) Ack(w http.ResponseWriter, err error) {
	ackJSON(w, err)
}

// AckNote answers a callback handled with note: {"status":"ok","message":…}.
func (h *HMAC) AckNote(w http.ResponseWriter, note string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	msg, _ := json.Marshal(note)
	w.Write([]byte(`{"status":"ok","message":` + string(msg) + "}\n"))
}

func (h *HMAC) tolerance() time.Duration {
	if h.Tolerance > 0 {
		return h.Tolerance
	}
	return DefaultTolerance
}

// inWindow refuses a callback timestamp further than tol from now, either
// way: a stale one may be a replay, a future one a forged clock.
func inWindow(t, now time.Time, tol time.Duration) error {
	if d := now.Sub(t); d > tol || d < -tol {
		return lapse.Refine(lapse.ErrSignature, "the callback timestamp is %v away from now; at most %v is accepted", d.Round(time.Second), tol)
	}
	return nil
}

// ackJSON writes the JSON acknowledgement that HMAC and Sandbox callbacks get.
func ackJSON(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err == nil {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"status":"ok"}` + "\n"))
		return
	}
	w.WriteHeader(ackStatus(err))
	msg, _ := json.Marshal(lapse.ErrorMessage(err))
	w.Write([]byte(`{"status":"error","message":` + string(msg) + "}\n"))
}

// ackStatus is the HTTP status for a callback that failed with err.
func ackStatus(err error) int {
	var le *lapse.Error
	if !errors.As(err, &le) {
		return http.StatusInternalServerError
	}
	switch le.Code {
	case lapse.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case lapse.EINVALID:
		return http.StatusBadRequest
	case lapse.ENOTFOUND:
		return http.StatusNotFound
	case lapse.ECONFLICT:
		return http.StatusConflict
	case lapse.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
