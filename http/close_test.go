package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/sqlite"
)

// TestCloseKeepsToThePreview: a close given the preview it was confirmed
// from leaves out the orders made after it, and closes nothing when more
// are closable than it counted.
func TestCloseKeepsToThePreview(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	order := func(no string) {
		g.call("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(g.admin)).want(t, http.StatusCreated)
	}
	order("C-1")
	order("C-2")
	closer := bearer(g.key("closer", access.ScopeOperationsWrite, access.ScopeOrdersRead))
	var pv struct {
		Count     int64
		AsOf      time.Time `json:"as_of"`
		Selection string
	}
	g.call("POST", "/v1/closes/preview", `{"selector":{"user_id":"u"}}`, closer).want(t, http.StatusOK).decode(t, &pv)
	if pv.Count != 2 || !pv.AsOf.Equal(g.clock.Now()) || len(pv.Selection) != 64 {
		t.Fatalf("preview = %+v, want 2 as of now, with its selection", pv)
	}
	g.clock.Advance(time.Second)
	order("C-3")
	asOf, _ := json.Marshal(pv.AsOf)

	g.call("POST", "/v1/closes", fmt.Sprintf(`{"selector":{"user_id":"u"},"reason":"r","preview":{"as_of":%s}}`, asOf), closer).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("POST", "/v1/closes", fmt.Sprintf(`{"selector":{"user_id":"u"},"reason":"r","preview":{"as_of":%s,"count":1}}`, asOf), closer).
		refused(t, http.StatusConflict, lapse.ECONFLICT)

	// Another selection's orders, as many as the preview counted: the
	// preview's selection refuses them, and the refusal is audited.
	order("D-1")
	g.rows() // what came before
	g.call("POST", "/v1/closes", fmt.Sprintf(`{"selector":{"order_nos":["D-1","C-3"]},"reason":"r","preview":{"as_of":%s,"count":2,"selection":%q}}`, asOf, pv.Selection), closer).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.wantRows("close.batch closer 400 invalid: preview: was made for another selection")

	var b batchView
	g.call("POST", "/v1/closes", fmt.Sprintf(`{"selector":{"user_id":"u"},"reason":"r","preview":{"as_of":%s,"count":2,"selection":%q}}`, asOf, pv.Selection), closer).
		want(t, http.StatusAccepted).decode(t, &b)
	if done := g.waitBatch(b.ID, closer); done.Total != 2 || done.Closed != 2 {
		t.Errorf("close of the preview = %+v, want its 2 orders", done)
	}
	if o, err := g.engine.Order(t.Context(), "C-3"); err != nil || o.State != "UNPAID" {
		t.Errorf("C-3, made after the preview: %+v, %v; want it left UNPAID", o, err)
	}
}

// TestClosesPaged: GET /v1/closes answers a page at a time, newest first,
// and reaches every batch; it answered the newest 100 only.
func TestClosesPaged(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	closer := bearer(g.key("closer", access.ScopeOperationsWrite, access.ScopeOrdersRead))
	var made []int64
	for i := range 3 {
		no := fmt.Sprintf("P-%d", i)
		g.call("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(g.admin)).want(t, http.StatusCreated)
		var b batchView
		g.call("POST", "/v1/closes", `{"selector":{"order_nos":["`+no+`"]},"reason":"r"}`, closer).want(t, http.StatusAccepted).decode(t, &b)
		g.waitBatch(b.ID, closer)
		made = append([]int64{b.ID}, made...)
	}
	var got []int64
	pages := 0
	for q := "/v1/closes?limit=2"; q != ""; pages++ {
		var page struct {
			Batches    []batchView
			NextCursor *string `json:"next_cursor"`
		}
		g.call("GET", q, "", closer).want(t, http.StatusOK).decode(t, &page)
		for _, b := range page.Batches {
			got = append(got, b.ID)
		}
		if q = ""; page.NextCursor != nil {
			q = "/v1/closes?limit=2&cursor=" + *page.NextCursor
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(made) || pages != 2 {
		t.Errorf("batches by pages of 2: %v in %d pages, want %v in 2", got, pages, made)
	}
	g.call("GET", "/v1/closes?cursor=AQ", "", closer).refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("GET", "/v1/closes?limit=501", "", closer).refused(t, http.StatusBadRequest, lapse.EINVALID)
}

// TestCloseJudgedAsPreviewed: a close confirmed from a preview is judged
// for four eyes, and counted toward the operator's day, by the orders it
// closes (those the preview counted), not by every order its selection
// matches by then: orders made since, which it leaves out, asked for a
// second operator's approval of a close of them all.
func TestCloseJudgedAsPreviewed(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 3})
	g.operator("alice", access.RoleOperator)
	order := func(no string) {
		g.call("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(g.admin)).want(t, http.StatusCreated)
	}
	order("JP-1")
	order("JP-2")
	alice := session(g.login("alice"))
	var pv struct {
		Count     int64
		AsOf      time.Time `json:"as_of"`
		Selection string
	}
	g.call("POST", "/v1/closes/preview", `{"selector":{"user_id":"u"}}`, alice).want(t, http.StatusOK).decode(t, &pv)
	if pv.Count != 2 {
		t.Fatalf("preview = %+v, want 2", pv)
	}
	g.clock.Advance(time.Second)
	for i := range 5 {
		order(fmt.Sprintf("JP-new-%d", i))
	}
	asOf, _ := json.Marshal(pv.AsOf)
	r := g.call("POST", "/v1/closes", fmt.Sprintf(`{"selector":{"user_id":"u"},"reason":"r","preview":{"as_of":%s,"count":2,"selection":%q}}`, asOf, pv.Selection),
		alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted)
	if a := r.approval(t); a.Status == lapse.ApprovalPending {
		t.Fatalf("a close of the 2 orders previewed waits for approval as a close of %d", a.Count)
	}
	var b batchView
	r.decode(t, &b)
	if done := g.waitBatch(b.ID, alice); done.Total != 2 || done.Closed != 2 {
		t.Errorf("close of the preview = %+v, want its 2 orders", done)
	}
	// Her day counts the 2 she closed: one more is within the threshold.
	var one batchView
	r = g.call("POST", "/v1/closes", `{"selector":{"order_nos":["JP-new-0"]},"reason":"r"}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted)
	if a := r.approval(t); a.Status == lapse.ApprovalPending {
		t.Fatalf("alice's third close of the day waits for approval: her first counted the orders it left out")
	}
	r.decode(t, &one)
	g.waitBatch(one.ID, alice)
}

// flashStore runs after, once, when an order list of the user u-flash has
// been read: the orders made between the count a close is admitted on and
// the close.
type flashStore struct {
	*sqlite.Store
	after atomic.Pointer[func()]
}

func (s *flashStore) OrderList(ctx context.Context, p *lapse.OrderListParams) ([]*lapse.Order, error) {
	got, err := s.Store.OrderList(ctx, p)
	if p.UserID == "u-flash" {
		if f := s.after.Swap(nil); f != nil {
			(*f)()
		}
	}
	return got, err
}

// TestCloseKeepsToWhatWasAdmitted: a close admitted on its operator's own
// word (below four eyes' count) closes no more orders than it was counted
// at, with or without a preview, whatever the preview claims: orders made
// while it was being admitted, which took it past the count, were closed
// with it, and four eyes never saw them.
func TestCloseKeepsToWhatWasAdmitted(t *testing.T) {
	t.Parallel()
	var fs *flashStore
	g := guard(newEnvWith(t, options{access: &access.Config{ApprovalCount: 3}, closer: true,
		wrap: func(s lapse.Store) lapse.Store { fs = &flashStore{Store: s.(*sqlite.Store)}; return fs }}))
	g.operator("alice", access.RoleOperator)
	n := 0
	order := func() {
		n++
		_, _, err := g.engine.CreateOrder(context.Background(), &lapse.OrderCreate{OrderNo: fmt.Sprintf("FL-%d", n), Flow: "checkout",
			UserID: "u-flash", Amount: 100, Currency: "CNY"}, engine.Actor{})
		if err != nil {
			t.Fatal(err)
		}
	}
	alice := session(g.login("alice"))
	for _, c := range []struct{ name, preview string }{
		{"no preview", ""},
		{"a preview of the future", `,"preview":{"as_of":"2100-01-01T00:00:00Z","count":1000}`},
	} {
		order()
		order()
		rush := func() {
			for range 5 {
				order()
			}
		}
		fs.after.Store(&rush)
		r := g.call("POST", "/v1/closes", `{"selector":{"user_id":"u-flash"},"reason":"r"`+c.preview+`}`,
			alice, header(lapsehttp.SecondFactorHeader, g.code("alice")))
		if r.status == http.StatusAccepted {
			if a := r.approval(t); a.Status != lapse.ApprovalPending {
				var b batchView
				r.decode(t, &b)
				if done := g.waitBatch(b.ID, alice); done.Total > 2 {
					t.Errorf("%s: admitted on a count of 2, the close took %d orders", c.name, done.Total)
				}
			}
		}
		// What is left is closed on a key's word, for the next case.
		if r := g.call("POST", "/v1/closes", `{"selector":{"user_id":"u-flash"},"reason":"r"}`, bearer(g.admin)); r.status == http.StatusAccepted {
			var b batchView
			r.decode(t, &b)
			g.waitBatch(b.ID, bearer(g.admin))
		}
		g.clock.Advance(25 * time.Hour)
		alice = session(g.login("alice"))
	}
}

// TestCloseTakesAsManyOrderNumbersAsItSays: a manual close by order number
// takes more numbers than 64 KiB holds, through the preview, the close and
// an approval: its body was held to the 64 KiB of every other request, a
// few thousand numbers, not the closes.MaxOrderNos a selector takes, and
// refused as too large. (1,100 numbers of 64 characters are past 64 KiB;
// TestCloseBodyBytesHoldsTheNumbers checks that MaxOrderNos of them fit.)
func TestCloseTakesAsManyOrderNumbersAsItSays(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 1})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	nos := []string{"BIG-1", "BIG-2"}
	for _, no := range nos {
		g.call("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, bearer(g.admin)).want(t, http.StatusCreated)
	}
	nos = append(nos, longOrderNos(1100)...)
	sel, _ := json.Marshal(map[string]any{"order_nos": nos})
	if len(sel) <= lapsehttp.DefaultMaxBodyBytes {
		t.Fatalf("the selector is %d bytes, within the default limit", len(sel))
	}
	var pv struct{ Count, Skipped int64 }
	g.call("POST", "/v1/closes/preview", `{"selector":`+string(sel)+`}`, bearer(g.admin)).want(t, http.StatusOK).decode(t, &pv)
	if pv.Count != 2 || pv.Skipped != 1100 {
		t.Errorf("preview = %+v, want 2 to close and 1100 skipped", pv)
	}
	body := `{"selector":` + string(sel) + `,"reason":"r"}`
	a := g.call("POST", "/v1/closes", body, session(g.login("alice")), header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending {
		t.Fatalf("alice's close of 2 orders past the count of 1: %+v, want it waiting", a)
	}
	bob := session(g.login("bob"))
	done := g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK).approval(t)
	if done.Status != lapse.ApprovalExecuted {
		t.Fatalf("the approved close: %+v", done)
	}
	var list struct{ Batches []batchView }
	g.call("GET", "/v1/closes", "", bearer(g.admin)).want(t, http.StatusOK).decode(t, &list)
	if len(list.Batches) != 1 {
		t.Fatalf("batches: %+v", list.Batches)
	}
	if b := g.waitBatch(list.Batches[0].ID, bearer(g.admin)); b.Total != 2 || b.Closed != 2 {
		t.Errorf("close = %+v, want BIG-1 and BIG-2 closed", b)
	}
	// Past the numbers it takes, the body is still refused as too large.
	huge := `{"selector":{"order_nos":["` + strings.Repeat("x", 2<<20) + `"]},"reason":"r"}`
	g.call("POST", "/v1/closes/preview", huge, bearer(g.admin)).refused(t, http.StatusBadRequest, lapse.EINVALID)
}

// longOrderNos returns n order numbers as long as an order number may be.
func longOrderNos(n int) []string {
	nos := make([]string, n)
	for i := range nos {
		nos[i] = fmt.Sprintf("%s%0*d", "BIG-", lapse.MaxOrderNoLen-4, i)
	}
	return nos
}

// TestCloseBodyBytesHoldsTheNumbers: the close routes' limit holds a close
// of closes.MaxOrderNos numbers as long as an order number may be, with a
// reason and a preview as long as they may be, and is the one the README
// and the OpenAPI document give.
func TestCloseBodyBytesHoldsTheNumbers(t *testing.T) {
	t.Parallel()
	at := time.Now()
	body, _ := json.Marshal(map[string]any{"selector": map[string]any{"order_nos": longOrderNos(closes.MaxOrderNos), "flow": strings.Repeat("f", lapse.MaxOrderNoLen)},
		"reason": strings.Repeat("r", lapse.MaxReasonLen), "preview": map[string]any{"as_of": at, "count": closes.MaxOrderNos, "selection": strings.Repeat("a", 64)}})
	if len(body) > lapsehttp.CloseBodyBytes {
		t.Errorf("a close of %d numbers is %d bytes, past the routes' limit of %d", closes.MaxOrderNos, len(body), lapsehttp.CloseBodyBytes)
	}
	if got := lapsehttp.CloseBodyBytes; got != 735_536 {
		t.Errorf("closeBodyBytes = %d; the README and openapi.json say 735,536", got)
	}
}
