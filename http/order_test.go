package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// createBody is a valid create request for orderNo; extra, when not empty, is
// more members for the object, such as `"ttl":"2s"`.
func createBody(orderNo, extra string) string {
	body := fmt.Sprintf(`{"order_no":%q,"flow":"checkout","user_id":"u-1","amount":1999,"currency":"CNY",`+
		`"items":[{"sku":"sku-1","qty":2}],"coupon":"SAVE5","metadata":{"channel":"app","tags":["a","b"]}`, orderNo)
	if extra != "" {
		body += "," + extra
	}
	return body + "}"
}

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("POST", "/v1/orders", createBody("SO-1", "")).want(t, http.StatusCreated)
	if loc := r.header.Get("Location"); loc != "/v1/orders/SO-1" {
		t.Fatalf("Location %q, want /v1/orders/SO-1", loc)
	}
	o := r.order(t)
	deadline := start.Add(flows.CheckoutPaymentWindow)
	switch {
	case o.OrderNo != "SO-1", o.Flow != "checkout", o.State != flows.Unpaid, o.UserID != "u-1",
		o.Amount != 1999, o.Currency != "CNY", o.Coupon != "SAVE5", o.Version != 1, o.FiredBy != lapse.FiredByAPI,
		o.DeadlineAt == nil || !o.DeadlineAt.Equal(deadline), !o.CreatedAt.Equal(start), !o.UpdatedAt.Equal(start),
		o.ClosedAt != nil, o.CloseReason != "",
		!slices.Equal(o.Items, []lapse.Item{{SKU: "sku-1", Qty: 2}}):
		t.Fatalf("created order %+v is not the request", o)
	}
	var meta map[string]any
	if err := json.Unmarshal(o.Metadata, &meta); err != nil || meta["channel"] != "app" {
		t.Fatalf("metadata %s, want the request's", o.Metadata)
	}

	t.Run("same request again is 200 with the same order", func(t *testing.T) {
		e.clock.Advance(time.Minute)
		again := e.do("POST", "/v1/orders", createBody("SO-1", "")).want(t, http.StatusOK)
		if string(again.body) != string(r.body) {
			t.Fatalf("repeat answered\n%s\nwant\n%s", again.body, r.body)
		}
		if again.header.Get("Location") != "/v1/orders/SO-1" {
			t.Fatalf("repeat has no Location")
		}
	})
	t.Run("same request with other key order and spacing is the same request", func(t *testing.T) {
		body := `{ "currency":"CNY", "amount":1999, "user_id":"u-1", "flow":"checkout", "order_no":"SO-1",
			"metadata":{"tags":["a","b"], "channel":"app"}, "coupon":"SAVE5", "items":[{"qty":2,"sku":"sku-1"}] }`
		e.do("POST", "/v1/orders", body).want(t, http.StatusOK)
	})
	t.Run("same order_no with another body is 409", func(t *testing.T) {
		for _, body := range []string{
			strings.Replace(createBody("SO-1", ""), `"amount":1999`, `"amount":2000`, 1),
			createBody("SO-1", `"ttl":"5m"`),
			strings.Replace(createBody("SO-1", ""), `"channel":"app"`, `"channel":"web"`, 1),
		} {
			p := e.do("POST", "/v1/orders", body).want(t, http.StatusConflict).problem(t)
			if p.Code != lapse.ECONFLICT || !strings.Contains(p.Detail, "order_no") {
				t.Fatalf("problem %+v, want a conflict naming order_no", p)
			}
		}
	})
	t.Run("ttl", func(t *testing.T) {
		now := e.clock.Now()
		o := e.do("POST", "/v1/orders", createBody("SO-ttl", `"ttl":"2s"`)).want(t, http.StatusCreated).order(t)
		if o.DeadlineAt == nil || !o.DeadlineAt.Equal(now.Add(2*time.Second)) {
			t.Fatalf("deadline %v, want now+2s", o.DeadlineAt)
		}
		e.clock.Advance(time.Second)
		// A retry of a ttl request matches: the ttl is compared, not the time.
		again := e.do("POST", "/v1/orders", createBody("SO-ttl", `"ttl":"2s"`)).want(t, http.StatusOK).order(t)
		if !again.DeadlineAt.Equal(*o.DeadlineAt) {
			t.Fatalf("the retry moved the deadline to %v", again.DeadlineAt)
		}
	})
	t.Run("deadline_at", func(t *testing.T) {
		at := e.clock.Now().Add(time.Hour).Add(123456 * time.Microsecond)
		body := createBody("SO-at", fmt.Sprintf(`"deadline_at":%q`, at.In(time.FixedZone("CST", 8*3600)).Format(time.RFC3339Nano)))
		r := e.do("POST", "/v1/orders", body).want(t, http.StatusCreated)
		if o := r.order(t); o.DeadlineAt == nil || !o.DeadlineAt.Equal(at) {
			t.Fatalf("deadline %v, want %v", o.DeadlineAt, at)
		}
		if !strings.Contains(string(r.body), `"deadline_at":"`+at.Format(time.RFC3339Nano)+`"`) {
			t.Fatalf("deadline_at is not shown in UTC: %s", r.body)
		}
	})
	t.Run("minimal request", func(t *testing.T) {
		r := e.do("POST", "/v1/orders", `{"order_no":"SO-min","flow":"checkout","user_id":"u","amount":1,"currency":"USD"}`).
			want(t, http.StatusCreated)
		if !strings.Contains(string(r.body), `"items":[]`) || !strings.Contains(string(r.body), `"metadata":null`) {
			t.Fatalf("a minimal order shows %s", r.body)
		}
		// null is the same as leaving a field out.
		e.do("POST", "/v1/orders", `{"order_no":"SO-min","flow":"checkout","user_id":"u","amount":1,"currency":"USD","metadata":null,"items":null}`).
			want(t, http.StatusOK)
	})
	t.Run("a free order in a flow that takes payments is refused", func(t *testing.T) {
		p := e.do("POST", "/v1/orders", `{"order_no":"SO-free","flow":"checkout","user_id":"u","amount":0,"currency":"USD"}`).
			want(t, http.StatusBadRequest).problem(t)
		if p.Field != "amount" || !strings.Contains(p.Detail, "no payment of nothing") {
			t.Fatalf("a free checkout order: %+v; want amount refused", p)
		}
		e.do("GET", "/v1/orders/SO-free", "").want(t, http.StatusNotFound)
	})
}

func TestGetOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.do("POST", "/v1/orders", createBody("G-1", "")).want(t, http.StatusCreated)
	r := e.do("GET", "/v1/orders/G-1", "").want(t, http.StatusOK)
	if string(r.body) != string(created.body) {
		t.Fatalf("GET answered\n%s\nwant what POST answered\n%s", r.body, created.body)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"order_no", "flow", "state", "deadline_at", "amount", "currency", "user_id", "items", "coupon",
		"metadata", "version", "created_at", "updated_at", "closed_at", "close_reason", "closed_deadline_at", "fired_by"}
	got := slices.Sorted(maps.Keys(fields))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("order fields %v, want %v", got, want)
	}
	for _, f := range []string{"created_at", "updated_at", "deadline_at"} {
		if s := string(fields[f]); !strings.HasSuffix(s, `Z"`) {
			t.Errorf("%s is %s, want UTC RFC 3339", f, s)
		}
	}

	p := e.do("GET", "/v1/orders/G-2", "").want(t, http.StatusNotFound).problem(t)
	if p.Code != lapse.ENOTFOUND {
		t.Fatalf("code %q, want not_found", p.Code)
	}
}

// page is the body of GET /v1/orders.
type page struct {
	Orders     []*lapse.Order `json:"orders"`
	NextCursor *string        `json:"next_cursor"`
}

func (e *env) list(t *testing.T, query string) *page {
	t.Helper()
	r := e.do("GET", "/v1/orders?"+query, "").want(t, http.StatusOK)
	var p page
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("decode page: %v; body: %s", err, r.body)
	}
	if p.Orders == nil {
		t.Fatalf("orders is null, want an array: %s", r.body)
	}
	return &p
}

func orderNos(os []*lapse.Order) []string {
	out := make([]string, len(os))
	for i, o := range os {
		out[i] = o.OrderNo
	}
	return out
}

func TestListOrders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// L-00 … L-10: users alternate; every third is cancelled; L-04, L-05 and
	// L-06 share a created_at, so paging must order ties by id.
	var all []string // newest first
	for i := range 11 {
		if i != 5 && i != 6 {
			e.clock.Advance(time.Second)
		}
		no := fmt.Sprintf("L-%02d", i)
		body := strings.Replace(createBody(no, ""), `"u-1"`, fmt.Sprintf(`"u-%d"`, i%2), 1)
		e.do("POST", "/v1/orders", body).want(t, http.StatusCreated)
		if i%3 == 0 {
			e.do("POST", "/v1/orders/"+no+"/events", `{"event":"CANCEL"}`).want(t, http.StatusOK)
		}
		all = append([]string{no}, all...)
	}

	if got := orderNos(e.list(t, "").Orders); !slices.Equal(got, all) {
		t.Fatalf("list %v, want %v", got, all)
	}
	t.Run("filters", func(t *testing.T) {
		at := func(i int) string { // the created_at of L-i
			sec := i + 1
			if i >= 5 {
				sec = i - 1
				if i == 5 || i == 6 {
					sec = 5
				}
			}
			return url.QueryEscape(start.Add(time.Duration(sec) * time.Second).Format(time.RFC3339))
		}
		for _, tt := range []struct {
			query string
			want  []string
		}{
			{"user_id=u-1", []string{"L-09", "L-07", "L-05", "L-03", "L-01"}},
			{"state=CLOSED", []string{"L-09", "L-06", "L-03", "L-00"}},
			{"state=UNPAID&user_id=u-0", []string{"L-10", "L-08", "L-04", "L-02"}},
			{"flow=checkout&limit=2", []string{"L-10", "L-09"}},
			{"created_from=" + at(4) + "&created_to=" + at(8), []string{"L-07", "L-06", "L-05", "L-04"}},
			{"created_from=" + at(9), []string{"L-10", "L-09"}},
			{"created_to=" + at(1), []string{"L-00"}},
			{"state=OPEN", []string{}}, // a state of groupbuy
		} {
			p := e.list(t, tt.query)
			if got := orderNos(p.Orders); !slices.Equal(got, tt.want) {
				t.Errorf("%s: %v, want %v", tt.query, got, tt.want)
			}
		}
	})
	t.Run("paging", func(t *testing.T) {
		for _, limit := range []int{1, 2, 3, 4, 11, 12} {
			var got []string
			query := fmt.Sprintf("limit=%d", limit)
			for pages := 0; ; pages++ {
				if pages > len(all) {
					t.Fatalf("limit %d: paging does not end", limit)
				}
				p := e.list(t, query)
				if len(p.Orders) > limit {
					t.Fatalf("limit %d: a page of %d", limit, len(p.Orders))
				}
				got = append(got, orderNos(p.Orders)...)
				if p.NextCursor == nil {
					break
				}
				if len(p.Orders) != limit {
					t.Fatalf("limit %d: a short page of %d has a next_cursor", limit, len(p.Orders))
				}
				query = fmt.Sprintf("limit=%d&cursor=%s", limit, url.QueryEscape(*p.NextCursor))
			}
			if !slices.Equal(got, all) {
				t.Fatalf("limit %d: pages hold %v, want %v", limit, got, all)
			}
		}
	})
	t.Run("paging with a filter", func(t *testing.T) {
		p := e.list(t, "user_id=u-0&limit=2")
		got := orderNos(p.Orders)
		for p.NextCursor != nil {
			p = e.list(t, "user_id=u-0&limit=2&cursor="+url.QueryEscape(*p.NextCursor))
			got = append(got, orderNos(p.Orders)...)
		}
		if want := []string{"L-10", "L-08", "L-06", "L-04", "L-02", "L-00"}; !slices.Equal(got, want) {
			t.Fatalf("pages hold %v, want %v", got, want)
		}
	})
	t.Run("default limit is 50", func(t *testing.T) {
		e := newEnv(t)
		for i := range 51 {
			e.do("POST", "/v1/orders", createBody(fmt.Sprintf("D-%02d", i), "")).want(t, http.StatusCreated)
		}
		p := e.list(t, "")
		if len(p.Orders) != 50 || p.NextCursor == nil {
			t.Fatalf("%d orders, next_cursor %v; want 50 and a cursor", len(p.Orders), p.NextCursor)
		}
		if p := e.list(t, "cursor="+url.QueryEscape(*p.NextCursor)); len(p.Orders) != 1 || p.Orders[0].OrderNo != "D-00" || p.NextCursor != nil {
			t.Fatalf("second page %v, next_cursor %v; want [D-00] and null", orderNos(p.Orders), p.NextCursor)
		}
		if p := e.list(t, "limit=500"); len(p.Orders) != 51 || p.NextCursor != nil {
			t.Fatalf("limit=500: %d orders, want 51", len(p.Orders))
		}
	})
}

func TestFireEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/orders", createBody("F-1", "")).want(t, http.StatusCreated)
	e.clock.Advance(time.Minute)

	for _, ev := range []string{"PAY", "TIMEOUT", "REFUND"} {
		p := e.do("POST", "/v1/orders/F-1/events", `{"event":"`+ev+`"}`).want(t, http.StatusBadRequest).problem(t)
		if p.Code != lapse.EINVALID || p.Field != "event" || !strings.Contains(p.Detail, ev) {
			t.Fatalf("firing %s: problem %+v, want invalid naming the event", ev, p)
		}
	}
	p := e.do("POST", "/v1/orders/F-1/events", `{"event":"SHIP"}`).want(t, http.StatusBadRequest).problem(t)
	if p.Field != "event" || !strings.Contains(p.Detail, "SHIP") {
		t.Fatalf("unknown event: problem %+v", p)
	}
	if o := e.do("GET", "/v1/orders/F-1", "").want(t, http.StatusOK).order(t); o.State != flows.Unpaid || o.Version != 1 {
		t.Fatalf("refused events moved the order: %+v", o)
	}

	o := e.do("POST", "/v1/orders/F-1/events", `{"event":"CANCEL","reason":"customer asked"}`).want(t, http.StatusOK).order(t)
	now := e.clock.Now()
	switch {
	case o.State != flows.Closed, o.CloseReason != "CANCEL", o.ClosedAt == nil || !o.ClosedAt.Equal(now),
		o.DeadlineAt != nil, o.Version != 2, o.FiredBy != lapse.FiredByAPI, !o.UpdatedAt.Equal(now):
		t.Fatalf("cancelled order %+v", o)
	}

	p = e.do("POST", "/v1/orders/F-1/events", `{"event":"CANCEL"}`).want(t, http.StatusConflict).problem(t)
	if p.Code != lapse.ECONFLICT || !strings.Contains(p.Detail, "CLOSED") {
		t.Fatalf("second CANCEL: problem %+v, want a conflict naming CLOSED", p)
	}
	e.do("POST", "/v1/orders/F-2/events", `{"event":"CANCEL"}`).want(t, http.StatusNotFound).problem(t)
}

func TestFireEventNotAcceptedByState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/orders", createBody("F-paid", "")).want(t, http.StatusCreated)
	// Only the payment path fires PAY; here a Go caller stands in for it.
	if _, err := e.engine.Fire(context.Background(), "F-paid", engine.Fire{Event: flows.Pay,
		By: engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}}); err != nil {
		t.Fatalf("Fire PAY: %v", err)
	}
	p := e.do("POST", "/v1/orders/F-paid/events", `{"event":"CANCEL"}`).want(t, http.StatusConflict).problem(t)
	if !strings.Contains(p.Detail, "PAID") || !strings.Contains(p.Detail, "CANCEL") {
		t.Fatalf("problem %+v, want a detail naming the state and the event", p)
	}
}

func TestSetDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.do("POST", "/v1/orders", createBody("DL-1", "")).want(t, http.StatusCreated).order(t)
	deadline := *o.DeadlineAt

	o = e.do("PATCH", "/v1/orders/DL-1/deadline", `{"extend_by":"10m"}`).want(t, http.StatusOK).order(t)
	deadline = deadline.Add(10 * time.Minute)
	if !o.DeadlineAt.Equal(deadline) || o.Version != 2 {
		t.Fatalf("extended: deadline %v version %d, want %v and 2", o.DeadlineAt, o.Version, deadline)
	}

	shorter := e.clock.Now().Add(30 * time.Second)
	o = e.do("PATCH", "/v1/orders/DL-1/deadline", `{"deadline_at":"`+shorter.Format(time.RFC3339)+`","reason":"flash sale"}`).
		want(t, http.StatusOK).order(t)
	if !o.DeadlineAt.Equal(shorter) || o.State != flows.Unpaid {
		t.Fatalf("shortened: %+v, want deadline %v", o, shorter)
	}

	for _, tt := range []struct{ body, field string }{
		{`{"deadline_at":"` + e.clock.Now().Add(-time.Second).Format(time.RFC3339) + `"}`, "deadline_at"},
		{`{"deadline_at":"` + e.clock.Now().Format(time.RFC3339) + `"}`, "deadline_at"},
		{`{"deadline_at":"next tuesday"}`, "deadline_at"},
		{`{"extend_by":"-1m"}`, "extend_by"},
		{`{"extend_by":"0s"}`, "extend_by"},
		{`{"extend_by":"a while"}`, "extend_by"},
		{`{"extend_by":10}`, "extend_by"},
		{`{}`, "deadline_at"},
		{`{"extend_by":"1m","deadline_at":"` + e.clock.Now().Add(time.Hour).Format(time.RFC3339) + `"}`, "deadline_at"},
		{`{"extend_by":"1m","extend":"1m"}`, "extend"},
		{`{"extend_by":"1m","extend_by":"2m"}`, "extend_by"},
		{`{"extend_by":"9000h"}`, "extend_by"},
	} {
		p := e.do("PATCH", "/v1/orders/DL-1/deadline", tt.body).want(t, http.StatusBadRequest).problem(t)
		if p.Field != tt.field || !strings.Contains(p.Detail, tt.field) {
			t.Errorf("%s: problem %+v, want one naming %s", tt.body, p, tt.field)
		}
	}
	if got := e.do("GET", "/v1/orders/DL-1", "").want(t, http.StatusOK).order(t); got.Version != o.Version || !got.DeadlineAt.Equal(shorter) {
		t.Fatalf("refused changes moved the order: %+v", got)
	}

	e.do("PATCH", "/v1/orders/DL-2/deadline", `{"extend_by":"1m"}`).want(t, http.StatusNotFound).problem(t)

	e.do("POST", "/v1/orders/DL-1/events", `{"event":"CANCEL"}`).want(t, http.StatusOK)
	p := e.do("PATCH", "/v1/orders/DL-1/deadline", `{"extend_by":"1m"}`).want(t, http.StatusConflict).problem(t)
	if p.Code != lapse.ECONFLICT || !strings.Contains(p.Detail, "CLOSED") {
		t.Fatalf("closed order: problem %+v, want a conflict naming CLOSED", p)
	}
}

// transitionsOf and eventsOf read the history endpoints.
func (e *env) transitionsOf(t *testing.T, orderNo string) []lapse.TransitionRecord {
	t.Helper()
	var body struct {
		Transitions []lapse.TransitionRecord `json:"transitions"`
	}
	r := e.do("GET", "/v1/orders/"+orderNo+"/transitions", "").want(t, http.StatusOK)
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("decode transitions: %v", err)
	}
	return body.Transitions
}

func (e *env) eventsOf(t *testing.T, orderNo string) []lapse.OutboxEvent {
	t.Helper()
	var body struct {
		Events []lapse.OutboxEvent `json:"events"`
	}
	r := e.do("GET", "/v1/orders/"+orderNo+"/events", "").want(t, http.StatusOK)
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("decode events: %v", err)
	}
	return body.Events
}

func TestTransitionsAndEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/orders", createBody("H-1", `"ttl":"2s"`)).want(t, http.StatusCreated)
	e.do("PATCH", "/v1/orders/H-1/deadline", `{"extend_by":"1s","reason":"slow bank"}`).want(t, http.StatusOK)
	e.do("POST", "/v1/orders", createBody("H-2", "")).want(t, http.StatusCreated)
	e.clock.Advance(time.Minute)
	e.do("POST", "/v1/orders/H-2/events", `{"event":"CANCEL","reason":"changed mind"}`).want(t, http.StatusOK)

	// The deadline engine closes H-1; the API shows who did it.
	if n, err := engine.NewClaimer(e.engine, engine.ClaimerConfig{}).RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1 fired", n, err)
	}
	o := e.do("GET", "/v1/orders/H-1", "").want(t, http.StatusOK).order(t)
	if o.State != flows.Closed || o.CloseReason != "TIMEOUT" || o.FiredBy != lapse.FiredByTimer {
		t.Fatalf("H-1 after its deadline: %+v", o)
	}

	type hop struct {
		from, to lapse.State
		event    lapse.Event
		by       lapse.FiredBy
		actor    string
	}
	for no, want := range map[string][]hop{
		"H-1": {{"", flows.Unpaid, lapse.EventCreate, lapse.FiredByAPI, "api"}, {flows.Unpaid, flows.Closed, flows.Timeout, lapse.FiredByTimer, "engine"}},
		"H-2": {{"", flows.Unpaid, lapse.EventCreate, lapse.FiredByAPI, "api"}, {flows.Unpaid, flows.Closed, flows.Cancel, lapse.FiredByAPI, "api"}},
	} {
		trs := e.transitionsOf(t, no)
		var got []hop
		for _, tr := range trs {
			// The engine names its node after "engine"; the node is not this test's business.
			actor, _, _ := strings.Cut(tr.Actor, " ")
			got = append(got, hop{tr.FromState, tr.ToState, tr.Event, tr.FiredBy, actor})
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s transitions %+v, want %+v", no, got, want)
		}
	}
	if trs := e.transitionsOf(t, "H-2"); trs[1].Reason != "changed mind" || !trs[1].CreatedAt.Equal(e.clock.Now()) || trs[1].Version != 2 {
		t.Errorf("H-2 CANCEL row %+v", trs[1])
	}

	for no, want := range map[string][]string{
		"H-1": {"order.created", "order.deadline_changed", "order.closed"},
		"H-2": {"order.created", "order.closed"},
	} {
		evs := e.eventsOf(t, no)
		var got []string
		for _, ev := range evs {
			got = append(got, ev.Type)
			if ev.OrderNo != no || ev.ID == "" || !json.Valid(ev.Payload) {
				t.Errorf("%s event %+v", no, ev)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s events %v, want %v", no, got, want)
		}
	}

	e.do("GET", "/v1/orders/H-3/transitions", "").want(t, http.StatusNotFound).problem(t)
	e.do("GET", "/v1/orders/H-3/events", "").want(t, http.StatusNotFound).problem(t)
}

// TestDurationsTakeDays: the API reads durations as flow files do, days
// included (lapse.ParseDuration): a ttl of 1d, an extension of 1d12h.
func TestDurationsTakeDays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.do("POST", "/v1/orders", `{"order_no":"DD-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"1d"}`).
		want(t, http.StatusCreated).order(t)
	if want := start.Add(24 * time.Hour); o.DeadlineAt == nil || !o.DeadlineAt.Equal(want) {
		t.Fatalf("ttl 1d: deadline %v, want %v", o.DeadlineAt, want)
	}
	o = e.do("PATCH", "/v1/orders/DD-1/deadline", `{"extend_by":"1d12h"}`).want(t, http.StatusOK).order(t)
	if want := start.Add(60 * time.Hour); o.DeadlineAt == nil || !o.DeadlineAt.Equal(want) {
		t.Fatalf("extend_by 1d12h: deadline %v, want %v", o.DeadlineAt, want)
	}
	for ttl, says := range map[string]string{"1 day": "7d", "-1d": "positive"} {
		body := `{"order_no":"DD-2","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"` + ttl + `"}`
		if p := e.do("POST", "/v1/orders", body).want(t, http.StatusBadRequest).problem(t); p.Field != "ttl" || !strings.Contains(p.Detail, says) {
			t.Errorf("ttl %q: %+v, want the field ttl saying %q", ttl, p, says)
		}
	}
}
