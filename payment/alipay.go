package payment

import (
	"cmp"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// Alipay verifies Alipay's asynchronous notifications (异步通知): a POSTed
// application/x-www-form-urlencoded body whose sign parameter is the base64
// RSA-SHA256 (RSA2, PKCS #1 v1.5) signature, by Alipay's key, of every other
// parameter but sign_type, names and values URL-decoded, sorted by name and
// joined as k1=v1&k2=v2. Parameters with an empty value are left out, as
// Alipay's signing rule says (剔除值为空的参数) and its Java SDK does
// (AlipaySignature.getSignCheckContentV1); an empty value reads as absent,
// so leaving it unsigned cannot change what a notice says.
//
// The scheme has no timestamp window. notify_time is signed but no window:
// Alipay resends an unacknowledged notification for about a day, so a
// window would refuse its own retries, and a replayed notice is harmless
// because Lapse applies each payment (by trade_no) and refund (by
// out_biz_no) once. A payment is judged at gmt_payment, or at notify_time
// when gmt_payment (optional in Alipay's table) is absent; a refund at
// gmt_refund.
//
// TRADE_SUCCESS and TRADE_FINISHED become paid notices; any notice carrying
// refund_fee (a partial refund keeps TRADE_SUCCESS, a full one is
// TRADE_CLOSED) becomes a refunded one. WAIT_BUYER_PAY and TRADE_CLOSED
// without refund_fee verify and are acknowledged without a notice.
//
// Alipay asks merchants to check that a notice's seller_id, or its
// seller_email, is theirs; both are optional in its parameter table. A
// seller_id other than SellerID is another seller's notice and is refused.
// A paid notice whose seller cannot be confirmed (no seller_id to check,
// and no seller_email, or one other than SellerEmail, which an account can
// change) is genuine, for this app, and signed by Alipay, so it is recorded
// for review (PaymentNotice.Review) rather than refused: a refusal would
// leave captured money off the books once Alipay stops resending.
type Alipay struct {
	Provider string // the name notices carry, as in the callback URL
	AppID    string // the app_id every notice must be for
	// SellerID is the seller's Alipay user id (2088…) that seller_id must
	// be, and SellerEmail its Alipay account, as seller_email spells it
	// (compared without regard to case); set at least one.
	SellerID    string
	SellerEmail string
	PublicKey   *rsa.PublicKey // Alipay's public key (not the app's); see ParseAlipayPublicKey
	// Location is the zone of the notices' times; nil is China Standard
	// Time, fixed so that no tzdata is needed.
	Location *time.Location
}

var _ lapse.PaymentCallback = (*Alipay)(nil)

// alipayTime is the layout of gmt_payment and gmt_refund. Parsing also
// takes the milliseconds gmt_refund comes with.
const alipayTime = "2006-01-02 15:04:05"

// alipayFields are the parameters Lapse reads from a notification. notice
// sees no others (see alipayRead), which is what makes alipayUnambiguous
// enough: a parameter that is not read cannot change what a notice says.
var alipayFields = map[string]bool{
	"app_id": true, "seller_id": true, "seller_email": true,
	"trade_no": true, "out_trade_no": true, "out_biz_no": true, "trade_status": true,
	"total_amount": true, "refund_fee": true, "trans_currency": true,
	"gmt_payment": true, "gmt_refund": true, "notify_time": true,
}

// Verify checks a notification's signature, that no other reading of the
// signed string would change what Lapse reads from it (alipayUnambiguous),
// then its app_id and seller, and reads it. A body that cannot be read
// unambiguously (a parameter given twice, a malformed escape) fails
// verification: which of two values would the signature be for?
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
	digest := sha256.Sum256([]byte(alipaySignContent(p)))
	if err := rsa.VerifyPKCS1v15(a.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the sign parameter does not match the notification")
	}
	if err := alipayUnambiguous(p); err != nil {
		return nil, err
	}
	return a.notice(alipayRead(p), body)
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

// alipaySigned returns the names of the parameters of p that Alipay signed,
// sorted.
func alipaySigned(p map[string]string) []string {
	keys := make([]string, 0, len(p))
	for k, v := range p {
		if k != "sign" && k != "sign_type" && v != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// alipaySignContent returns the string Alipay signed for the parameters p.
func alipaySignContent(p map[string]string) string {
	var b strings.Builder
	for i, k := range alipaySigned(p) {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + p[k])
	}
	return b.String()
}

// alipayUnambiguous refuses a notification whose signed string another
// reading could split into other values of the fields Lapse reads.
//
// The body itself is unambiguous: its separators are raw '&' and '=', and
// a value's own are percent-encoded, so a value "1&b=2" is another body
// than a=1&b=2. The signed string is not: it joins decoded values, so
// a=1&b=2 is also the signature of a single a="1&b=2". A forger holding a
// genuine notice can send either reading of its signed string, folding a
// parameter into the value before it (refund_fee into receipt_amount turns a
// refund notice into a payment) or splitting one out of a value.
//
// Call "&N=" (N holding neither '&' nor '=') in a signed value an embedded
// name: it is where a reading could start parameter N. Two rules, on the
// notice received:
//
//   - no signed value embeds a name Lapse reads (alipayFields), and
//   - no value of a field Lapse reads embeds any name.
//
// Then every reading that also passes them gives the same values to the
// fields Lapse reads, whichever was Alipay's. Take a field K that one
// reading starts at some '&' of the signed string: in any other, that '&'
// is a separator too (else a value there embeds K), so K starts there; K's
// value ends at its reading's next separator, and a separator of the other
// reading before or after it would be a name embedded in one of the two
// values of K. Names of parameters are never split: they hold no '&' or '='
// (parseAlipayForm).
//
// Nothing Alipay generates breaks the rules: the fields Lapse reads are
// ids, amounts, times and codes, and free text (subject, body,
// passback_params) may hold "满100元&立减=10元", "a=1&b=2" or "50% + 10"
// freely. Only text the merchant sent holding '&', one of those field names
// and '=' ("&refund_fee=") fails verification, as no reading of it can be
// trusted. The guarantee holds among readings that pass, so a reading that
// splits such a field out of such text, where the sorted names allow it,
// could pass: merchants keep such text out of what they send Alipay.
func alipayUnambiguous(p map[string]string) error {
	for _, k := range alipaySigned(p) {
		for name := range alipayEmbedded(p[k]) {
			switch {
			case alipayFields[name]:
				return lapse.Refine(lapse.ErrSignature, "parameter %q holds \"&%s=\": the signature cannot tell it from a parameter %s of its own", k, name, name)
			case alipayFields[k]:
				return lapse.Refine(lapse.ErrSignature, "parameter %q holds \"&%s=\": the signature cannot tell where its value ends", k, name)
			}
		}
	}
	return nil
}

// alipayEmbedded yields the names embedded in v: each run of characters
// between a '&' and the next '=' that holds neither '&' nor '='.
func alipayEmbedded(v string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for rest := v; ; {
			i := strings.IndexByte(rest, '&')
			if i < 0 {
				return
			}
			rest = rest[i+1:]
			if j := strings.IndexAny(rest, "&="); j > 0 && rest[j] == '=' && !yield(rest[:j]) {
				return
			}
		}
	}
}

// alipayRead returns the fields Lapse reads from p, without those whose
// value is empty: absent and empty read alike, as they sign alike.
func alipayRead(p map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		if alipayFields[k] && v != "" {
			out[k] = v
		}
	}
	return out
}

// notice reads verified parameters in Lapse's terms.
func (a *Alipay) notice(p map[string]string, raw []byte) (*lapse.PaymentNotice, error) {
	if p["app_id"] == "" || p["app_id"] != a.AppID {
		return nil, lapse.Errorf(lapse.EINVALID, "app_id %q is not this app's", p["app_id"])
	}
	review, err := a.seller(p)
	if err != nil {
		return nil, err
	}
	n := &lapse.PaymentNotice{Provider: a.Provider, Kind: lapse.NoticePaid, TxnID: p["trade_no"], OrderNo: p["out_trade_no"],
		Currency: "CNY", Merchant: cmp.Or(p["seller_id"], p["seller_email"]), Review: review, Raw: raw}
	if c := p["trans_currency"]; c != "" {
		n.Currency = c
	}
	amountField, timeField, odd := "total_amount", "gmt_payment", ""
	switch status := p["trade_status"]; {
	case status == "WAIT_BUYER_PAY", status == "TRADE_CLOSED" && p["refund_fee"] == "":
		return nil, nil
	case status != "TRADE_SUCCESS" && status != "TRADE_FINISHED" && status != "TRADE_CLOSED":
		odd = fmt.Sprintf("trade_status %q is not one Alipay documents", status)
	case p["refund_fee"] != "":
		// A refund notice completes a refund of a payment Lapse holds by
		// trade_no; whom the payment paid was settled then. refund_fee is
		// the trade's total refunded (总退款金额), not this refund's.
		n.Kind, amountField, timeField = lapse.NoticeRefunded, "refund_fee", "gmt_refund"
		n.RefundedTotal = true
		n.Review = ""
		n.RefundID = p["out_biz_no"]
		if n.RefundID == "" {
			n.RefundID = n.TxnID + "-refund"
		}
	case p["gmt_payment"] == "" && p["notify_time"] != "":
		// gmt_payment is optional in Alipay's table. The order's deadline
		// is judged at this time, so the stand-in must never be before the
		// payment succeeded: notify_time, when Alipay sent this notice, is
		// signed and seconds after the success on the first send (later on
		// a resend, which can only make a payment late, and refunded, never
		// take a late one in time). gmt_create, when the trade was created,
		// can be minutes before it.
		timeField = "notify_time"
	}
	// Amounts are in the units of the trade's currency: trans_currency, or
	// yuan.
	amount, ok := parseAmount(p[amountField], lapse.CurrencyExponent(n.Currency))
	at, err := time.ParseInLocation(alipayTime, p[timeField], a.location())
	switch {
	case n.TxnID == "":
		return nil, lapse.Errorf(lapse.EINVALID, "trade_no is missing")
	case n.OrderNo == "":
		return nil, lapse.Errorf(lapse.EINVALID, "out_trade_no is missing")
	case odd != "":
		return unreadable(n, "%s", odd), nil
	case !ok || amount <= 0:
		return unreadable(n, "%s %q is not a positive amount of %s with at most %d decimals", amountField, p[amountField], n.Currency, lapse.CurrencyExponent(n.Currency)), nil
	case err != nil:
		return unreadable(n, "%s %q is not a time like %s", timeField, p[timeField], alipayTime), nil
	}
	n.Amount, n.PaidAt = amount, at.UTC()
	return n, nil
}

// seller checks whom a notice says was paid: a seller_id other than
// SellerID is an error; a seller that cannot be confirmed is the reason to
// review the payment; a confirmed one is "".
func (a *Alipay) seller(p map[string]string) (review string, err error) {
	id, email := p["seller_id"], p["seller_email"]
	switch {
	case id != "" && a.SellerID != "":
		if id != a.SellerID {
			return "", lapse.Errorf(lapse.EINVALID, "seller_id %q is not this seller's", id)
		}
		return "", nil
	case email != "" && a.SellerEmail != "":
		if !strings.EqualFold(email, a.SellerEmail) {
			return fmt.Sprintf("the Alipay notice names seller_email %q, not %q, and no seller_id to check; app_id is this app's", email, a.SellerEmail), nil
		}
		return "", nil
	}
	return fmt.Sprintf("the Alipay notice names no seller to check (seller_id %q, seller_email %q); app_id is this app's", id, email), nil
}

// parseAmount reads an amount as Alipay writes it ("88.80", "0.01", "1000")
// into minor units of a currency with exp of them, exactly: digits, an
// optional '.' and more digits, no sign, exponent or leading zero. The
// fraction has at most max(exp, 2) digits (Alipay writes two), and those
// past exp must be zeros: "1000.00" yen is 1000, "10.50" yen is no amount.
// Floats would turn 0.29 into 28 fen.
func parseAmount(s string, exp int) (int64, bool) {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(s string) bool {
		return strings.Trim(s, "0123456789") == ""
	}
	// Twelve digits of the major unit are far above any trade and far
	// below overflow.
	if whole == "" || len(whole) > 12 || !digits(whole) || (len(whole) > 1 && whole[0] == '0') {
		return 0, false
	}
	if dot && (frac == "" || len(frac) > max(exp, 2) || !digits(frac)) {
		return 0, false
	}
	if len(frac) > exp {
		if strings.Trim(frac[exp:], "0") != "" {
			return 0, false
		}
		frac = frac[:exp]
	}
	var minor int64
	for _, c := range whole + frac + strings.Repeat("0", exp-len(frac)) {
		minor = minor*10 + int64(c-'0')
	}
	return minor, true
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
