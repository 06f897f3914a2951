package payment

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// Alipay verifies Alipay's asynchronous notifications: a POSTed
// application/x-www-form-urlencoded body whose sign parameter is the base64
// RSA-SHA256 (RSA2, PKCS #1 v1.5) signature, by Alipay's key, of every other
// parameter but sign_type with a value, sorted by name and joined as
// k1=v1&k2=v2 (names and values URL-decoded).
//
// The scheme has no timestamp window. notify_time is signed but only
// informational: Alipay resends an unacknowledged notification with the
// same content for about a day, so a window would refuse its own retries,
// and a replayed notice is harmless because Lapse applies each payment (by
// trade_no) and refund (by out_biz_no) once.
//
// TRADE_SUCCESS and TRADE_FINISHED become paid notices; any notice carrying
// refund_fee (a partial refund keeps TRADE_SUCCESS, a full one is
// TRADE_CLOSED) becomes a refunded one. WAIT_BUYER_PAY and TRADE_CLOSED
// without refund_fee verify and are acknowledged without a notice.
type Alipay struct {
	Provider  string         // the name notices carry, as in the callback URL
	AppID     string         // the app_id every notice must be for
	SellerID  string         // the seller_id (2088…) every notice must be for
	PublicKey *rsa.PublicKey // Alipay's public key (not the app's); see ParseAlipayPublicKey
	// Location is the zone of the notices' times; nil is China Standard
	// Time, fixed so that no tzdata is needed.
	Location *time.Location
}

var _ lapse.PaymentCallback = (*Alipay)(nil)

// alipayTime is the layout of gmt_payment and gmt_refund. Parsing also
// takes the milliseconds gmt_refund comes with.
const alipayTime = "2006-01-02 15:04:05"

// alipayMerged finds a value that holds what looks like another parameter.
// The signed string cannot tell a=1&b=2 from a single a="1&b=2", so a
// captured notice could have its refund_fee folded into the value before
// it, and read as a payment; such a value is refused.
var alipayMerged = regexp.MustCompile(`&[^&=]+=`)

// Verify checks a notification's signature, then its app_id and seller_id,
// and reads it. A body that cannot be read unambiguously (a parameter given
// twice, a malformed escape) fails verification: which of two values would
// the signature be for?
func (a *Alipay) Verify(_ http.Header, body []byte, _ time.Time) (*lapse.PaymentNotice, error) {
	p, err := parseAlipayForm(body)
	if err != nil {
		return nil, err
	}
	switch {
	case p["sign"] == "":
		return nil, lapse.Refine(lapse.ErrSignature, "the sign parameter is missing")
	case p["sign_type"] != "RSA2":
		return nil, lapse.Refine(lapse.ErrSignature, "sign_type %q is not RSA2", p["sign_type"])
	case a.PublicKey == nil:
		return nil, lapse.Errorf(lapse.EINTERNAL, "no Alipay public key is configured")
	}
	sig, err := base64.StdEncoding.DecodeString(p["sign"])
	if err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the sign parameter is not base64")
	}
	content, err := alipaySignContent(p)
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256([]byte(content))
	if err := rsa.VerifyPKCS1v15(a.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the sign parameter does not match the notification")
	}
	return a.notice(p, body)
}

// parseAlipayForm decodes a form body, refusing what url.ParseQuery would
// let through: a parameter given twice, a part without '=', an empty name.
func parseAlipayForm(body []byte) (map[string]string, error) {
	if len(body) == 0 {
		return nil, lapse.Refine(lapse.ErrSignature, "the notification body is empty")
	}
	p := map[string]string{}
	for part := range strings.SplitSeq(string(body), "&") {
		k, v, ok := strings.Cut(part, "=")
		key, kerr := url.QueryUnescape(k)
		val, verr := url.QueryUnescape(v)
		switch {
		case !ok || kerr != nil || verr != nil || key == "":
			return nil, lapse.Refine(lapse.ErrSignature, "the notification body is not a well-formed form")
		case strings.ContainsAny(key, "&="):
			return nil, lapse.Refine(lapse.ErrSignature, "parameter name %q cannot be signed unambiguously", key)
		}
		if _, dup := p[key]; dup {
			return nil, lapse.Refine(lapse.ErrSignature, "parameter %q appears twice", key)
		}
		p[key] = val
	}
	return p, nil
}

// alipaySignContent returns the string Alipay signed for the parameters p.
func alipaySignContent(p map[string]string) (string, error) {
	keys := make([]string, 0, len(p))
	for k, v := range p {
		if k == "sign" || k == "sign_type" || v == "" {
			continue
		}
		if alipayMerged.MatchString(v) {
			return "", lapse.Refine(lapse.ErrSignature, "parameter %q holds what looks like another parameter; the signature cannot tell them apart", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + p[k])
	}
	return b.String(), nil
}

// notice reads verified parameters in Lapse's terms.
func (a *Alipay) notice(p map[string]string, raw []byte) (*lapse.PaymentNotice, error) {
	switch {
	case p["app_id"] == "" || p["app_id"] != a.AppID:
		return nil, lapse.Errorf(lapse.EINVALID, "app_id %q is not this app's", p["app_id"])
	case p["seller_id"] == "" || p["seller_id"] != a.SellerID:
		return nil, lapse.Errorf(lapse.EINVALID, "seller_id %q is not this seller's", p["seller_id"])
	}
	n := &lapse.PaymentNotice{Provider: a.Provider, Kind: lapse.NoticePaid, TxnID: p["trade_no"], OrderNo: p["out_trade_no"],
		Currency: "CNY", Merchant: p["seller_id"], Raw: raw}
	if c := p["trans_currency"]; c != "" {
		n.Currency = c
	}
	amountField, timeField := "total_amount", "gmt_payment"
	switch status := p["trade_status"]; {
	case status == "WAIT_BUYER_PAY", status == "TRADE_CLOSED" && p["refund_fee"] == "":
		return nil, nil
	case status != "TRADE_SUCCESS" && status != "TRADE_FINISHED" && status != "TRADE_CLOSED":
		return nil, lapse.Errorf(lapse.EINVALID, "trade_status %q is not one Alipay documents", status)
	case p["refund_fee"] != "":
		n.Kind, amountField, timeField = lapse.NoticeRefunded, "refund_fee", "gmt_refund"
		n.RefundID = p["out_biz_no"]
		if n.RefundID == "" {
			n.RefundID = n.TxnID + "-refund"
		}
	}
	amount, ok := parseFen(p[amountField])
	at, err := time.ParseInLocation(alipayTime, p[timeField], a.location())
	switch {
	case n.TxnID == "":
		return nil, lapse.Errorf(lapse.EINVALID, "trade_no is missing")
	case n.OrderNo == "":
		return nil, lapse.Errorf(lapse.EINVALID, "out_trade_no is missing")
	case !ok || amount <= 0:
		return nil, lapse.Errorf(lapse.EINVALID, "%s %q is not a positive amount of yuan with at most 2 decimals", amountField, p[amountField])
	case !lapse.ValidCurrency(n.Currency):
		return nil, lapse.Errorf(lapse.EINVALID, "trans_currency %q is not an ISO 4217 code", n.Currency)
	case err != nil:
		return nil, lapse.Errorf(lapse.EINVALID, "%s %q is not a time like %s", timeField, p[timeField], alipayTime)
	}
	n.Amount, n.PaidAt = amount, at.UTC()
	return n, nil
}

// parseFen reads a yuan amount as Alipay writes it ("88.80", "0.01") into
// fen, exactly: digits, an optional '.' and one or two more digits, no sign,
// exponent or leading zero. Floats would turn 0.29 into 28 fen.
func parseFen(s string) (int64, bool) {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(s string) bool {
		return strings.Trim(s, "0123456789") == ""
	}
	// Twelve digits of yuan are far above any trade and far below overflow.
	if whole == "" || len(whole) > 12 || !digits(whole) || (len(whole) > 1 && whole[0] == '0') {
		return 0, false
	}
	if dot && (frac == "" || len(frac) > 2 || !digits(frac)) {
		return 0, false
	}
	var fen int64
	for _, c := range whole + (frac + "00")[:2] {
		fen = fen*10 + int64(c-'0')
	}
	return fen, true
}

// Ack answers as Alipay asks: exactly "success" for a notification handled,
// and "failure" otherwise, with a status by the error's code. Anything but
// "success" makes Alipay notify again.
func (a *Alipay) Ack(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err == nil {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("success"))
		return
	}
	w.WriteHeader(ackStatus(err))
	w.Write([]byte("failure"))
}

func (a *Alipay) location() *time.Location {
	if a.Location != nil {
		return a.Location
	}
	return time.FixedZone("CST", 8*3600)
}

// ParseAlipayPublicKey reads Alipay's public key as the open platform shows
// it, bare base64 of a PKIX (SubjectPublicKeyInfo) key ("MIIBIjANBg…"), or
// as PEM: a PUBLIC KEY, RSA PUBLIC KEY or the CERTIFICATE of certificate
// mode (alipayCertPublicKey_RSA2.crt), whose chain it does not check.
func ParseAlipayPublicKey(s string) (*rsa.PublicKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		block, _ := pem.Decode([]byte(s))
		if block == nil {
			return nil, errors.New("payment: the Alipay public key is not valid PEM")
		}
		_, key, err := rsaPublicKeyFromPEM(block)
		return key, err
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		return nil, fmt.Errorf("payment: the Alipay public key is neither PEM nor base64: %w", err)
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("payment: the Alipay public key: %w", err)
	}
	key, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("payment: the Alipay public key is a %T, not RSA", pub)
	}
	return key, nil
}
