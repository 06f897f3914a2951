package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/console"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/webhook"
)

// app is who the tests' own engine calls are by.
var app = engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}

// provider is a payment provider port that refunds at once and declines
// every charge.
type provider struct {
	mu      sync.Mutex
	refunds []*lapse.RefundRequest
}

func (p *provider) Charge(ctx context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return nil, fmt.Errorf("sandbox: charge: %w: the payment method was declined", lapse.ErrRefused)
}

func (p *provider) Refund(ctx context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refunds = append(p.refunds, r)
	return &lapse.ProviderRefund{RefundID: "re-" + r.IdempotencyKey, TxnID: r.TxnID, Amount: r.Amount, Status: lapse.RefundSucceeded}, nil
}

func (p *provider) RefundQuery(ctx context.Context, key string) (*lapse.ProviderRefund, error) {
	return nil, lapse.ErrProviderNotFound
}

func (p *provider) Query(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	return nil, lapse.ErrProviderNotFound
}

func (p *provider) Close(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	return nil, lapse.ErrProviderNotFound
}

// cardService is a merchant card service behind a real port: down (503)
// until fixed, after which cards are issued in the engine's own ledger.
type cardService struct {
	port   *port.Port
	ledger lapse.CardIssuer
	fixed  atomic.Bool
}

func (c *cardService) Issue(ctx context.Context, r *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	if c.fixed.Load() {
		return c.ledger.Issue(ctx, r)
	}
	return c.port.Issue(ctx, r)
}

func (c *cardService) Revoke(ctx context.Context, r *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	return c.ledger.Revoke(ctx, r)
}

// desk is an env with the outside world the queue's fixtures need: a
// payment provider, a card service that is down, and a webhook receiver
// that fails.
type desk struct {
	*env
	provider *provider
	cards    *cardService
	deliver  *engine.Deliverer
}

// deskConfig adjusts a desk's env.
type deskConfig struct {
	approvalAmount int64         // access.Config.ApprovalAmount
	approvalCount  int64         // access.Config.ApprovalCount
	flows          []*lapse.Flow // the engine's flows; default flows.Builtin()
}

func newDesk(t *testing.T, dc deskConfig) *desk {
	t.Helper()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "card service under maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	p, err := port.New("card-port", port.Config{URL: down.URL})
	if err != nil {
		t.Fatal(err)
	}
	hook, err := webhook.New(webhook.Config{URL: down.URL, Secret: strings.Repeat("s", 32)})
	if err != nil {
		t.Fatal(err)
	}
	d := &desk{provider: &provider{}, cards: &cardService{port: p}}
	d.env = newEnv(t, envConfig{
		engine: func(c *engine.Config) {
			c.Cards = d.cards
			c.IssueRetries = []time.Duration{time.Minute, 5 * time.Minute}
			c.GroupRetries = []time.Duration{time.Second}
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": d.provider},
				Merchants: map[string]string{"sandbox": "m-1"}}
			c.Subscriptions = []engine.Subscription{{Name: "webhook", Handler: hook, Events: []string{flows.EventOrderClosed},
				Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}}}
		},
		access: func(c *access.Config) { c.ApprovalAmount, c.ApprovalCount = dc.approvalAmount, dc.approvalCount },
		flows:  dc.flows,
	})
	d.cards.ledger = engine.NewCardLedger(d.engine)
	d.deliver = engine.NewDeliverer(d.engine, engine.DelivererConfig{})
	return d
}

// drain runs the deliverer until nothing is due at the clock's time.
func (d *desk) drain() {
	d.t.Helper()
	for range 50 {
		n, err := d.deliver.RunOnce(d.ctx)
		if err != nil {
			d.t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	d.t.Fatal("deliveries still due after 50 rounds")
}

// until runs the deliverer, advancing the clock a minute at a time, until
// done says so.
func (d *desk) until(what string, done func() bool) {
	d.t.Helper()
	for range 200 {
		d.drain()
		if done() {
			return
		}
		d.clock.Advance(time.Minute)
	}
	d.t.Fatalf("%s did not happen", what)
}

func (d *desk) state(no string) lapse.State {
	d.t.Helper()
	o, err := d.engine.Order(d.ctx, no)
	if err != nil {
		d.t.Fatal(err)
	}
	return o.State
}

// pay applies a callback of the sandbox paying no with amount.
func (d *desk) pay(no string, amount int64) *lapse.Payment {
	d.t.Helper()
	p, err := d.engine.ApplyPayment(d.ctx, &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "txn-" + no,
		OrderNo: no, Amount: amount, Currency: "CNY", Merchant: "m-1", PaidAt: d.clock.Now(), Raw: []byte(`{}`)})
	if err != nil {
		d.t.Fatal(err)
	}
	return p
}

func (d *desk) create(no, flow string, amount int64, md string) {
	d.t.Helper()
	req := &lapse.OrderCreate{OrderNo: no, Flow: flow, UserID: "u-" + no, Amount: amount, Currency: "CNY"}
	if flow == "checkout" { // the one flow that holds items
		req.Items = []lapse.Item{{SKU: "sku-1", Qty: 1}}
	}
	if md != "" {
		req.Metadata = json.RawMessage(md)
	}
	if _, _, err := d.engine.CreateOrder(d.ctx, req, app); err != nil {
		d.t.Fatal(err)
	}
}

// membershipInReview is a paid membership whose cards the card service
// never issued: its issue delivery died after every attempt, and it waits
// in manual review.
func (d *desk) membershipInReview(no string) {
	d.t.Helper()
	d.create(no, "membership", 19900, `{"cards": [{"product": "swim-10", "visits": 10}]}`)
	if _, err := d.engine.Fire(d.ctx, no, engine.Fire{Event: flows.Submit, By: app}); err != nil {
		d.t.Fatal(err)
	}
	if p := d.pay(no, 19900); p.Status != lapse.PaymentApplied {
		d.t.Fatalf("payment of %s: %s", no, p.Status)
	}
	d.until(no+"'s issue delivery dying", func() bool {
		hs, err := d.engine.Deliveries(d.ctx, no)
		if err != nil {
			d.t.Fatal(err)
		}
		for _, h := range hs {
			if h.Subscriber == engine.IssueSubscriber && h.Status == lapse.DeliveryDead {
				return true
			}
		}
		return false
	})
	if st := d.state(no); st != flows.ManualReview {
		d.t.Fatalf("%s is %s, want MANUAL_REVIEW", no, st)
	}
}

// mismatch is a checkout order paid the wrong amount: the payment waits in
// review.
func (d *desk) mismatch(no string) {
	d.t.Helper()
	d.create(no, "checkout", 5000, "")
	if p := d.pay(no, 4000); p.Status != lapse.PaymentReview {
		d.t.Fatalf("payment of %s: %s", no, p.Status)
	}
}

// failedGroup is a group buy whose members' charges were declined through
// the retry schedule.
func (d *desk) failedGroup(no string) {
	d.t.Helper()
	d.create(no, "groupbuy", 3000, "")
	for _, u := range []string{"ann", "ben"} {
		if _, _, err := d.engine.JoinGroup(d.ctx, no, engine.JoinRequest{UserID: u, Method: "tok-" + u, By: app}); err != nil {
			d.t.Fatal(err)
		}
	}
	if _, err := d.engine.CloseOrder(d.ctx, no, "the test closes it", app); err != nil {
		d.t.Fatal(err)
	}
	d.until(no+" failing", func() bool { return d.state(no) == flows.GroupFailed })
}

// deadWebhook is a cancelled checkout order whose order.closed event the
// webhook receiver never took.
func (d *desk) deadWebhook(no string) {
	d.t.Helper()
	d.create(no, "checkout", 1200, "")
	if _, err := d.engine.Fire(d.ctx, no, engine.Fire{Event: flows.Cancel, By: app}); err != nil {
		d.t.Fatal(err)
	}
	d.until(no+"'s webhook dying", func() bool {
		rs, err := d.engine.Reviews(d.ctx, &lapse.ReviewListParams{Open: true})
		if err != nil {
			d.t.Fatal(err)
		}
		for _, r := range rs {
			if r.OrderNo == no {
				return true
			}
		}
		return false
	})
}

// page gets path as b and fails unless it is status, whole, with every
// message defined.
func (b *browser) page(path string, status int) string {
	b.e.t.Helper()
	got, body := b.get(path)
	if got != status {
		b.e.t.Fatalf("GET %s = %d, want %d:\n%s", path, got, status, body)
	}
	if m := missingMessage.FindString(body); m != "" {
		b.e.t.Errorf("GET %s shows an undefined message %s", path, m)
	}
	if !strings.Contains(body, "</html>") {
		b.e.t.Errorf("GET %s is not a whole page", path)
	}
	return body
}

// zh switches b's operator to Chinese in Shanghai time.
func (b *browser) zh() {
	b.e.t.Helper()
	resp := b.post("/console/preferences", url.Values{"lang": {"zh"}, "time_zone": {"Asia/Shanghai"}, "next": {"/console/"}})
	if resp.StatusCode != http.StatusSeeOther {
		b.e.t.Fatalf("preferences = %d", resp.StatusCode)
	}
}

// rows returns the order numbers the queue page lists, in its order.
func rows(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<td[^>]*><a href="/console/orders/([^"]+)">`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestQueueEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", "operator")
	b := e.login("alice")
	body := b.page("/console/", http.StatusOK)
	if !strings.Contains(body, "Nothing waits for an operator.") || len(rows(body)) != 0 {
		t.Errorf("empty queue:\n%s", body)
	}
	b.zh()
	if body := b.page("/console/", http.StatusOK); !strings.Contains(body, "没有等待人工处理的订单") {
		t.Errorf("empty queue in Chinese:\n%s", body)
	}
}

func TestQueue(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.membershipInReview("M-1")
	d.mismatch("C-1")
	d.failedGroup("G-1")
	d.deadWebhook("C-2")
	d.create("C-3", "checkout", 800, "") // unpaid: nothing to review
	d.operator("alice", "operator")
	b := d.login("alice")

	body := b.page("/console/", http.StatusOK)
	got := strings.Join(rows(body), " ")
	for _, no := range []string{"M-1", "C-1", "G-1", "C-2"} {
		if !strings.Contains(got, no) {
			t.Errorf("the queue lacks %s: %s", no, got)
		}
	}
	if strings.Contains(got, "C-3") {
		t.Errorf("the queue lists an unpaid order: %s", got)
	}
	for _, want := range []string{"Card issue failed", "Callback mismatch", "Group buy failed", "Notification failed", "199.00 CNY",
		"MANUAL_REVIEW", "the payment is 40.00 CNY; order C-1 is 50.00 CNY", "card service under maintenance",
		`href="/console/?category=card_issue_failed"`, "2026-11-30"} {
		if !strings.Contains(body, want) {
			t.Errorf("the queue lacks %q:\n%s", want, body)
		}
	}
	// Counts per category, each a link that filters.
	if !strings.Contains(body, `<a href="/console/?category=card_issue_failed" ><span class="badge cat-card_issue_failed">Card issue failed 1</span></a>`) ||
		!strings.Contains(body, "All 4") {
		t.Errorf("no count of card_issue_failed:\n%s", body)
	}

	// The membership in manual review is found by its category.
	body = b.page("/console/?category=card_issue_failed", http.StatusOK)
	if got := rows(body); len(got) != 1 || got[0] != "M-1" {
		t.Errorf("category card_issue_failed lists %v", got)
	}
	if got := rows(b.page("/console/?flow=groupbuy", http.StatusOK)); len(got) != 1 || got[0] != "G-1" {
		t.Errorf("flow groupbuy lists %v", got)
	}
	if got := rows(b.page("/console/?min=100", http.StatusOK)); len(got) != 1 || got[0] != "M-1" {
		t.Errorf("at least 100.00 lists %v", got)
	}
	if got := rows(b.page("/console/?min=30.00&flow=checkout", http.StatusOK)); len(got) != 1 || got[0] != "C-1" {
		t.Errorf("checkout at least 30.00 lists %v", got)
	}
	body = b.page("/console/?min=12,5", http.StatusOK)
	if !strings.Contains(body, "The amount filter was ignored") || len(rows(body)) != 4 {
		t.Errorf("a bad min:\n%s", body)
	}
	body = b.page("/console/?age=24h", http.StatusOK)
	if len(rows(body)) != 0 || !strings.Contains(body, "Nothing matches these filters.") {
		t.Errorf("older than 24h lists %v", rows(body))
	}
	d.clock.Advance(2 * time.Hour)
	b = d.login("alice") // the session idled out meanwhile
	if got := rows(b.page("/console/?age=1h&category=group_failed", http.StatusOK)); len(got) != 1 || got[0] != "G-1" {
		t.Errorf("failed groups older than 1h list %v", got)
	}

	b.zh()
	body = b.page("/console/", http.StatusOK)
	for _, want := range []string{"复核队列", "发卡失败", "回调不符", "拼团失败", "通知失败", "2026-11-30 1", "CST"} {
		if !strings.Contains(body, want) {
			t.Errorf("the queue in Chinese lacks %q:\n%s", want, body)
		}
	}
}

// TestQueueAgeReadsTheOldest: with more open reviews than the queue reads
// at once, an age filter still finds the old ones, which are the ones it
// asks for: the read starts at the filter's cutoff, not at the newest.
func TestQueueAgeReadsTheOldest(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.create("OLD-1", "checkout", 500, "")
	d.create("NEW-1", "checkout", 500, "")
	review := func(no, reason string) {
		t.Helper()
		o, err := d.engine.Order(d.ctx, no)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.store.ReviewCreate(d.ctx, &lapse.Review{OrderID: o.ID, OrderNo: no, Reason: reason, CreatedAt: d.clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	review("OLD-1", "waited two days")
	d.clock.Advance(48 * time.Hour)
	for i := range console.MaxQueueReviews + 1 {
		review("NEW-1", fmt.Sprintf("newer %d", i))
	}
	d.operator("alice", "operator")
	b := d.login("alice")

	body := b.page("/console/", http.StatusOK)
	if strings.Contains(strings.Join(rows(body), " "), "OLD-1") || !strings.Contains(body, "older items are not shown") {
		t.Fatalf("the unfiltered queue, with more open reviews than it reads, shows the oldest or says nothing of the rest: %v", rows(body))
	}
	body = b.page("/console/?age=24h", http.StatusOK)
	if got := rows(body); len(got) != 1 || got[0] != "OLD-1" || !strings.Contains(body, "waited two days") {
		t.Errorf("older than 24h lists %v; want OLD-1, whose review waited two days", got)
	}
}
