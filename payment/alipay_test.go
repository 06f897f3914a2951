package payment

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

const (
	alipayAppID    = "2021000000000001"
	alipaySellerID = "2088101106499364"
)

// alipayParams are a notification's parameters in the order they are sent.
type alipayParams [][2]string

// alipayPaid is a TRADE_SUCCESS notification as Alipay sends it, in its
// own (unsorted) order. The subject holds a '&' that is no parameter.
func alipayPaid() alipayParams {
	return alipayParams{
		{"gmt_create", "2025-11-30 15:58:30"}, {"charset", "utf-8"}, {"seller_email", "merchant@example.com"},
		{"subject", "Fish & Chips 炸鱼薯条"}, {"buyer_id", "2088102122524333"}, {"invoice_amount", "88.80"},
		{"notify_id", "2025113000222155830057591412345678"},
		{"fund_bill_list", `[{"amount":"88.80","fundChannel":"ALIPAYACCOUNT"}]`}, {"notify_type", "trade_status_sync"},
		{"trade_status", "TRADE_SUCCESS"}, {"receipt_amount", "88.80"}, {"buyer_pay_amount", "88.80"},
		{"app_id", alipayAppID}, {"seller_id", alipaySellerID}, {"gmt_payment", "2025-11-30 15:59:00"},
		{"notify_time", "2025-11-30 15:59:01"}, {"version", "1.0"}, {"out_trade_no", "ORD-20251130-0001"},
		{"total_amount", "88.80"}, {"trade_no", "2025113022001404330000121536"}, {"auth_app_id", alipayAppID},
		{"buyer_logon_id", "180****0062"}, {"point_amount", "0.00"},
	}
}

// alipayRefunded is a partial refund's notification: still TRADE_SUCCESS.
func alipayRefunded() alipayParams {
	return alipayPaid().set("refund_fee", "30.00").set("out_biz_no", "RF-ORD-20251130-0001-1").
		set("gmt_refund", "2025-11-30 16:10:00.123")
}

// set returns p with k set to v, in place if present, else at the end.
func (p alipayParams) set(k, v string) alipayParams {
	p = slices.Clone(p)
	for i := range p {
		if p[i][0] == k {
			p[i][1] = v
			return p
		}
	}
	return append(p, [2]string{k, v})
}

func (p alipayParams) without(k string) alipayParams {
	return slices.DeleteFunc(slices.Clone(p), func(kv [2]string) bool { return kv[0] == k })
}

// content is the signed string by Alipay's published rule: every parameter
// but sign and sign_type with a value, sorted by name, joined k=v with &.
func (p alipayParams) content() string {
	var kvs []string
	for _, kv := range p {
		if kv[0] != "sign" && kv[0] != "sign_type" && kv[1] != "" {
			kvs = append(kvs, kv[0]+"="+kv[1])
		}
	}
	slices.SortFunc(kvs, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	return strings.Join(kvs, "&")
}

// sign returns p signed with key, with sign_type RSA2.
func (p alipayParams) sign(t testing.TB, key *rsa.PrivateKey) alipayParams {
	t.Helper()
	digest := sha256.Sum256([]byte(p.content()))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return p.set("sign_type", "RSA2").set("sign", base64.StdEncoding.EncodeToString(sig))
}

// form encodes p as a form body, in p's order.
func (p alipayParams) form() []byte {
	var parts []string
	for _, kv := range p {
		parts = append(parts, url.QueryEscape(kv[0])+"="+url.QueryEscape(kv[1]))
	}
	return []byte(strings.Join(parts, "&"))
}

func newAlipay() *Alipay {
	return &Alipay{Provider: "alipay", AppID: alipayAppID, SellerID: alipaySellerID, PublicKey: &testRSAKeys()[0].PublicKey}
}

// alipayVerify signs p with Alipay's key and verifies it.
func alipayVerify(t *testing.T, p alipayParams) (*lapse.PaymentNotice, error) {
	t.Helper()
	return newAlipay().Verify(nil, p.sign(t, testRSAKeys()[0]).form(), testNow)
}

func TestAlipayPaid(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"TRADE_SUCCESS", "TRADE_FINISHED"} {
		body := alipayPaid().set("trade_status", status).sign(t, testRSAKeys()[0]).form()
		n, err := newAlipay().Verify(http.Header{}, body, testNow)
		if err != nil {
			t.Fatalf("%s: %v", status, err)
		}
		if n.Provider != "alipay" || n.Kind != lapse.NoticePaid || n.TxnID != "2025113022001404330000121536" ||
			n.OrderNo != "ORD-20251130-0001" || n.Amount != 8880 || n.Currency != "CNY" || n.Merchant != alipaySellerID ||
			!n.PaidAt.Equal(time.Date(2025, 11, 30, 7, 59, 0, 0, time.UTC)) || n.RefundID != "" || string(n.Raw) != string(body) {
			t.Fatalf("%s: notice %s", status, brief(n))
		}
	}
	// Notices are read in a configured zone.
	a := newAlipay()
	a.Location = time.UTC
	n, err := a.Verify(nil, alipayPaid().sign(t, testRSAKeys()[0]).form(), testNow)
	if err != nil || !n.PaidAt.Equal(time.Date(2025, 11, 30, 15, 59, 0, 0, time.UTC)) {
		t.Fatalf("in UTC: %s, %v", brief(n), err)
	}
	// notify_time is not a window: a notice from a day ago still verifies.
	if _, err := newAlipay().Verify(nil, alipayPaid().sign(t, testRSAKeys()[0]).form(), testNow.Add(30*time.Hour)); err != nil {
		t.Fatalf("a day later: %v", err)
	}
}

// TestAlipayNoPaymentTime: gmt_payment is optional in Alipay's table. A
// payment without it is judged at notify_time, when Alipay sent the notice:
// signed, never before the payment succeeded, and seconds after it on the
// first send, so that a payment late by its own time is never taken in
// time. gmt_create, when the trade was created, can be minutes before.
func TestAlipayNoPaymentTime(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"TRADE_SUCCESS", "TRADE_FINISHED"} {
		n, err := alipayVerify(t, alipayPaid().set("trade_status", status).without("gmt_payment"))
		if err != nil {
			t.Fatalf("%s: %v", status, err)
		}
		if n.Kind != lapse.NoticePaid || n.Amount != 8880 || !n.PaidAt.Equal(time.Date(2025, 11, 30, 7, 59, 1, 0, time.UTC)) {
			t.Errorf("%s without gmt_payment: %s", status, brief(n))
		}
	}
	// An empty gmt_payment is no gmt_payment.
	n, err := alipayVerify(t, alipayPaid().set("gmt_payment", ""))
	if err != nil || !n.PaidAt.Equal(time.Date(2025, 11, 30, 7, 59, 1, 0, time.UTC)) {
		t.Errorf("empty gmt_payment: %s, %v", brief(n), err)
	}
	// A refund is still judged at gmt_refund, never at notify_time: one
	// without it is unreadable.
	n, err = alipayVerify(t, alipayRefunded().without("gmt_refund"))
	requireUnreadable(t, n, err, "gmt_refund")
}

func TestAlipayRefund(t *testing.T) {
	t.Parallel()
	n, err := alipayVerify(t, alipayRefunded())
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != lapse.NoticeRefunded || n.RefundID != "RF-ORD-20251130-0001-1" || n.TxnID != "2025113022001404330000121536" ||
		n.Amount != 3000 || !n.RefundedTotal || n.OrderNo != "ORD-20251130-0001" ||
		!n.PaidAt.Equal(time.Date(2025, 11, 30, 8, 10, 0, 123e6, time.UTC)) {
		t.Fatalf("partial refund %s", brief(n))
	}
	// A full refund closes the trade; without out_biz_no the trade stands in.
	n, err = alipayVerify(t, alipayRefunded().set("trade_status", "TRADE_CLOSED").set("refund_fee", "88.8").without("out_biz_no"))
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != lapse.NoticeRefunded || n.RefundID != "2025113022001404330000121536-refund" || n.Amount != 8880 {
		t.Fatalf("full refund %s", brief(n))
	}
	n, err = alipayVerify(t, alipayRefunded().without("gmt_refund"))
	requireUnreadable(t, n, err, "gmt_refund")
	n, err = alipayVerify(t, alipayRefunded().set("refund_fee", "30.001"))
	requireUnreadable(t, n, err, `refund_fee "30.001"`)
	if n != nil && n.RefundID != "RF-ORD-20251130-0001-1" {
		t.Errorf("an unreadable refund notice lost its refund id: %s", brief(n))
	}
}

func TestAlipayIgnoredAndUnknown(t *testing.T) {
	t.Parallel()
	for _, p := range []alipayParams{
		alipayPaid().set("trade_status", "TRADE_CLOSED"),
		alipayPaid().set("trade_status", "WAIT_BUYER_PAY").without("gmt_payment"),
	} {
		if n, err := alipayVerify(t, p); n != nil || err != nil {
			t.Errorf("%s: %s, %v", p.content(), brief(n), err)
		}
	}
	// A status Alipay does not document: the notice verified, so it is
	// unreadable, not refused.
	n, err := alipayVerify(t, alipayPaid().set("trade_status", "TRADE_PAID"))
	requireUnreadable(t, n, err, `trade_status "TRADE_PAID"`)
}

// TestAlipayOrder: the signature is over the sorted string, so the order
// parameters come in does not matter.
func TestAlipayOrder(t *testing.T) {
	t.Parallel()
	signed := alipayRefunded().sign(t, testRSAKeys()[0])
	reversed := slices.Clone(signed)
	slices.Reverse(reversed)
	sorted := slices.Clone(signed)
	slices.SortFunc(sorted, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	for _, p := range []alipayParams{signed, reversed, sorted, slices.Concat(signed[5:], signed[:5])} {
		n, err := newAlipay().Verify(nil, p.form(), testNow)
		if err != nil || n.Amount != 3000 {
			t.Errorf("%s: %s, %v", p.form(), brief(n), err)
		}
	}
}

func TestAlipayTampered(t *testing.T) {
	t.Parallel()
	signed := alipayRefunded().sign(t, testRSAKeys()[0])
	// One byte of each value but the signature's own.
	for i, kv := range signed {
		if kv[0] == "sign" || kv[0] == "sign_type" {
			continue
		}
		v := []byte(kv[1])
		v[len(v)-1] ^= 0x01
		p := slices.Clone(signed)
		p[i][1] = string(v)
		_, err := newAlipay().Verify(nil, p.form(), testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "")
	}
	// One byte anywhere in the body.
	body := signed.form()
	for i := range body {
		tampered := slices.Clone(body)
		tampered[i] ^= 0x01
		_, err := newAlipay().Verify(nil, tampered, testNow)
		requireCode(t, err, lapse.EUNAUTHORIZED, "")
	}
	// A parameter added, or removed.
	_, err := newAlipay().Verify(nil, signed.set("refund_status", "REFUND_SUCCESS").form(), testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "does not match")
	_, err = newAlipay().Verify(nil, signed.without("refund_fee").form(), testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "does not match")
	// Signed by someone else.
	_, err = newAlipay().Verify(nil, alipayPaid().sign(t, testRSAKeys()[1]).form(), testNow)
	requireCode(t, err, lapse.EUNAUTHORIZED, "does not match")
}

// TestAlipayEmptyParameters: empty values are not signed, and read as absent.
func TestAlipayEmptyParameters(t *testing.T) {
	t.Parallel()
	signed := alipayPaid().sign(t, testRSAKeys()[0])
	n, err := newAlipay().Verify(nil, signed.set("passback_params", "").set("refund_fee", "").form(), testNow)
	if err != nil || n.Kind != lapse.NoticePaid {
		t.Fatalf("empty parameters added: %s, %v", brief(n), err)
	}
	n, err = alipayVerify(t, alipayPaid().set("total_amount", ""))
	requireUnreadable(t, n, err, "total_amount")
}

// alipayFreeText are subjects, bodies and passback_params that merchants
// send and Alipay returns in its notifications: '&', '=', '%', '+', names
// that are no parameter, Chinese text. None may stop a notice verifying.
var alipayFreeText = []string{
	"满100元&立减=10元",
	"a=1&b=2",
	"Fish & Chips = 炸鱼薯条 + 可乐",
	"50% off + 10%25 more %26 %3D",
	"&=&==&&",
	"x&立减=10&y=2&subject=",
	"&Total_Amount=1&total_amount =1&total_amountx=1",
	"order_no=ORD-1&user=42&coupon=满减券",
	"line one\nline two\t😀&",
}

// TestAlipayFreeText: genuine notices whose free text holds '&' and '='
// verify, whatever the order of the parameters in the body.
func TestAlipayFreeText(t *testing.T) {
	t.Parallel()
	want, err := alipayVerify(t, alipayPaid())
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range alipayFreeText {
		for _, field := range []string{"subject", "body", "passback_params"} {
			signed := alipayPaid().set(field, text).sign(t, testRSAKeys()[0])
			reversed := slices.Clone(signed)
			slices.Reverse(reversed)
			for _, p := range []alipayParams{signed, reversed} {
				n, err := newAlipay().Verify(nil, p.form(), testNow)
				if err != nil || !sameNotice(n, want) {
					t.Errorf("%s %q: %s, %v", field, text, brief(n), err)
				}
			}
		}
	}
}

// sameNotice says whether a and b say the same, whatever their Raw bytes.
func sameNotice(a, b *lapse.PaymentNotice) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Raw, y.Raw = nil, nil
	return reflect.DeepEqual(x, y)
}

// TestAlipayMergedValue: the signed string cannot tell a=1&b=2 from a single
// a="1&b=2". Folding refund_fee into the value before it would turn a
// captured refund notice into a payment notice; it is refused.
func TestAlipayMergedValue(t *testing.T) {
	t.Parallel()
	signed := alipayRefunded().sign(t, testRSAKeys()[0])
	merged := signed.without("refund_fee").set("receipt_amount", "88.80&refund_fee=30.00")
	if merged.content() != signed.content() {
		t.Fatal("the merge changed the signed string; the test proves nothing")
	}
	n, err := newAlipay().Verify(nil, merged.form(), testNow)
	if n != nil {
		t.Fatalf("a forged notice %s", brief(n))
	}
	requireCode(t, err, lapse.EUNAUTHORIZED, `"&refund_fee="`)
}

// alipayReadings returns the other readings of p's signed string that a
// forger could send with p's signature: p's parameters re-split at one or
// two places where a parameter could start, or stop starting, each a body
// whose signed string is p's.
func alipayReadings(t *testing.T, p alipayParams) []alipayParams {
	t.Helper()
	content := p.content()
	var at []int // the '&' after which a parameter could start
	for i := 0; i < len(content); i++ {
		if content[i] != '&' {
			continue
		}
		rest := content[i+1:]
		if j := strings.IndexAny(rest, "&="); j > 0 && rest[j] == '=' {
			at = append(at, i)
		}
	}
	real := map[int]bool{} // the '&' that p itself splits at
	off := 0
	for i, kv := range p.sorted() {
		if i > 0 {
			real[off-1] = true
		}
		off += len(kv[0]) + 1 + len(kv[1]) + 1
	}
	var out []alipayParams
	try := func(flip ...int) {
		seps := maps.Clone(real)
		for _, f := range flip {
			seps[f] = !seps[f]
		}
		var q alipayParams
		begin := 0
		for i := 0; i <= len(content); i++ {
			if i < len(content) && !seps[i] {
				continue
			}
			k, v, ok := strings.Cut(content[begin:i], "=")
			if !ok || k == "" || v == "" || strings.Contains(k, "&") || (len(q) > 0 && q[len(q)-1][0] >= k) {
				return // not a form Lapse would read, or not signed as p
			}
			q = append(q, [2]string{k, v})
			begin = i + 1
		}
		if q.content() != content {
			t.Fatalf("reading %v does not sign as %q", q, content)
		}
		out = append(out, slices.Concat(q, alipayParams{{"sign_type", p.get("sign_type")}, {"sign", p.get("sign")}}))
	}
	for i, a := range at {
		try(a)
		for _, b := range at[i+1:] {
			try(a, b)
		}
	}
	return out
}

// sorted returns p's signed pairs in the order they are signed.
func (p alipayParams) sorted() alipayParams {
	var out alipayParams
	for _, kv := range p {
		if kv[0] != "sign" && kv[0] != "sign_type" && kv[1] != "" {
			out = append(out, kv)
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

func (p alipayParams) get(k string) string {
	for _, kv := range p {
		if kv[0] == k {
			return kv[1]
		}
	}
	return ""
}

// TestAlipayReadings: whatever reading of a genuine notice's signed string
// a forger sends with its signature, it is refused or says what the
// genuine notice says. The genuine notices hold free text that a reading
// can split, and fields that one can fold into the value before them.
func TestAlipayReadings(t *testing.T) {
	t.Parallel()
	genuine := []alipayParams{alipayPaid(), alipayRefunded(), alipayRefunded().without("out_biz_no").set("trade_status", "TRADE_CLOSED"),
		alipayPaid().without("gmt_payment"), alipayPaid().without("seller_id"), alipayPaid().without("seller_id").without("seller_email")}
	for _, text := range alipayFreeText {
		genuine = append(genuine, alipayPaid().set("subject", text).set("passback_params", text),
			alipayRefunded().set("body", text).without("point_amount").without("receipt_amount").set("passback_params", text))
	}
	tried := 0
	for _, g := range genuine {
		signed := g.sign(t, testRSAKeys()[0])
		want, err := newAlipay().Verify(nil, signed.form(), testNow)
		if err != nil {
			t.Fatalf("genuine %s: %v", signed.content(), err)
		}
		for _, q := range alipayReadings(t, signed) {
			tried++
			n, err := newAlipay().Verify(nil, q.form(), testNow)
			if err == nil && !sameNotice(n, want) {
				t.Errorf("a reading of a genuine notice says something else:\n%s\ngenuine %s\nread    %s", q.form(), brief(want), brief(n))
			}
		}
	}
	if tried < 1000 {
		t.Fatalf("only %d readings tried", tried)
	}
}

// TestAlipayAmbiguousText: free text that embeds a field Lapse reads, as
// "&refund_fee=" (only text a merchant sent can), is refused even when
// Alipay signed it: a reading that splits the field out of the text is
// signed alike. So is a field Lapse reads whose value embeds any name.
func TestAlipayAmbiguousText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    alipayParams
		want string
	}{
		{alipayPaid().set("passback_params", "x&refund_fee=88.80"), `"passback_params" holds "&refund_fee="`},
		{alipayPaid().set("subject", "&seller_id=2088000000000000"), `"&seller_id="`},
		{alipayPaid().set("body", "a&b&out_trade_no=ORD-2"), `"&out_trade_no="`},
		{alipayPaid().set("out_trade_no", "ORD-1&x=1"), `"out_trade_no" holds "&x="`},
	} {
		n, err := alipayVerify(t, c.p)
		if n != nil {
			t.Errorf("%s: notice %s", c.want, brief(n))
		}
		requireCode(t, err, lapse.EUNAUTHORIZED, c.want)
	}
}

func TestAlipaySignatureErrors(t *testing.T) {
	t.Parallel()
	signed := alipayPaid().sign(t, testRSAKeys()[0])
	for _, c := range []struct {
		body []byte
		want string
	}{
		{signed.set("sign_type", "RSA").form(), "sign_type"},
		{signed.set("sign_type", "rsa2").form(), "sign_type"},
		{signed.without("sign_type").form(), "sign_type"},
		{signed.without("sign").form(), "sign parameter is missing"},
		{signed.set("sign", "not*base64").form(), "base64"},
		{append(signed.form(), "&app_id="+alipayAppID...), `"app_id" appears twice`},
		{append(signed.form(), "&%61pp_id="+alipayAppID...), `"app_id" appears twice`},
		{append(signed.form(), "&refund_fee=&refund_fee=88.80"...), `"refund_fee" appears twice`},
		{append(signed.form(), "&&"...), "well-formed"},
		{append(signed.form(), "&refund_fee"...), "well-formed"},
		{append(signed.form(), "&=1"...), "well-formed"},
		{append(signed.form(), "&x=%zz"...), "well-formed"},
		{append(signed.form(), "&a%3Db=1"...), "unambiguously"},
		{[]byte(""), "empty"},
	} {
		n, err := newAlipay().Verify(nil, c.body, testNow)
		if n != nil {
			t.Errorf("%s: notice %s", c.body, brief(n))
		}
		requireCode(t, err, lapse.EUNAUTHORIZED, c.want)
	}
	_, err := (&Alipay{AppID: alipayAppID, SellerID: alipaySellerID}).Verify(nil, signed.form(), testNow)
	requireCode(t, err, lapse.EINTERNAL, "public key")
}

// TestAlipaySeller: a notice names its seller by seller_id, seller_email,
// both (as Alipay sends them) or neither (both are optional in Alipay's
// table). Another seller_id is refused; a seller that cannot be confirmed
// puts the payment in review; a refund is not held back.
func TestAlipaySeller(t *testing.T) {
	t.Parallel()
	const email = "merchant@example.com"
	for _, c := range []struct {
		name          string
		id, mail      string // configured
		p             alipayParams
		merchant      string
		review, error string // what the review reason or error mentions
	}{
		{"seller_id", alipaySellerID, "", alipayPaid(), alipaySellerID, "", ""},
		{"seller_id, another seller_email", alipaySellerID, "old@example.com", alipayPaid(), alipaySellerID, "", ""},
		{"seller_email", alipaySellerID, email, alipayPaid().without("seller_id"), email, "", ""},
		{"seller_email in another case", "", "Merchant@Example.COM", alipayPaid().without("seller_id"), email, "", ""},
		{"seller_email, seller_id not configured", "", email, alipayPaid(), alipaySellerID, "", ""},
		{"another seller_id", alipaySellerID, email, alipayPaid().set("seller_id", "2088000000000000"), "", "", "seller_id"},
		{"seller_email not configured", alipaySellerID, "", alipayPaid().without("seller_id"), email, `seller_email "merchant@example.com"`, ""},
		{"another seller_email", "", "old@example.com", alipayPaid(), alipaySellerID, `not "old@example.com"`, ""},
		{"no seller", alipaySellerID, email, alipayPaid().without("seller_id").without("seller_email"), "", "names no seller", ""},
		{"empty sellers", alipaySellerID, email, alipayPaid().set("seller_id", "").set("seller_email", ""), "", "names no seller", ""},
		{"refund, no seller", alipaySellerID, email, alipayRefunded().without("seller_id").without("seller_email"), "", "", ""},
	} {
		a := newAlipay()
		a.SellerID, a.SellerEmail = c.id, c.mail
		n, err := a.Verify(nil, c.p.sign(t, testRSAKeys()[0]).form(), testNow)
		if c.error != "" {
			if n != nil {
				t.Errorf("%s: notice %s", c.name, brief(n))
			}
			requireCode(t, err, lapse.EINVALID, c.error)
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if n.Merchant != c.merchant || (c.review == "") != (n.Review == "") || !strings.Contains(n.Review, c.review) {
			t.Errorf("%s: %s review %q; want merchant %q, review mentioning %q", c.name, brief(n), n.Review, c.merchant, c.review)
		}
	}
}

// TestAlipayNoticeErrors: notices that verify but that Lapse cannot act on.
func TestAlipayNoticeErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    alipayParams
		want string
	}{
		{alipayPaid().set("app_id", "2021999999999999"), "app_id"},
		{alipayPaid().without("app_id"), "app_id"},
		{alipayPaid().set("seller_id", "2088000000000000"), "seller_id"},
		{alipayPaid().without("trade_no"), "trade_no"},
		{alipayPaid().without("out_trade_no"), "out_trade_no"},
	} {
		n, err := alipayVerify(t, c.p)
		if n != nil {
			t.Errorf("%s: notice %s", c.want, brief(n))
		}
		requireCode(t, err, lapse.EINVALID, c.want)
	}
	// Verified, naming its trade and order, but with a field Lapse cannot
	// take: unreadable, saying which, as sent.
	for _, c := range []struct {
		p    alipayParams
		want string
	}{
		{alipayPaid().without("gmt_payment").without("notify_time"), "gmt_payment"},
		{alipayPaid().without("gmt_payment").set("notify_time", "2025-11-30T15:59:01+08:00"), `notify_time "2025-11-30T15:59:01+08:00"`},
		{alipayPaid().set("gmt_payment", "2025-11-30T15:59:00+08:00"), `gmt_payment "2025-11-30T15:59:00+08:00"`},
		{alipayPaid().without("total_amount"), "total_amount"},
	} {
		n, err := alipayVerify(t, c.p)
		requireUnreadable(t, n, err, c.want)
	}
	for _, cur := range []string{"USD", "usd"} {
		n, err := alipayVerify(t, alipayPaid().set("trans_currency", cur))
		if err != nil || n.Kind != lapse.NoticePaid || n.Currency != cur {
			t.Errorf("trans_currency %s: %s, %v; want a paid notice in %s", cur, brief(n), err, cur)
		}
	}
}

func TestAlipayAmounts(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{"88.8": 8880, "88.80": 8880, "0.01": 1, "0.29": 29, "100": 10000, "0": 0,
		"999999999999.99": 99999999999999} {
		if got, ok := parseAmount(s, 2); !ok || got != want {
			t.Errorf("parseAmount(%q, 2) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "1e2", "-1", "+1", "1.234", "1.", ".5", ".", "01.00", "00", "1,000.00", " 1", "1 ",
		"0x10", "１", "1.2.3", "1000000000000", "NaN", "Inf"} {
		if got, ok := parseAmount(s, 2); ok {
			t.Errorf("parseAmount(%q, 2) = %d, want a refusal", s, got)
		}
		n, err := alipayVerify(t, alipayPaid().set("total_amount", s))
		requireUnreadable(t, n, err, "total_amount")
	}
	n, err := alipayVerify(t, alipayPaid().set("total_amount", "0.00"))
	requireUnreadable(t, n, err, `total_amount "0.00"`)
}

func TestAlipayAck(t *testing.T) {
	t.Parallel()
	a := newAlipay()
	w := ackRecorder(a.Ack, nil)
	if w.Code != http.StatusOK || w.Body.String() != "success" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("ack of success: %d %q", w.Code, w.Body)
	}
	for _, c := range ackCases {
		w := ackRecorder(a.Ack, c.err)
		if w.Code != c.status || w.Body.String() != "failure" {
			t.Errorf("ack of %v: %d %q", c.err, w.Code, w.Body)
		}
	}
}

func TestParseAlipayPublicKey(t *testing.T) {
	t.Parallel()
	key := &testRSAKeys()[0].PublicKey
	der, _ := x509.MarshalPKIXPublicKey(key)
	bare := base64.StdEncoding.EncodeToString(der)
	for _, s := range []string{
		bare,
		"  " + bare[:64] + "\n" + bare[64:] + "\n",
		string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(key)})),
	} {
		got, err := ParseAlipayPublicKey(s)
		if err != nil || !got.Equal(key) {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "not base64!", base64.StdEncoding.EncodeToString([]byte("junk")), "-----BEGIN PUBLIC KEY-----\nMIIB\n"} {
		if _, err := ParseAlipayPublicKey(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

// alipayNamePattern finds, by Alipay's rule, where a parameter could start
// inside a value of the signed string.
var alipayNamePattern = regexp.MustCompile(`&([^&=]+)=`)

// alipayAmbiguous says whether parameter k=v could be read in another way
// that changes a field Lapse reads: v embeds one of them, or k is one and
// v embeds any name.
func alipayAmbiguous(k, v string) bool {
	for _, m := range alipayNamePattern.FindAllStringSubmatch(v, -1) {
		if alipayFields[m[1]] || alipayFields[k] {
			return true
		}
	}
	return false
}

func FuzzAlipayVerify(f *testing.F) {
	key := testRSAKeys()[0]
	f.Add(string(alipayPaid().form()), true)
	f.Add(string(alipayRefunded().form()), true)
	f.Add(string(alipayPaid().sign(f, key).form()), false)
	f.Add(string(alipayPaid().set("total_amount", "1e2").form()), true)
	f.Add("trade_status=TRADE_SUCCESS&app_id="+alipayAppID+"&seller_id="+alipaySellerID+"&refund_fee=0.01&trade_no=t&out_trade_no=o&gmt_refund=2025-11-30+00:00:00", true)
	f.Add("a=1&a=2", true)
	f.Add(string(alipayPaid().set("subject", "满100元&立减=10元").form()), true)
	f.Add(string(alipayRefunded().without("refund_fee").set("receipt_amount", "88.80&refund_fee=30.00").form()), true)
	a := newAlipay()
	f.Fuzz(func(t *testing.T, body string, sign bool) {
		clean := false
		if sign {
			// Sign the input here, by the rule, to take the fuzzer past
			// the signature to the parser behind it.
			var p alipayParams
			clean = true
			seen := map[string]bool{}
			for part := range strings.SplitSeq(body, "&") {
				k, v, ok := strings.Cut(part, "=")
				k, kerr := url.QueryUnescape(k)
				v, verr := url.QueryUnescape(v)
				if !ok || kerr != nil || verr != nil || k == "" || seen[k] || k == "sign" || k == "sign_type" ||
					strings.ContainsAny(k, "&=") || alipayAmbiguous(k, v) {
					clean = false
				}
				seen[k] = true
				p = append(p, [2]string{k, v})
			}
			body = string(p.sign(t, key).form())
		}
		n, err := a.Verify(nil, []byte(body), testNow)
		requireSaneNotice(t, n, err)
		if clean && lapse.ErrorCode(err) == lapse.EUNAUTHORIZED {
			t.Fatalf("a well-formed form signed by the rule failed verification: %v", err)
		}
	})
}

// TestAlipayAmountInTransCurrency: total_amount is written in the units of
// trans_currency, so it is read into that currency's minor units (none for
// JPY, three for KWD), not always into fen: ¥10 read as 1000 minor units
// would pay an order of ¥1000.
func TestAlipayAmountInTransCurrency(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cur, amount string
		want        int64
	}{
		{"JPY", "1000", 1000}, {"JPY", "10", 10}, {"JPY", "1000.00", 1000}, {"jpy", "1000", 1000},
		{"KWD", "1.234", 1234}, {"KWD", "1.5", 1500}, {"USD", "88.80", 8880}, {"CNY", "0.29", 29},
	} {
		n, err := alipayVerify(t, alipayPaid().set("trans_currency", c.cur).set("total_amount", c.amount))
		if err != nil || n.Kind != lapse.NoticePaid || n.Amount != c.want {
			t.Errorf("total_amount %s %s: %s, %v; want %d minor units", c.amount, c.cur, brief(n), err, c.want)
		}
	}
	for _, c := range []struct{ cur, amount string }{{"JPY", "10.5"}, {"JPY", "10.05"}, {"KWD", "1.2345"}, {"USD", "1.234"}} {
		n, err := alipayVerify(t, alipayPaid().set("trans_currency", c.cur).set("total_amount", c.amount))
		requireUnreadable(t, n, err, "total_amount")
	}
	// A refund's refund_fee is in the trade's currency too.
	n, err := alipayVerify(t, alipayRefunded().set("trans_currency", "JPY").set("refund_fee", "300"))
	if err != nil || n.Kind != lapse.NoticeRefunded || n.Amount != 300 {
		t.Errorf("refund_fee 300 JPY: %s, %v; want 300 minor units", brief(n), err)
	}
}
