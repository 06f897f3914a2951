package payment

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

const (
	wechatMchID  = "1230000109"
	wechatAppID  = "wxd678efh567hg6787"
	wechatSerial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
	wechatNonce  = "5K8264ILTKCH16CQ2502SI8ZNMTM67VS" // the signing nonce, not the GCM one
)

const wechatTransactionJSON = `{"mchid":"1230000109","appid":"wxd678efh567hg6787","out_trade_no":"ORD-20251130-0001",` +
	`"transaction_id":"4200000000202511300000000001","trade_type":"JSAPI","trade_state":"SUCCESS","trade_state_desc":"支付成功",` +
	`"bank_type":"CMC","attach":"","success_time":"2025-11-30T15:59:00+08:00","payer":{"openid":"oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},` +
	`"amount":{"total":8880,"payer_total":8800,"currency":"CNY","payer_currency":"CNY"},"promotion_detail":[]}`

const wechatRefundJSON = `{"mchid":"1230000109","out_trade_no":"ORD-20251130-0001","transaction_id":"4200000000202511300000000001",` +
	`"out_refund_no":"RF-ORD-20251130-0001-1","refund_id":"50000000382019052709732678859","refund_status":"SUCCESS",` +
	`"success_time":"2025-11-30T16:10:00+08:00","user_received_account":"招商银行信用卡0403",` +
	`"amount":{"total":8880,"refund":3000,"payer_total":8800,"payer_refund":2970}}`

// testRSAKeys are the RSA keys of the WeChat Pay and Alipay tests: the
// provider's and another. They are fixed rather than generated because key
// generation under the fuzzer's coverage instrumentation takes minutes.
var testRSAKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
	var keys [2]*rsa.PrivateKey
	rest := []byte(testRSAKeysPEM)
	for i := range keys {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			panic(err)
		}
		keys[i] = k.(*rsa.PrivateKey)
	}
	return keys
})

// testRSAKeysPEM holds two 2048-bit keys made for these tests only.
const testRSAKeysPEM = `
-----BEGIN PRIVATE KEY-----
MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQDWW2TYwm6MZvm6
/KnmQsskN163daAMCNwWnpKoSeTodZ0FdyN9aXbTQjdA2QOC1UqOLlOT1f0mxrxt
obTqQxvBpH+zVhNj/fQFEgMa3Iv7yPnRLzbfVfa0+xP2syAg9/v8n/SC0OqHXiQh
k6IiKSR31tWFXqTE/Gg+FGB7aZIQN1CmpYDBbtboDcDuEIVpKmvDbylMyeqKqNcq
TwB691QcOw40nxT3TuH6hXwbn7wpepiloZaRBwLrJBgC0OD000rjt5Vc3W8VqIEl
SfPR1qllhKsE0hIfXRYRaedSAe2orTYdlQq4fTLZYf5EIQhsJM7tBnAIWnb6Gfmp
A6lbNaulAgMBAAECggEACMie9cjl2cgAdLqUxbQ3+chxD6h4wfV8+0pNLSs1/5aO
NCKhKCrxrQ96DyS1YZ+W2gOo9hZfNL8RCpcFQFI2qXUxrGobCk5mOOz3hprB+7PN
FNbP80/k956QP1wwtVkkEMKHNPMVoS1o4p1Xl/nCnkyF3Fy3+MB1DxIrr/LwAs0G
Pf/MUQwwARJZh2fik0KpqRGex1A+y8ZEThx6z+ZXWX+GcuCrHqkzZx2ObtvsA2yG
Nsdrv0Zj/81osLjQk9zDOjZ5VQV+DoxUpE6fkf3SBsomUzUZseMDTvuOeFyg9PSc
kM7DRYaKBMjb5HOGeG4ibentRG7KEFyeYdDesC+UkwKBgQDeTLvRF/2/drEKPKZH
DC/ZbByHXy02v8PUIaWIqDZ6jInhQgvu5j88mrsQ+HrwYE4/SrRNHZqvKInZDg+d
ItbRuZ91vWWVt0C4AY9Vqq/tqQd8hhZiNNOxRN3xdf13Yj9OpocoNMfrds9+57F8
KeCX3UoRMvcc8dsGAOlnCHPiJwKBgQD22mjSbFZAjTYk9jOTVUhFP1JECaLK9H+s
Axsa1+8bcoi25Qb4kHuAjEO3mO8LPZBJN087j+mn3hzwiY88y/7xeBmYyJ5OVLFc
Hstb/DeOinkqvkaKNzUPAV7gFcao7umvFkQqdW1ZwJN7R7XDdRDMuEmIN/+Lfg1o
AlpdrT5/UwKBgD3SdUE3PNhsd9vy9gM4Pm5nBKAZNgfN2PY7zT9uGIiIYSgGKC9u
VRPTrEaR9A65mck8S1xO6V/hFEULBgibUcbNqq0h2QiECDmkJWqbp4Wexng5CiyR
qHXaQycNu0niRtzmrxvdYeP4DMisQs3XD6DsZ9bUp6ijElhfFIoU7bVtAoGASaUf
YKexk9CNNrm86VeoGACsKmA1kRcgf9DtZTTGwQmKgAYT7lQshE1UZpHZvyC+yxkV
Kk/lBY/eUmS3twulI6UQ/ePcVsItp64IPYkhigUF4RqjMNkHm1JtW60jd4LPdMzP
yVr/JKevWDgsogNq36ibR2htdNBGb6FEFG57FsECgYAwZxnfQO9kZ8XV5ciJacUM
kZoFXKiIkW/707odT2MtqVHW1a8GFUsYYeAi35fHAEMB2Y+GHrZn5J8rzBZUCnXT
FLLV7jxdBukLmlESK9k2dytRjJJIHBC0GsKF1DK0IgxeJ/ruko55SkSR1vQGrg2l
aTaYju49pemY8itvkrrbJQ==
-----END PRIVATE KEY-----
-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDCexMenN8I5Ir2
kwLYhnlTtp+OaSbnBROms8b+4jSxz+uvqKNizZi2pz1oQvo+B4Ijedzi6/sEyNI8
VRlN9YZCB+05uo/9EvbnIsAjOGU2QHT7iAeQH4cOUTZS9jGdTA0Bokf3guXR7TsU
1xvRdR94PRUiS7i+p+UTDcQB+CGppbOu/aDc1cfswtkcmKWmOMgQNx9e6ymfNlug
4KD1LAiGKYWbPSXkRMEXPQTMvMTXyG/4eNqT4s7ll9uJ0yU6ExP8Oe4QxWo7FNpM
WosHZvFqYN8btpQzvQbgy+RF89BgND4sNM/ERSPsrGUePrr8pvldxc1DOAtAcf+z
WyAF9OcRAgMBAAECggEAAgrgokpVs8WE/nM57q//XLrmIzZ2uersi1keIV57CcUu
iZoa6kcxEYjq1cvSlMJ3pwnnd5BKRirAg/4SDma7299mA5+79av5QQe1NqcUor12
4qhWb+V33o8Jak7DMI6cQJvgypavjv0XuRerzbvpQLyJMQXavTeQA4tzunnqixcL
HrmKhprZ6qkNYc2BmiVknnoJgHnMqyMNxA1+J72FU8a2aEPZKDPa6uvppZdKM0h0
Q/hQHD92SqCdo33bBUIfXhedSMAFjNkRgtMC7Y9totaDwlRMQaoc+ovA3Qf3/IdZ
pc8N+duqZZhAszf/OXvnZhUS3ztxDkfqFfY1KqywoQKBgQDin6W5RdRV2izv1XSO
gsnh5u/WEPC9xdW401DVgB+YiKB3lYMbwTyk2sCkJMeUuHQdpOVYbGkVdbeiu34a
wxj569Eqw2sa1zk7oOXocTlHcpkqNJ3cWA7S8EWbvdZeE+S41hJR2grCzocFoHAI
Iv17CiHCXhqZ6Erezm7dXrqoIQKBgQDbsMm9lx3RAV8txeIQo0/RbEtv0F6mu14m
+SZKrOr5ouOAj0IENEHVBze+XBjEXRHBLZrQpJikFkmO1kjWOJGDPOeCaFk+zu1a
bmTI+yqZ+SMr/qbMiuSYvZSV5CTJJE8e2ICucFVQq2wHdbNFTsixBbT0brG+TvaP
qVYVqiig8QKBgQCaq61XAwLFyY9r7PqNHVSeGpjMOGmmi/SvHYKJBNYLrAwhMej2
s28pcKeUIAobRbzyUo25SNx7qgk4RtDtgQR15m2uyws5mXTVbp4bg9M9IUjKFnk7
XtpXO2e2wN0i/l7XjDuao78+b+iVfYeY9hCcvjCGUOXE71bSNIBUFAg/IQKBgCwj
TbTwmoX2X5gDrNKo7Q1nU5SoaYvYEyeDYSUZrq/vAQRARAQyN5PEOnfdawBwrnOA
ZR1MJHq7G5Y+CS44+UtDvkOeEWgkDN3hVhBnHf0HaACbzglEUn85f5PJ3XYn/Fl3
KAtj+FAX0MGC7TycgofGXL/LSZyxoqnkXK5HnJgRAoGAFIQXhXEmBMCvlEnqQjaI
WvB+s98Y0Ul7qJFP89Vmrbcszp4a6Tv49xAsjKkTVX+rlCthvtzY79Gg9KM0yvF3
TNvX045tRX6m6rgBdGfkrHgOySDZu6zE0vNdr6rN409DuhIvjpSXtDK2gqyGHxkh
MyMRXQivwqUuplIJKKLWrkM=
-----END PRIVATE KEY-----
`

// wechatSender builds notifications by WeChat Pay's published rules.
type wechatSender struct {
	key    *rsa.PrivateKey
	apiKey []byte
	aad    string // associated_data
	nonce  string // the GCM nonce: 12 characters
}

func newWeChatSender() *wechatSender {
	return &wechatSender{key: testRSAKeys()[0], apiKey: []byte("a7Kq2Zt9Lm4Xw8Rb1Nc6Vd3Pf5Hg0Js2"), aad: "transaction", nonce: "fdasflkja484"}
}

func newWeChatPay() *WeChatPay {
	s := newWeChatSender()
	return &WeChatPay{Provider: "wechatpay", MchID: wechatMchID, AppID: wechatAppID, APIv3Key: s.apiKey,
		Platform: map[string]*rsa.PublicKey{wechatSerial: &s.key.PublicKey}}
}

// seal encrypts plain as a notification resource's ciphertext.
func (s *wechatSender) seal(t testing.TB, plain []byte) string {
	t.Helper()
	block, err := aes.NewCipher(s.apiKey)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(gcm.Seal(nil, []byte(s.nonce), plain, []byte(s.aad)))
}

// envelope is the body of a notification whose resource is ciphertext.
func (s *wechatSender) envelope(t testing.TB, event, ciphertext string) []byte {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"id": "EV-2018022511223320873", "create_time": "2025-11-30T15:59:01+08:00", "resource_type": "encrypt-resource",
		"event_type": event, "summary": "支付成功",
		"resource": map[string]string{"original_type": "transaction", "algorithm": "AEAD_AES_256_GCM",
			"ciphertext": ciphertext, "associated_data": s.aad, "nonce": s.nonce},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// headers signs body as sent at at.
func (s *wechatSender) headers(t testing.TB, body []byte, at time.Time) http.Header {
	t.Helper()
	ts := strconv.FormatInt(at.Unix(), 10)
	digest := sha256.Sum256([]byte(ts + "\n" + wechatNonce + "\n" + string(body) + "\n"))
	sig, err := rsa.SignPKCS1v15(nil, s.key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", wechatNonce)
	h.Set("Wechatpay-Signature", base64.StdEncoding.EncodeToString(sig))
	h.Set("Wechatpay-Serial", wechatSerial)
	return h
}

// notify returns a whole notification of event carrying plain, sent now.
func (s *wechatSender) notify(t testing.TB, event, plain string) (http.Header, []byte) {
	t.Helper()
	body := s.envelope(t, event, s.seal(t, []byte(plain)))
	return s.headers(t, body, testNow), body
}

func TestWeChatPayPaid(t *testing.T) {
	t.Parallel()
	h, body := newWeChatSender().notify(t, "TRANSACTION.SUCCESS", wechatTransactionJSON)
	n, err := newWeChatPay().Verify(h, body, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if n.Provider != "wechatpay" || n.Kind != lapse.NoticePaid || n.TxnID != "4200000000202511300000000001" ||
		n.OrderNo != "ORD-20251130-0001" || n.Amount != 8880 || n.Currency != "CNY" || n.Merchant != wechatMchID ||
		!n.PaidAt.Equal(time.Date(2025, 11, 30, 7, 59, 0, 0, time.UTC)) || n.RefundID != "" {
		t.Fatalf("notice %s", brief(n))
	}
	if string(n.Raw) != wechatTransactionJSON {
		t.Fatalf("Raw is %q, want the decrypted resource", n.Raw)
	}
}

func TestWeChatPayRefund(t *testing.T) {
	t.Parallel()
	h, body := newWeChatSender().notify(t, "REFUND.SUCCESS", wechatRefundJSON)
	n, err := newWeChatPay().Verify(h, body, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != lapse.NoticeRefunded || n.RefundID != "RF-ORD-20251130-0001-1" || n.TxnID != "4200000000202511300000000001" ||
		n.OrderNo != "ORD-20251130-0001" || n.Amount != 3000 || n.RefundedTotal || n.Currency != "CNY" ||
		!n.PaidAt.Equal(time.Date(2025, 11, 30, 8, 10, 0, 0, time.UTC)) || string(n.Raw) != wechatRefundJSON {
		t.Fatalf("notice %s", brief(n))
	}
}

func TestWeChatPayIgnored(t *testing.T) {
	t.Parallel()
	s, w := newWeChatSender(), newWeChatPay()
	for _, c := range []struct{ event, plain string }{
		{"TRANSACTION.SUCCESS", strings.Replace(wechatTransactionJSON, `"trade_state":"SUCCESS"`, `"trade_state":"NOTPAY"`, 1)},
		{"REFUND.SUCCESS", strings.Replace(wechatRefundJSON, `"refund_status":"SUCCESS"`, `"refund_status":"PROCESSING"`, 1)},
		{"REFUND.ABNORMAL", wechatRefundJSON},
		{"REFUND.CLOSED", "not even JSON: an ignored resource is not decrypted"},
	} {
		h, body := s.notify(t, c.event, c.plain)
		if n, err := w.Verify(h, body, testNow); n != nil || err != nil {
			t.Errorf("%s: %s, %v", c.event, brief(n), err)
		}
	}
}

func TestWeChatPayTamperedBody(t *testing.T) {
	t.Parallel()
	h, body := newWeChatSender().notify(t, "TRANSACTION.SUCCESS", wechatTransactionJSON)
	for i := range body {
		tampered := bytes.Clone(body)
		tampered[i] ^= 0x01
		_, err := newWeChatPay().Verify(h, tampered, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "does not match")
	}
}

func TestWeChatPayHeaderErrors(t *testing.T) {
	t.Parallel()
	s, w := newWeChatSender(), newWeChatPay()
	h, body := s.notify(t, "TRANSACTION.SUCCESS", wechatTransactionJSON)
	with := func(name, value string) http.Header {
		c := h.Clone()
		c.Set(name, value)
		return c
	}
	other := &wechatSender{key: testRSAKeys()[1], apiKey: s.apiKey, aad: s.aad, nonce: s.nonce}
	for _, c := range []struct {
		name string
		h    http.Header
		want string
	}{
		{"no timestamp", with("Wechatpay-Timestamp", ""), "Wechatpay-Timestamp header is missing"},
		{"no nonce", with("Wechatpay-Nonce", ""), "Wechatpay-Nonce header is missing"},
		{"no signature", with("Wechatpay-Signature", ""), "Wechatpay-Signature header is missing"},
		{"no serial", with("Wechatpay-Serial", ""), "Wechatpay-Serial header is missing"},
		{"unknown serial", with("Wechatpay-Serial", "7132D72A03E93CDDF8C03BBD1F37EEDF00000000"), "serial"},
		{"serial in lower case", with("Wechatpay-Serial", strings.ToLower(wechatSerial)), "serial"},
		{"stale", s.headers(t, body, testNow.Add(-DefaultTolerance-time.Second)), "timestamp"},
		{"future", s.headers(t, body, testNow.Add(DefaultTolerance+time.Second)), "timestamp"},
		{"timestamp not a number", with("Wechatpay-Timestamp", "now"), "Unix seconds"},
		{"timestamp changed", with("Wechatpay-Timestamp", strconv.FormatInt(testNow.Unix()+1, 10)), "does not match"},
		{"nonce changed", with("Wechatpay-Nonce", wechatNonce+"X"), "does not match"},
		{"newline in nonce", with("Wechatpay-Nonce", wechatNonce+"\n"), "malformed"},
		{"signature not base64", with("Wechatpay-Signature", "%%%"), "base64"},
		{"signed by another key", other.headers(t, body, testNow), "does not match"},
		// WeChat Pay probes that merchants verify with signatures like this.
		{"probe", with("Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+base64.StdEncoding.EncodeToString([]byte("x"))), ""},
	} {
		n, err := w.Verify(c.h, body, testNow)
		if n != nil {
			t.Errorf("%s: notice %s", c.name, brief(n))
		}
		requireCode(t, err, lapse.EUNAUTHORIZED, c.want)
	}
	// A serial that is no serial is not quoted whole: the error is logged
	// and answered, and anyone can send one of a megabyte.
	_, err := w.Verify(with("Wechatpay-Serial", strings.Repeat("A", 100_000)), body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "100000 bytes, cut")
	if n := len(lapse.ErrorMessage(err)); n > 200 {
		t.Errorf("an unknown serial of 100000 bytes makes an error of %d bytes", n)
	}
	// A custom tolerance is honoured.
	w.Tolerance = time.Hour
	if _, err := w.Verify(s.headers(t, body, testNow.Add(-59*time.Minute)), body, testNow); err != nil {
		t.Fatalf("within a custom tolerance: %v", err)
	}
}

// TestWeChatPayTimestampWindow pins the window to the one of WeChat Pay's Go
// SDK (wechatpay-go, core/auth/validators): |timestamp - now.Unix()| >= 300
// is refused, in whole seconds, either way. 299 s verifies, 300 s does not.
func TestWeChatPayTimestampWindow(t *testing.T) {
	t.Parallel()
	s, w := newWeChatSender(), newWeChatPay()
	_, body := s.notify(t, "TRANSACTION.SUCCESS", wechatTransactionJSON)
	for _, c := range []struct {
		name string
		sent time.Time
		now  time.Time
		ok   bool
	}{
		{"299 s old", testNow.Add(-299 * time.Second), testNow, true},
		{"300 s old", testNow.Add(-300 * time.Second), testNow, false},
		{"299 s ahead", testNow.Add(299 * time.Second), testNow, true},
		{"300 s ahead", testNow.Add(300 * time.Second), testNow, false},
		// The SDK compares with now in whole seconds: 299.9 s after
		// the timestamp is 299, and 299.5 s before it is 300.
		{"299.9 s old", testNow.Add(-299 * time.Second), testNow.Add(900 * time.Millisecond), true},
		{"299.5 s ahead", testNow.Add(300 * time.Second), testNow.Add(500 * time.Millisecond), false},
	} {
		n, err := w.Verify(s.headers(t, body, c.sent), body, c.now)
		if c.ok && (err != nil || n == nil) {
			t.Errorf("%s: %s, %v", c.name, brief(n), err)
		}
		if !c.ok {
			if n != nil {
				t.Errorf("%s: notice %s", c.name, brief(n))
			}
			requireCode(t, err, lapse.EUNAUTHORIZED, "timestamp")
		}
	}
	// A custom tolerance has the same edge.
	w.Tolerance = time.Hour
	if _, err := w.Verify(s.headers(t, body, testNow.Add(-time.Hour+time.Second)), body, testNow); err != nil {
		t.Errorf("an hour less a second, within an hour: %v", err)
	}
	_, err := w.Verify(s.headers(t, body, testNow.Add(-time.Hour)), body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "timestamp")
}

func TestWeChatPayRotation(t *testing.T) {
	t.Parallel()
	next := &wechatSender{key: testRSAKeys()[1], apiKey: newWeChatSender().apiKey, aad: "transaction", nonce: "a1b2c3d4e5f6"}
	w := newWeChatPay()
	w.Platform["PUB_KEY_ID_0112345678202511300000000000000000"] = &next.key.PublicKey
	h, body := next.notify(t, "TRANSACTION.SUCCESS", wechatTransactionJSON)
	h.Set("Wechatpay-Serial", "PUB_KEY_ID_0112345678202511300000000000000000")
	if _, err := w.Verify(h, body, testNow); err != nil {
		t.Fatalf("the new key: %v", err)
	}
	// The new key's signature under the old key's serial does not verify.
	h.Set("Wechatpay-Serial", wechatSerial)
	_, err := w.Verify(h, body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "does not match")
}

func TestWeChatPayDecryptErrors(t *testing.T) {
	t.Parallel()
	s := newWeChatSender()
	ct := s.seal(t, []byte(wechatTransactionJSON))
	raw, _ := base64.StdEncoding.DecodeString(ct)
	raw[len(raw)-1] ^= 0x01 // the last byte is the GCM tag's
	badTag := base64.StdEncoding.EncodeToString(raw)
	otherAAD := *s
	otherAAD.aad = "refund"
	for _, c := range []struct {
		name string
		body []byte
		code string
		want string
	}{
		{"bad tag", s.envelope(t, "TRANSACTION.SUCCESS", badTag), lapse.EUNAUTHORIZED, "AES-256-GCM"},
		{"other associated data", otherAAD.envelope(t, "TRANSACTION.SUCCESS", ct), lapse.EUNAUTHORIZED, "AES-256-GCM"},
		{"ciphertext not base64", s.envelope(t, "TRANSACTION.SUCCESS", "not base64!"), lapse.EINVALID, "base64"},
		{"other algorithm", bytes.Replace(s.envelope(t, "TRANSACTION.SUCCESS", ct), []byte("AEAD_AES_256_GCM"), []byte("AEAD_SM4_GCM"), 1), lapse.EINVALID, "algorithm"},
		{"short nonce", bytes.Replace(s.envelope(t, "TRANSACTION.SUCCESS", ct), []byte(s.nonce), []byte("fdasflkja48"), 1), lapse.EINVALID, "nonce"},
	} {
		n, err := newWeChatPay().Verify(s.headers(t, c.body, testNow), c.body, testNow)
		if n != nil {
			t.Errorf("%s: notice %s", c.name, brief(n))
		}
		requireCode(t, err, c.code, c.want)
	}
	h, body := s.notify(t, "TRANSACTION.SUCCESS", wechatTransactionJSON)
	w := newWeChatPay()
	w.APIv3Key = []byte("b7Kq2Zt9Lm4Xw8Rb1Nc6Vd3Pf5Hg0Js2")
	_, err := w.Verify(h, body, testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "APIv3 key")
	// A 16-byte key would make AES-128: refused, as the configuration bug it is.
	w.APIv3Key = []byte("a7Kq2Zt9Lm4Xw8Rb")
	_, err = w.Verify(h, body, testNow)
	requireCode(t, err, lapse.EINTERNAL, "32")
}

// TestWeChatPayResourceErrors: notifications that verify and decrypt but
// that Lapse cannot read at all, or that name no transaction, order or
// refund, or another merchant, are refused; those whose amount or time
// Lapse cannot take are unreadable notices, and those whose currency is
// not three capital letters are notices in it.
func TestWeChatPayResourceErrors(t *testing.T) {
	t.Parallel()
	s := newWeChatSender()
	tx := func(from, to string) string { return strings.Replace(wechatTransactionJSON, from, to, 1) }
	rf := func(from, to string) string { return strings.Replace(wechatRefundJSON, from, to, 1) }
	verify := func(event, plain string) (*lapse.PaymentNotice, error) {
		h, body := s.notify(t, event, plain)
		return newWeChatPay().Verify(h, body, testNow)
	}
	for _, c := range []struct{ event, plain, want string }{
		{"TRANSACTION.SUCCESS", tx(`"mchid":"1230000109"`, `"mchid":"1900000001"`), "mchid"},
		{"TRANSACTION.SUCCESS", tx(`"appid":"wxd678efh567hg6787"`, `"appid":"wx0000000000000000"`), "appid"},
		{"TRANSACTION.SUCCESS", tx(`"appid":"wxd678efh567hg6787",`, ``), "appid"},
		{"REFUND.SUCCESS", rf(`"mchid":"1230000109"`, `"mchid":"1900000001"`), "mchid"},
		{"TRANSACTION.SUCCESS", wechatTransactionJSON[:40], "not valid JSON"},
		{"TRANSACTION.SUCCESS", wechatTransactionJSON + "{}", "data after"},
		{"TRANSACTION.SUCCESS", tx(`"total":8880`, `"total":8880,"total":1`), "more than once"},
		{"TRANSACTION.SUCCESS", tx(`"out_trade_no"`, `"out_trade_no":"ORD-X","out_trade_no"`), "more than once"},
		{"TRANSACTION.SUCCESS", tx(`"out_trade_no":"ORD-20251130-0001",`, ``), "out_trade_no"},
		{"TRANSACTION.SUCCESS", tx(`"transaction_id":"4200000000202511300000000001",`, ``), "transaction_id"},
		{"REFUND.SUCCESS", rf(`"out_refund_no":"RF-ORD-20251130-0001-1",`, ``), "out_refund_no"},
	} {
		n, err := verify(c.event, c.plain)
		if n != nil {
			t.Errorf("%s: notice %s", c.plain, brief(n))
		}
		requireCode(t, err, lapse.EINVALID, c.want)
	}
	for _, c := range []struct{ event, plain, want string }{
		{"TRANSACTION.SUCCESS", tx(`"total":8880`, `"total":88.80`), "amount.total 88.80"},
		{"TRANSACTION.SUCCESS", tx(`"total":8880`, `"total":"8880"`), `amount.total "8880"`},
		{"TRANSACTION.SUCCESS", tx(`"total":8880`, `"total":0`), "amount.total 0"},
		{"TRANSACTION.SUCCESS", tx(`2025-11-30T15:59:00+08:00`, `2025-11-30 15:59:00`), "success_time"},
		{"REFUND.SUCCESS", rf(`"refund":3000`, `"refund":-3000`), "amount.refund -3000"},
	} {
		n, err := verify(c.event, c.plain)
		requireUnreadable(t, n, err, c.want)
	}
	if n, err := verify("TRANSACTION.SUCCESS", tx(`"currency":"CNY"`, `"currency":"cny"`)); err != nil || n.Kind != lapse.NoticePaid || n.Currency != "cny" {
		t.Errorf("currency cny: %s, %v; want a paid notice in cny", brief(n), err)
	}
	// The envelope itself, signed but unreadable.
	good := s.envelope(t, "TRANSACTION.SUCCESS", s.seal(t, []byte(wechatTransactionJSON)))
	for _, body := range [][]byte{
		[]byte(`{"event_type":"TRANSACTION.SUCCESS"`),
		bytes.Replace(good, []byte(`"event_type"`), []byte(`"event_type":"REFUND.SUCCESS","event_type"`), 1),
		bytes.Replace(good, []byte(`"nonce"`), []byte(`"nonce":"x","nonce"`), 1),
		append(bytes.Clone(good), []byte(`[]`)...),
		[]byte(`null`),
		bytes.Replace(good, []byte(`"event_type"`), []byte(`"type"`), 1),
	} {
		_, err := newWeChatPay().Verify(s.headers(t, body, testNow), body, testNow)
		requireCode(t, err, lapse.EINVALID, "")
	}
}

func TestWeChatPayAck(t *testing.T) {
	t.Parallel()
	w := newWeChatPay()
	r := ackRecorder(w.Ack, nil)
	if r.Code != http.StatusOK || r.Body.Len() != 0 {
		t.Fatalf("ack of success: %d %q", r.Code, r.Body)
	}
	for _, c := range ackCases {
		r := ackRecorder(w.Ack, c.err)
		var got struct{ Code, Message string }
		if err := json.Unmarshal(r.Body.Bytes(), &got); err != nil {
			t.Fatalf("ack of %v: %q: %v", c.err, r.Body, err)
		}
		if r.Code != c.status || got.Code != "FAIL" || got.Message != lapse.ErrorMessage(c.err) {
			t.Errorf("ack of %v: %d %q", c.err, r.Code, r.Body)
		}
	}
}

func TestParseWeChatPayKey(t *testing.T) {
	t.Parallel()
	key := testRSAKeys()[0]
	serial, _ := new(big.Int).SetString(wechatSerial, 16)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "Tenpay.com Root CA"},
		NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(24 * time.Hour)}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkixDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	for _, c := range []struct {
		block  *pem.Block
		serial string
	}{
		{&pem.Block{Type: "CERTIFICATE", Bytes: cert}, wechatSerial},
		{&pem.Block{Type: "PUBLIC KEY", Bytes: pkixDER}, ""},
		{&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&key.PublicKey)}, ""},
	} {
		gotSerial, got, err := ParseWeChatPayKey(pem.EncodeToMemory(c.block))
		if err != nil || gotSerial != c.serial || !got.Equal(&key.PublicKey) {
			t.Errorf("%s: %q, %v", c.block.Type, gotSerial, err)
		}
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	for _, bad := range [][]byte{
		[]byte("not PEM"),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("junk")}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkixDER}),
	} {
		if _, _, err := ParseWeChatPayKey(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzWeChatPayVerify(f *testing.F) {
	s := newWeChatSender()
	f.Add("TRANSACTION.SUCCESS", []byte(wechatTransactionJSON), []byte(nil), true)
	f.Add("REFUND.SUCCESS", []byte(wechatRefundJSON), []byte(nil), true)
	f.Add("TRANSACTION.SUCCESS", []byte(strings.Replace(wechatTransactionJSON, `"total":8880`, `"total":-1`, 1)), []byte(nil), true)
	f.Add("REFUND.SUCCESS", []byte(`{"mchid":"1230000109","refund_status":"SUCCESS","amount":{"refund":1}}`), []byte(nil), true)
	f.Add("", []byte(nil), s.envelope(f, "TRANSACTION.SUCCESS", s.seal(f, []byte(wechatTransactionJSON))), false)
	f.Add("", []byte(nil), []byte(`{"event_type":"REFUND.SUCCESS","resource":{"algorithm":"AEAD_AES_256_GCM","nonce":"123456789012","ciphertext":""}}`), false)
	w := newWeChatPay()
	f.Fuzz(func(t *testing.T, event string, plain, body []byte, seal bool) {
		// Sealing and signing the input here takes the fuzzer past the
		// signature and the encryption, to the parsers behind them.
		if seal {
			body = s.envelope(t, event, s.seal(t, plain))
		}
		n, err := w.Verify(s.headers(t, body, testNow), body, testNow)
		requireSaneNotice(t, n, err)
		if seal && lapse.ErrorCode(err) == lapse.EUNAUTHORIZED {
			t.Fatalf("a sealed, signed notification failed verification: %v", err)
		}
	})
}
