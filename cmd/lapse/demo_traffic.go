package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// demoTraffic drives lapse demo's customers, merchants and group buyers
// through the service's HTTP API, as another service would, with the key
// the demo made: every order, payment and refund of the demo is a request.
type demoTraffic struct {
	api, key string
	client   *http.Client
	rng      func() float64 // in [0, 1)
	// redeliver sends the sandbox's callback about a payment again.
	redeliver func(ctx context.Context, txnID string) error
	seq       atomic.Int64
	// memberships and groups count those started: every fourth of each
	// is one that fails (see membership, groupBuy), from the first on.
	memberships, groups atomic.Int64

	mu       sync.Mutex
	credit   []float64      // by scenario, for pick
	started  map[string]int // scenarios started, by name
	apiFails int            // requests that got no answer or an unexpected one
	lastErr  string
}

// The demo's timings: short, so that deadlines pass while one watches.
const (
	demoCheckoutTTL = 3 * time.Second
	demoGroupTTL    = 4 * time.Second
	demoGrace       = 2 * time.Second // --payment-grace checkout=
	demoCurrency    = "CNY"
	demoSKUs        = 8
)

// A demoScenario is one thing that customers do, with its share of the
// traffic.
type demoScenario struct {
	name  string
	share float64
	run   func(t *demoTraffic, ctx context.Context, no string)
}

// demoScenarios are the demo's traffic; their shares add up to 1.
var demoScenarios = []demoScenario{
	{"paid", 0.30, (*demoTraffic).paid},
	{"abandoned", 0.17, (*demoTraffic).abandoned},
	{"late payment", 0.10, (*demoTraffic).latePayment},
	{"paying at the deadline", 0.10, (*demoTraffic).intent},
	{"cancelled", 0.05, (*demoTraffic).cancelled},
	{"refunded", 0.08, (*demoTraffic).refunded},
	{"membership", 0.12, (*demoTraffic).membership},
	{"group buy", 0.08, (*demoTraffic).groupBuy},
}

func newDemoTraffic(api, key string, redeliver func(ctx context.Context, txnID string) error) *demoTraffic {
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var mu sync.Mutex
	return &demoTraffic{api: api, key: key, redeliver: redeliver, started: map[string]int{}, credit: make([]float64, len(demoScenarios)),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}},
		rng: func() float64 {
			mu.Lock()
			defer mu.Unlock()
			return r.Float64()
		}}
}

// setUp gives the built-in stock ledger the demo's SKUs.
func (t *demoTraffic) setUp(ctx context.Context) error {
	for i := range demoSKUs {
		if code, err := t.call(ctx, "PUT", fmt.Sprintf("/v1/stock/tea-%d", i), map[string]any{"on_hand": 1_000_000}, nil); err != nil || code != 200 {
			return fmt.Errorf("setting the demo's stock: %d %v", code, err)
		}
	}
	return nil
}

// run starts rate scenarios a second until ctx ends, each on its own
// goroutine (at most inFlight at once: beyond, an arrival is skipped), and
// returns once every scenario it started has returned.
func (t *demoTraffic) run(ctx context.Context, rate float64) {
	const inFlight = 256
	slots := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	every := time.Duration(float64(time.Second) / rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue
		}
		sc := t.pick()
		no := fmt.Sprintf("D-%05d", t.seq.Add(1))
		t.mu.Lock()
		t.started[sc.name]++
		t.mu.Unlock()
		wg.Go(func() {
			defer func() { <-slots }()
			sc.run(t, ctx, no)
		})
	}
}

// pick returns the next arrival's scenario, in a smooth weighted round
// robin: each scenario gains its share at each arrival and the one with
// the most credit goes, paying 1. So any run of arrivals, from the first
// on, holds every scenario in its share, give or take one: a demo of a
// few seconds shows refunds and reviews too, where a random draw left
// about one four-second run in ten without a refund.
func (t *demoTraffic) pick() demoScenario {
	t.mu.Lock()
	defer t.mu.Unlock()
	best := 0
	for i, sc := range demoScenarios {
		t.credit[i] += sc.share
		if t.credit[i] > t.credit[best] {
			best = i
		}
	}
	t.credit[best]-- // the shares add up to 1
	return demoScenarios[best]
}

// Started returns how many scenarios of each kind were started, and how
// many requests failed, with the last failure.
func (t *demoTraffic) Started() (map[string]int, int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.started))
	for k, v := range t.started {
		out[k] = v
	}
	return out, t.apiFails, t.lastErr
}

// The scenarios. Each is a few requests with pauses between them; a request
// that fails is counted and ends the scenario.

// paid: a customer pays in time.
func (t *demoTraffic) paid(ctx context.Context, no string) {
	amount := t.checkout(ctx, no, demoCheckoutTTL)
	if amount == 0 || !t.sleep(ctx, time.Duration(t.rng()*float64(demoCheckoutTTL)/2)) {
		return
	}
	t.pay(ctx, no, amount)
}

// abandoned: the customer never pays; the order closes at its deadline and
// gives its stock back.
func (t *demoTraffic) abandoned(ctx context.Context, no string) {
	t.checkout(ctx, no, demoCheckoutTTL)
}

// latePayment: the customer pays after the order closed, which the sandbox
// takes (no payment was started): Lapse records it late and refunds it.
func (t *demoTraffic) latePayment(ctx context.Context, no string) {
	amount := t.checkout(ctx, no, 2*time.Second)
	if amount == 0 || !t.sleep(ctx, 2*time.Second+500*time.Millisecond+time.Duration(t.rng()*float64(time.Second))) {
		return
	}
	t.pay(ctx, no, amount)
}

// intent: the customer starts paying before the deadline, which holds the
// order open for the grace; half of them pay within it, the others never
// do, and the closer closes their payment at the sandbox before the order.
func (t *demoTraffic) intent(ctx context.Context, no string) {
	amount := t.checkout(ctx, no, 2*time.Second)
	if amount == 0 || !t.sleep(ctx, time.Second) {
		return
	}
	if !t.expect(ctx, "POST", "/v1/orders/"+no+"/payment-intents", map[string]any{"provider": "sandbox"}, 200, http.StatusConflict) {
		return
	}
	if t.rng() < 0.5 && t.sleep(ctx, time.Second+time.Duration(t.rng()*float64(demoGrace)/2)) {
		t.pay(ctx, no, amount)
	}
}

// cancelled: the customer cancels before paying.
func (t *demoTraffic) cancelled(ctx context.Context, no string) {
	if t.checkout(ctx, no, demoCheckoutTTL) == 0 || !t.sleep(ctx, 500*time.Millisecond) {
		return
	}
	t.expect(ctx, "POST", "/v1/orders/"+no+"/events", map[string]any{"event": "CANCEL", "reason": "changed their mind"}, 200, http.StatusConflict)
}

// refunded: the customer pays, and the merchant refunds the order.
func (t *demoTraffic) refunded(ctx context.Context, no string) {
	amount := t.checkout(ctx, no, demoCheckoutTTL)
	if amount == 0 || !t.sleep(ctx, 300*time.Millisecond) || !t.pay(ctx, no, amount) || !t.sleep(ctx, time.Second) {
		return
	}
	t.expect(ctx, "POST", "/v1/orders/"+no+"/refunds", map[string]any{"amount": amount, "reason": "returned by the customer"}, 201, http.StatusConflict)
}

// membership: a membership is paid and its cards issued by the flaky card
// service; the first and every fourth after it holds the card that the
// service never issues, and ends in manual review.
func (t *demoTraffic) membership(ctx context.Context, no string) {
	cards := []map[string]any{{"product": "swim-10", "visits": 10}, {"product": "gym"}}
	if t.memberships.Add(1)%4 == 1 {
		cards = []map[string]any{{"product": demoBrokenCard}}
	}
	const amount = 9900
	body := map[string]any{"order_no": no, "flow": "membership", "user_id": t.user(), "amount": amount, "currency": demoCurrency,
		"metadata": map[string]any{"cards": cards}}
	if !t.expect(ctx, "POST", "/v1/orders", body, 201) ||
		!t.expect(ctx, "POST", "/v1/orders/"+no+"/events", map[string]any{"event": "SUBMIT"}, 200) || !t.sleep(ctx, 300*time.Millisecond) {
		return
	}
	t.pay(ctx, no, amount)
}

// groupBuy: a group buy that 2 to 5 members join before its deadline; the
// sandbox charges each of them when it closes. In the first group and every
// fourth after it a member's card is declined every time: that group
// fails after its retries.
func (t *demoTraffic) groupBuy(ctx context.Context, no string) {
	body := map[string]any{"group_id": no, "organiser": t.user(), "price": 1990, "currency": demoCurrency, "ttl": demoGroupTTL.String()}
	if !t.expect(ctx, "POST", "/v1/groups", body, 201) {
		return
	}
	members := 2 + int(t.rng()*4)
	declined := -1
	if t.groups.Add(1)%4 == 1 {
		declined = int(t.rng() * float64(members))
	}
	for i := range members {
		if !t.sleep(ctx, time.Duration(t.rng()*float64(demoGroupTTL)/float64(members+1))) {
			return
		}
		method := fmt.Sprintf("tok_%s_%d", no, i)
		if i == declined {
			method = "fail" // the sandbox declines it
		}
		if !t.expect(ctx, "POST", "/v1/groups/"+no+"/members", map[string]any{"user_id": fmt.Sprintf("%s-m%d", no, i), "method": method}, 201) {
			return
		}
	}
}

// checkout creates a checkout order of one or two SKUs that must be paid
// within ttl, and returns its amount; 0 when it was not created.
func (t *demoTraffic) checkout(ctx context.Context, no string, ttl time.Duration) int64 {
	amount := int64(500 + 100*int(t.rng()*45))
	items := []map[string]any{{"sku": fmt.Sprintf("tea-%d", int(t.rng()*demoSKUs)), "qty": 1 + int(t.rng()*3)}}
	body := map[string]any{"order_no": no, "flow": "checkout", "user_id": t.user(), "amount": amount, "currency": demoCurrency,
		"items": items, "ttl": ttl.String()}
	if !t.expect(ctx, "POST", "/v1/orders", body, 201) {
		return 0
	}
	return amount
}

// pay is the customer paying at the sandbox's checkout page, whose signed
// callback reaches the API like any provider's. A closed order that the
// sandbox knows of (its payment was closed) is refused with 409, which is
// what the customer sees then, not a failure of the demo.
// When the callback was not acknowledged, the sandbox sends it again, as a
// gateway retries its callbacks, also while the demo stops.
func (t *demoTraffic) pay(ctx context.Context, no string, amount int64) bool {
	var paid struct {
		TxnID         string `json:"txn_id"`
		CallbackError string `json:"callback_error"`
	}
	code, err := t.call(ctx, "POST", "/sandbox/pay", map[string]any{"order_no": no, "amount": amount, "currency": demoCurrency}, &paid)
	if err != nil || (code != 200 && code != 409) {
		if ctx.Err() == nil {
			t.failed(fmt.Sprintf("POST /sandbox/pay %s: %d %v", no, code, err))
		}
		return false
	}
	if code == 200 && paid.CallbackError != "" && t.redeliver != nil {
		gateway := context.WithoutCancel(ctx)
		for range 10 {
			if t.sleep(gateway, 500*time.Millisecond); t.redeliver(gateway, paid.TxnID) == nil {
				return true
			}
		}
		t.failed(fmt.Sprintf("the sandbox's callback of %s was not acknowledged after 10 tries", no))
	}
	return code == 200
}

// user draws one of the demo's customers.
func (t *demoTraffic) user() string { return fmt.Sprintf("u-%03d", int(t.rng()*500)) }

// expect sends a request and reports whether it was answered want. An
// answer among fine is what a customer may get (409: the order moved on,
// as when the deadline passed first); any other answer is counted as a
// failure, unless ctx ended (the demo is stopping).
func (t *demoTraffic) expect(ctx context.Context, method, path string, body any, want int, fine ...int) bool {
	code, err := t.call(ctx, method, path, body, nil)
	if err == nil && code == want {
		return true
	}
	if ctx.Err() == nil && (err != nil || !slices.Contains(fine, code)) {
		t.failed(fmt.Sprintf("%s %s: %d %v", method, path, code, err))
	}
	return false
}

func (t *demoTraffic) failed(what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.apiFails++
	t.lastErr = what
}

// call sends a JSON request to the API with the demo's key, decodes a JSON
// answer into out (if not nil), and returns the status.
func (t *demoTraffic) call(ctx context.Context, method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.api+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+t.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode/100 == 2 {
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

// sleep waits d, and reports false when ctx ended first.
func (t *demoTraffic) sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
