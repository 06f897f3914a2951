package payment

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// Headers of a WeChat Pay API v3 notification. Wechatpay-Signature is the
// base64 RSA-SHA256 (PKCS #1 v1.5) signature, by the platform key that
// Wechatpay-Serial names, of
//
//	Wechatpay-Timestamp + "\n" + Wechatpay-Nonce + "\n" + body + "\n"
const (
	WeChatPayTimestampHeader = "Wechatpay-Timestamp"
	WeChatPayNonceHeader     = "Wechatpay-Nonce"
	WeChatPaySignatureHeader = "Wechatpay-Signature"
	WeChatPaySerialHeader    = "Wechatpay-Serial"
)

// WeChatPay verifies WeChat Pay API v3 notifications: the signature of the
// envelope by a platform key, then the AES-256-GCM encryption of its
// resource under the merchant's APIv3 key. TRANSACTION.SUCCESS becomes a
// paid notice and REFUND.SUCCESS a refunded one; other event types verify
// and are acknowledged without a notice. The zero Tolerance is
// DefaultTolerance, the five minutes WeChat Pay's own SDKs allow, with
// their edge: a timestamp 300 s away is refused (see inWindow).
type WeChatPay struct {
	Provider string // the name notices carry, as in the callback URL
	MchID    string // the merchant id every notice must be for
	AppID    string // the app id every payment notice must be for
	APIv3Key []byte // the 32-byte APIv3 key set in the merchant platform
	// Platform maps the serial of each platform certificate (or the id of
	// the WeChat Pay public key, PUB_KEY_ID_…) to its public key. Keep the
	// old key while WeChat Pay switches to a new one.
	Platform  map[string]*rsa.PublicKey
	Tolerance time.Duration
}

var _ lapse.PaymentCallback = (*WeChatPay)(nil)

// WeChat Pay event types that Lapse acts on.
const (
	wechatTransactionSuccess = "TRANSACTION.SUCCESS"
	wechatRefundSuccess      = "REFUND.SUCCESS"
)

// wechatEnvelope is a notification body. Unknown fields are let through, as
// WeChat Pay's own SDKs let them through.
type wechatEnvelope struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
	Resource  struct {
		Algorithm      string `json:"algorithm"`
		Ciphertext     string `json:"ciphertext"`
		AssociatedData string `json:"associated_data"`
		Nonce          string `json:"nonce"`
		OriginalType   string `json:"original_type"`
	} `json:"resource"`
}

type wechatTransaction struct {
	AppID         string `json:"appid"`
	MchID         string `json:"mchid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	TradeState    string `json:"trade_state"`
	SuccessTime   string `json:"success_time"`
	Amount        struct {
		Total    json.RawMessage `json:"total"`
		Currency string          `json:"currency"`
	} `json:"amount"`
}

type wechatRefund struct {
	MchID         string `json:"mchid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	OutRefundNo   string `json:"out_refund_no"`
	RefundID      string `json:"refund_id"`
	RefundStatus  string `json:"refund_status"`
	SuccessTime   string `json:"success_time"`
	Amount        struct {
		Refund json.RawMessage `json:"refund"`
	} `json:"amount"`
}

// Verify checks the headers' signature and timestamp, decrypts the resource
// (a resource that fails GCM authentication fails verification: it was not
// encrypted under our key), and reads it. The notice's Raw is the decrypted
// resource. A resource for another mchid or appid is EINVALID.
func (w *WeChatPay) Verify(hdr http.Header, body []byte, now time.Time) (*lapse.PaymentNotice, error) {
	for _, h := range []string{WeChatPayTimestampHeader, WeChatPayNonceHeader, WeChatPaySignatureHeader, WeChatPaySerialHeader} {
		if hdr.Get(h) == "" {
			return nil, lapse.Refine(lapse.ErrSignature, "the %s header is missing", h)
		}
	}
	ts, nonce := hdr.Get(WeChatPayTimestampHeader), hdr.Get(WeChatPayNonceHeader)
	serial := hdr.Get(WeChatPaySerialHeader)
	key := w.Platform[serial]
	if key == nil {
		// Anyone can send any serial: the error, which is logged and
		// answered, quotes no more of it than a real one holds.
		const shown = 64 // a platform certificate's serial is 40 hex digits
		if len(serial) > shown {
			return nil, lapse.Refine(lapse.ErrSignature, "no platform key has the serial %q (%d bytes, cut)", serial[:shown], len(serial))
		}
		return nil, lapse.Refine(lapse.ErrSignature, "no platform key has the serial %q", serial)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the %s header is not Unix seconds", WeChatPayTimestampHeader)
	}
	// A newline in the nonce would let the signed message be split at
	// another place than where it was signed.
	if strings.ContainsAny(nonce, "\r\n") {
		return nil, lapse.Refine(lapse.ErrSignature, "the %s header is malformed", WeChatPayNonceHeader)
	}
	if err := w.inWindow(sec, now); err != nil {
		return nil, err
	}
	sig, err := base64.StdEncoding.DecodeString(hdr.Get(WeChatPaySignatureHeader))
	if err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the %s header is not base64", WeChatPaySignatureHeader)
	}
	digest := sha256.New()
	digest.Write([]byte(ts + "\n" + nonce + "\n"))
	digest.Write(body)
	digest.Write([]byte("\n"))
	if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, digest.Sum(nil), sig); err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the %s header does not match the body", WeChatPaySignatureHeader)
	}

	var env wechatEnvelope
	if err := decodeLenient(body, &env); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the notification body: %s", lapse.ErrorMessage(err))
	}
	if env.EventType == "" {
		return nil, lapse.Errorf(lapse.EINVALID, "the notification has no event_type")
	}
	if env.EventType != wechatTransactionSuccess && env.EventType != wechatRefundSuccess {
		return nil, nil
	}
	plain, err := w.decrypt(&env)
	if err != nil {
		return nil, err
	}
	if env.EventType == wechatRefundSuccess {
		return w.refunded(plain)
	}
	return w.paid(plain)
}

// decrypt opens the envelope's resource under the APIv3 key.
func (w *WeChatPay) decrypt(env *wechatEnvelope) ([]byte, error) {
	r := &env.Resource
	if r.Algorithm != "AEAD_AES_256_GCM" {
		return nil, lapse.Errorf(lapse.EINVALID, "resource.algorithm %q is not AEAD_AES_256_GCM", r.Algorithm)
	}
	// aes.NewCipher would take a 16-byte key too, and quietly decrypt with
	// AES-128 instead of the AES-256 WeChat Pay uses.
	if len(w.APIv3Key) != 32 {
		return nil, lapse.Errorf(lapse.EINTERNAL, "the WeChat Pay APIv3 key is %d bytes, not 32", len(w.APIv3Key))
	}
	ct, err := base64.StdEncoding.DecodeString(r.Ciphertext)
	if err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "resource.ciphertext is not base64")
	}
	block, err := aes.NewCipher(w.APIv3Key)
	if err != nil {
		return nil, lapse.Errorf(lapse.EINTERNAL, "the WeChat Pay APIv3 key: %v", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, lapse.Errorf(lapse.EINTERNAL, "AES-GCM: %v", err)
	}
	if len(r.Nonce) != gcm.NonceSize() {
		return nil, lapse.Errorf(lapse.EINVALID, "resource.nonce is %d bytes, not %d", len(r.Nonce), gcm.NonceSize())
	}
	plain, err := gcm.Open(nil, []byte(r.Nonce), ct, []byte(r.AssociatedData))
	if err != nil {
		return nil, lapse.Refine(lapse.ErrSignature, "the resource failed AES-256-GCM authentication under the APIv3 key")
	}
	return plain, nil
}

func (w *WeChatPay) paid(plain []byte) (*lapse.PaymentNotice, error) {
	var tx wechatTransaction
	if err := decodeLenient(plain, &tx); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the transaction resource: %s", lapse.ErrorMessage(err))
	}
	switch {
	case tx.MchID == "" || tx.MchID != w.MchID:
		return nil, lapse.Errorf(lapse.EINVALID, "mchid %q is not this merchant's", tx.MchID)
	case tx.AppID == "" || tx.AppID != w.AppID:
		return nil, lapse.Errorf(lapse.EINVALID, "appid %q is not this merchant's", tx.AppID)
	case tx.TradeState != "SUCCESS":
		return nil, nil
	}
	n := &lapse.PaymentNotice{Provider: w.Provider, Kind: lapse.NoticePaid, TxnID: tx.TransactionID, OrderNo: tx.OutTradeNo,
		Currency: tx.Amount.Currency, Merchant: tx.MchID, Raw: plain}
	if err := checkWeChatNotice(n, tx.SuccessTime, "amount.total", tx.Amount.Total); err != nil {
		return nil, err
	}
	return n, nil
}

func (w *WeChatPay) refunded(plain []byte) (*lapse.PaymentNotice, error) {
	var rf wechatRefund
	if err := decodeLenient(plain, &rf); err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the refund resource: %s", lapse.ErrorMessage(err))
	}
	switch {
	case rf.MchID == "" || rf.MchID != w.MchID:
		return nil, lapse.Errorf(lapse.EINVALID, "mchid %q is not this merchant's", rf.MchID)
	case rf.RefundStatus != "SUCCESS":
		return nil, nil
	}
	// out_refund_no is the refund number Lapse chose (its idempotency key),
	// which is what a refund is found by; refund_id is only WeChat's.
	n := &lapse.PaymentNotice{Provider: w.Provider, Kind: lapse.NoticeRefunded, TxnID: rf.TransactionID, RefundID: rf.OutRefundNo,
		OrderNo: rf.OutTradeNo, Currency: "CNY", Merchant: rf.MchID, Raw: plain}
	if err := checkWeChatNotice(n, rf.SuccessTime, "amount.refund", rf.Amount.Refund); err != nil {
		return nil, err
	}
	return n, nil
}

// checkWeChatNotice refuses a notice that names no transaction, order or
// refund, naming the resource field it came from, sets its amount from
// amount (amountField) and its PaidAt from successTime, and makes it
// unreadable when either cannot be taken as it is. A currency that is not
// three capital letters is passed on as sent.
func checkWeChatNotice(n *lapse.PaymentNotice, successTime, amountField string, amount json.RawMessage) error {
	at, err := time.Parse(time.RFC3339, successTime)
	var ok bool
	n.Amount, ok = minorUnits(amount)
	switch {
	case n.TxnID == "":
		return lapse.Errorf(lapse.EINVALID, "transaction_id is missing")
	case n.Kind == lapse.NoticeRefunded && n.RefundID == "":
		return lapse.Errorf(lapse.EINVALID, "out_refund_no is missing")
	case n.OrderNo == "":
		return lapse.Errorf(lapse.EINVALID, "out_trade_no is missing")
	case !ok:
		unreadable(n, "%s %s is not a positive integer number of fen", amountField, sent(amount))
	case err != nil:
		unreadable(n, "success_time %q is not RFC 3339", successTime)
	default:
		n.PaidAt = at.UTC()
	}
	return nil
}

// Ack answers as WeChat Pay API v3 asks: 200 with no body for a notification
// handled, and otherwise a status by the error's code with
// {"code":"FAIL","message":…}, after which WeChat Pay notifies again.
func (w *WeChatPay) Ack(rw http.ResponseWriter, err error) {
	if err == nil {
		rw.WriteHeader(http.StatusOK)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(ackStatus(err))
	msg, _ := json.Marshal(lapse.ErrorMessage(err))
	rw.Write([]byte(`{"code":"FAIL","message":` + string(msg) + "}\n"))
}

// inWindow refuses a Wechatpay-Timestamp of sec as WeChat Pay's Go SDK
// (wechatpay-go, core/auth/validators) does: in whole seconds of now,
// |sec - now.Unix()| >= the tolerance (rounded up to a second) is refused,
// old or ahead. The edge
// itself is outside, unlike inWindow's for the HMAC and Stripe schemes:
// a notification the SDK would refuse is not accepted here either.
func (w *WeChatPay) inWindow(sec int64, now time.Time) error {
	d := now.Unix() - sec
	limit := int64((w.tolerance() + time.Second - 1) / time.Second)
	if d >= limit || -d >= limit {
		return lapse.Refine(lapse.ErrSignature, "the callback timestamp is %ds from now; WeChat Pay's window is less than %ds", d, limit)
	}
	return nil
}

func (w *WeChatPay) tolerance() time.Duration {
	if w.Tolerance > 0 {
		return w.Tolerance
	}
	return DefaultTolerance
}

// ParseWeChatPayKey reads a WeChat Pay platform key from PEM: a platform
// certificate, whose serial it returns as the Wechatpay-Serial header spells
// it (upper-case hex), or a WeChat Pay public key (PUBLIC KEY or RSA PUBLIC
// KEY), whose id (PUB_KEY_ID_…) the merchant platform shows and serial is
// then "". It does not check a certificate's validity period or chain: the
// key is trusted because the merchant downloaded it, not because of a CA.
func ParseWeChatPayKey(pemData []byte) (serial string, key *rsa.PublicKey, err error) {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return "", nil, errors.New("payment: no PEM block in the WeChat Pay key")
	}
	return rsaPublicKeyFromPEM(block)
}

// rsaPublicKeyFromPEM returns the RSA public key of a PEM certificate, PKIX
// public key or PKCS #1 public key, with the certificate's serial in
// upper-case hex.
func rsaPublicKeyFromPEM(block *pem.Block) (string, *rsa.PublicKey, error) {
	var pub any
	var serial string
	var err error
	switch block.Type {
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub, serial = cert.PublicKey, fmt.Sprintf("%X", cert.SerialNumber.Bytes())
		}
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	default:
		return "", nil, fmt.Errorf("payment: a PEM %q block holds no public key", block.Type)
	}
	if err != nil {
		return "", nil, fmt.Errorf("payment: %w", err)
	}
	key, ok := pub.(*rsa.PublicKey)
	if !ok {
		return "", nil, fmt.Errorf("payment: the key is a %T, not RSA", pub)
	}
	return serial, key, nil
}
