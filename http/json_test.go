package http_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/sqlite"
)

// badCreate is a create request that must be refused with status, with a
// detail that contains detail and, when field is set, names it as the field.
type badCreate struct {
	name        string
	contentType string // default application/json
	body        string
	status      int // default 400
	field       string
	detail      string
}

func badCreates() []badCreate {
	past := start.Add(-time.Minute).Format(time.RFC3339)
	future := start.Add(time.Hour).Format(time.RFC3339)
	without := func(field string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(createBody("BAD-1", "")), &m); err != nil {
			panic(err)
		}
		delete(m, field)
		b, _ := json.Marshal(m)
		return string(b)
	}
	with := func(old, new string) string {
		b := createBody("BAD-1", "")
		if !strings.Contains(b, old) {
			panic("createBody has no " + old)
		}
		return strings.Replace(b, old, new, 1)
	}
	return []badCreate{
		{name: "unknown flow", body: with(`"flow":"checkout"`, `"flow":"layaway"`), field: "flow", detail: "layaway"},
		{name: "negative amount", body: with(`"amount":1999`, `"amount":-1`), field: "amount", detail: "negative"},
		{name: "missing order_no", body: without("order_no"), field: "order_no", detail: "required"},
		{name: "missing flow", body: without("flow"), field: "flow", detail: "required"},
		{name: "missing user_id", body: without("user_id"), field: "user_id", detail: "required"},
		{name: "missing amount", body: without("amount"), field: "amount", detail: "required"},
		{name: "missing currency", body: without("currency"), field: "currency", detail: "required"},
		{name: "null amount", body: with(`"amount":1999`, `"amount":null`), field: "amount", detail: "required"},
		{name: "empty order_no", body: with(`"order_no":"BAD-1"`, `"order_no":""`), field: "order_no", detail: "required"},
		{name: "order_no with a slash", body: with(`"order_no":"BAD-1"`, `"order_no":"BAD/1"`), field: "order_no"},
		{name: "lower case currency", body: with(`"currency":"CNY"`, `"currency":"cny"`), field: "currency"},
		{name: "fractional amount", body: with(`"amount":1999`, `"amount":10.5`), field: "amount", detail: "integer"},
		{name: "amount as a string", body: with(`"amount":1999`, `"amount":"10"`), field: "amount", detail: "integer"},
		{name: "amount in exponent form", body: with(`"amount":1999`, `"amount":1e3`), field: "amount", detail: "integer"},
		{name: "amount beyond int64", body: with(`"amount":1999`, `"amount":9223372036854775808`), field: "amount", detail: "integer"},
		{name: "user_id as a number", body: with(`"user_id":"u-1"`, `"user_id":7`), field: "user_id", detail: "string"},
		{name: "items not an array", body: with(`"items":[{"sku":"sku-1","qty":2}]`, `"items":{"sku":"sku-1"}`), field: "items", detail: "array"},
		{name: "qty fractional", body: with(`"qty":2`, `"qty":1.5`), field: "items[0].qty", detail: "integer"},
		{name: "qty zero", body: with(`"qty":2`, `"qty":0`), field: "items", detail: "qty"},
		{name: "sku missing", body: with(`{"sku":"sku-1","qty":2}`, `{"qty":2}`), field: "items", detail: "sku"},
		{name: "metadata not an object", body: with(`"metadata":{"channel":"app","tags":["a","b"]}`, `"metadata":[1,2]`), field: "metadata", detail: "object"},
		{name: "unknown field", body: createBody("BAD-1", `"colour":"red"`), field: "colour", detail: "colour"},
		{name: "unknown field in an item", body: with(`"qty":2`, `"qty":2,"price":5`), field: "items[0].price", detail: "not a field"},
		{name: "duplicate key", body: createBody("BAD-1", `"amount":1`), field: "amount", detail: "more than once"},
		{name: "duplicate key in metadata", body: with(`"channel":"app"`, `"channel":"app","channel":"web"`), field: "metadata.channel", detail: "more than once"},
		{name: "duplicate key in an item", body: with(`[{"sku":"sku-1","qty":2}]`, `[{"sku":"a","qty":1},{"sku":"b","sku":"c","qty":1}]`), field: "items[1].sku", detail: "more than once"},
		{name: "duplicate key deep", body: with(`"tags":["a","b"]`, `"tags":[{"x":{"y":1,"y":2}}]`), field: "metadata.tags[0].x.y", detail: "more than once"},
		{name: "key in another case after the field", body: createBody("BAD-1", `"Amount":100`), field: "Amount", detail: `did you mean "amount"`},
		{name: "key in another case alone", body: with(`"amount":1999`, `"AMOUNT":1999`), field: "AMOUNT", detail: `did you mean "amount"`},
		{name: "key in another case in an item", body: with(`"qty":2`, `"Qty":2`), field: "items[0].Qty", detail: `did you mean "qty"`},
		{name: "invalid UTF-8", body: with(`"user_id":"u-1"`, "\"user_id\":\"u-\xff\xfe\""), field: "user_id", detail: "UTF-8"},
		{name: "invalid UTF-8 in metadata", body: with(`"channel":"app"`, "\"channel\":\"\xc3\""), field: "metadata.channel", detail: "UTF-8"},
		{name: "lone surrogate", body: with(`"user_id":"u-1"`, `"user_id":"u-\ud800"`), field: "user_id", detail: "surrogate"},
		{name: "lone surrogate in a key", body: with(`"channel":"app"`, `"\udc00":"app"`), field: "metadata.\ufffd", detail: "surrogate"},
		{name: "null user_id", body: with(`"user_id":"u-1"`, `"user_id":null`), field: "user_id", detail: "required"},
		{name: "quantities of one sku overflow", body: with(`[{"sku":"sku-1","qty":2}]`, `[{"sku":"tea","qty":9223372036854775807},{"sku":"tea","qty":9223372036854775807},{"sku":"tea","qty":3}]`), field: "items", detail: "add up"},
		{name: "quantities of the order overflow", body: with(`[{"sku":"sku-1","qty":2}]`, `[{"sku":"a","qty":9223372036854775807},{"sku":"b","qty":1}]`), field: "items", detail: "add up"},
		{name: "nested too deeply", body: `{"metadata":` + strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001) + `}`, field: "metadata", detail: "deeper"},
		{name: "malformed JSON", body: `{"order_no":"BAD-1",`, detail: "not valid JSON"},
		{name: "syntax error", body: `{"order_no" "BAD-1"}`, detail: "not valid JSON"},
		{name: "single quotes", body: `{'order_no':'BAD-1'}`, detail: "not valid JSON"},
		{name: "trailing object", body: createBody("BAD-1", "") + `{}`, detail: "after"},
		{name: "trailing garbage", body: createBody("BAD-1", "") + `x`, detail: "after"},
		{name: "trailing comma", body: strings.TrimSuffix(createBody("BAD-1", ""), "}") + `,}`, detail: "not valid JSON"},
		{name: "array body", body: `[` + createBody("BAD-1", "") + `]`, detail: "JSON object"},
		{name: "string body", body: `"BAD-1"`, detail: "JSON object"},
		{name: "null body", body: `null`, detail: "JSON object"},
		{name: "empty body", body: ``, detail: "empty"},
		{name: "blank body", body: " \n", detail: "empty"},
		{name: "too large", body: createBody("BAD-1", `"coupon2":"`+strings.Repeat("x", 70<<10)+`"`), detail: "65536 bytes"},
		{name: "ttl zero", body: createBody("BAD-1", `"ttl":"0s"`), field: "ttl", detail: "positive"},
		{name: "ttl negative", body: createBody("BAD-1", `"ttl":"-5m"`), field: "ttl", detail: "positive"},
		{name: "ttl unparsable", body: createBody("BAD-1", `"ttl":"soon"`), field: "ttl", detail: "duration"},
		{name: "ttl in weeks", body: createBody("BAD-1", `"ttl":"1w"`), field: "ttl", detail: "duration"},
		{name: "ttl as a number", body: createBody("BAD-1", `"ttl":900`), field: "ttl", detail: "string"},
		{name: "ttl too far", body: createBody("BAD-1", `"ttl":"9000h"`), field: "ttl", detail: "ahead"},
		{name: "ttl and deadline_at", body: createBody("BAD-1", `"ttl":"5m","deadline_at":"`+future+`"`), field: "ttl", detail: "deadline_at"},
		{name: "deadline_at unparsable", body: createBody("BAD-1", `"deadline_at":"2026-11-29 13:00"`), field: "deadline_at", detail: "RFC 3339"},
		{name: "deadline_at without zone", body: createBody("BAD-1", `"deadline_at":"2026-11-29T13:00:00"`), field: "deadline_at", detail: "RFC 3339"},
		{name: "deadline_at in the past", body: createBody("BAD-1", `"deadline_at":"`+past+`"`), field: "deadline_at", detail: "future"},
		{name: "deadline_at now", body: createBody("BAD-1", `"deadline_at":"`+start.Format(time.RFC3339)+`"`), field: "deadline_at", detail: "future"},
		{name: "text/plain", contentType: "text/plain", body: createBody("BAD-1", ""), status: http.StatusUnsupportedMediaType, field: "Content-Type", detail: "application/json"},
		{name: "form", contentType: "application/x-www-form-urlencoded", body: "order_no=BAD-1", status: http.StatusUnsupportedMediaType, field: "Content-Type"},
		{name: "no Content-Type", contentType: "-", body: createBody("BAD-1", ""), status: http.StatusUnsupportedMediaType, field: "Content-Type", detail: "missing"},
		{name: "malformed Content-Type", contentType: "application/json;;", body: createBody("BAD-1", ""), status: http.StatusUnsupportedMediaType, field: "Content-Type"},
		{name: "Latin-1 charset", contentType: "application/json; charset=iso-8859-1", body: createBody("BAD-1", ""), status: http.StatusUnsupportedMediaType, field: "Content-Type", detail: "UTF-8"},
		{name: "UTF-16 charset", contentType: "application/json; charset=utf-16", body: createBody("BAD-1", ""), status: http.StatusUnsupportedMediaType, field: "Content-Type", detail: "UTF-8"},
	}
}

// TestJSONCharsetUTF8: a body said to be UTF-8, in any spelling, or said
// nothing of, is read; one said to be in another charset was read as UTF-8
// all the same, and is refused (badCreates).
func TestJSONCharsetUTF8(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/json;charset=UTF-8", `application/json; charset="utf8"`} {
		e.doType("POST", "/v1/orders", ct, createBody(fmt.Sprintf("CS-%d", i), "")).want(t, http.StatusCreated)
	}
}

func TestCreateOrderRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tt := range badCreates() {
		t.Run(tt.name, func(t *testing.T) {
			ct := tt.contentType
			switch ct {
			case "":
				ct = "application/json"
			case "-":
				ct = ""
			}
			want := tt.status
			if want == 0 {
				want = http.StatusBadRequest
			}
			p := e.doType("POST", "/v1/orders", ct, tt.body).want(t, want).problem(t)
			if p.Code != lapse.EINVALID {
				t.Errorf("code %q, want invalid", p.Code)
			}
			if p.Field != tt.field {
				t.Errorf("field %q, want %q (detail %q)", p.Field, tt.field, p.Detail)
			}
			if tt.field != "" && !strings.Contains(p.Detail, tt.field) {
				t.Errorf("detail %q does not name %s", p.Detail, tt.field)
			}
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail %q does not say %q", p.Detail, tt.detail)
			}
			e.do("GET", "/v1/orders/BAD-1", "").want(t, http.StatusNotFound)
		})
	}
	if p := e.list(t, ""); len(p.Orders) != 0 {
		t.Fatalf("bad requests created %v", orderNos(p.Orders))
	}
}

func TestMaxBodyBytes(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{cfg: lapsehttp.Config{MaxBodyBytes: 100}})
	body := createBody("MB-1", "")
	p := e.do("POST", "/v1/orders", body).want(t, http.StatusBadRequest).problem(t)
	if !strings.Contains(p.Detail, "100 bytes") {
		t.Fatalf("detail %q does not state the limit", p.Detail)
	}
	e.do("POST", "/v1/orders", `{"order_no":"MB-1","flow":"checkout","user_id":"u","amount":1,"currency":"CNY"}`).
		want(t, http.StatusCreated)
}

func TestEventAndDeadlineRefuseBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/orders", createBody("B-1", "")).want(t, http.StatusCreated)
	for _, tt := range []struct {
		method, path, ct, body string
		status                 int
		field                  string
	}{
		{"POST", "/v1/orders/B-1/events", "application/json", `{"event":"CANCEL"`, 400, ""},
		{"POST", "/v1/orders/B-1/events", "application/json", `{"event":"CANCEL","why":"x"}`, 400, "why"},
		{"POST", "/v1/orders/B-1/events", "application/json", `{"event":"CANCEL","event":"CANCEL"}`, 400, "event"},
		{"POST", "/v1/orders/B-1/events", "application/json", `{"event":"CANCEL"} {}`, 400, ""},
		{"POST", "/v1/orders/B-1/events", "application/json", `{"event":["CANCEL"]}`, 400, "event"},
		{"POST", "/v1/orders/B-1/events", "application/json", `{"reason":"no event"}`, 400, "event"},
		{"POST", "/v1/orders/B-1/events", "application/json", ``, 400, ""},
		{"POST", "/v1/orders/B-1/events", "text/plain", `{"event":"CANCEL"}`, 415, "Content-Type"},
		{"PATCH", "/v1/orders/B-1/deadline", "application/json", `{"extend_by":"1m"`, 400, ""},
		{"PATCH", "/v1/orders/B-1/deadline", "application/json", `{"extend_by":"1m","by":"me"}`, 400, "by"},
		{"PATCH", "/v1/orders/B-1/deadline", "text/plain", `{"extend_by":"1m"}`, 415, "Content-Type"},
	} {
		p := e.doType(tt.method, tt.path, tt.ct, tt.body).want(t, tt.status).problem(t)
		if p.Field != tt.field {
			t.Errorf("%s %s: field %q, want %q (detail %q)", tt.method, tt.body, p.Field, tt.field, p.Detail)
		}
	}
	o := e.do("GET", "/v1/orders/B-1", "").want(t, http.StatusOK).order(t)
	if o.Version != 1 || o.State != flows.Unpaid {
		t.Fatalf("refused requests changed the order: %+v", o)
	}
	if evs := e.eventsOf(t, "B-1"); len(evs) != 1 {
		t.Fatalf("refused requests wrote events: %+v", evs)
	}
}

func TestListRefusesBadParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tt := range []struct{ query, field string }{
		{"limit=0", "limit"},
		{"limit=-1", "limit"},
		{"limit=501", "limit"},
		{"limit=ten", "limit"},
		{"limit=1.5", "limit"},
		{"cursor=not-a-cursor", "cursor"},
		{"cursor=" + strings.Repeat("A", 23), "cursor"}, // valid base64url, wrong content
		{"cursor=%2B%2F%3D%3D", "cursor"},
		// Well formed, but at a time no order has: PostgreSQL read the
		// earliest one as later than every order, and listed them all.
		{"cursor=" + cursorAt(math.MinInt64, 1), "cursor"},
		{"cursor=" + cursorAt(math.MaxInt64, 1), "cursor"},
		{"cursor=" + cursorAt(time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC).UnixMicro(), 1), "cursor"},
		{"cursor=" + cursorAt(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), 1), "cursor"},
		{"created_from=yesterday", "created_from"},
		{"created_to=2026-11-29", "created_to"},
		{"created_from=2026-11-29T12:00:00Z&created_to=2026-11-29T11:00:00Z", "created_to"},
		{"status=UNPAID", "status"},
		{"state=UNPAID&state=PAID", "state"},
		{"limit=%zz", ""},
	} {
		p := e.do("GET", "/v1/orders?"+tt.query, "").want(t, http.StatusBadRequest).problem(t)
		if p.Field != tt.field || (tt.field != "" && !strings.Contains(p.Detail, tt.field)) {
			t.Errorf("%s: problem %+v, want one naming %q", tt.query, p, tt.field)
		}
	}
}

// cursorAt is a cursor built as the server builds one (http/cursor.go),
// at micros since the epoch and the order id id.
func cursorAt(micros, id int64) string {
	var b [17]byte
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:9], uint64(micros))
	binary.BigEndian.PutUint64(b[9:], uint64(id))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// FuzzCreateOrder throws arbitrary bodies at POST /v1/orders. Whatever comes
// in, the answer is never a 5xx, always JSON, and a refused request never
// creates an order.
func FuzzCreateOrder(f *testing.F) {
	for _, tt := range badCreates() {
		f.Add(tt.body)
	}
	for _, s := range []string{
		createBody("FZ-1", ""),
		createBody("FZ-2", `"ttl":"2s"`),
		createBody("FZ-3", `"deadline_at":"2026-11-29T13:00:00Z"`),
		`{"order_no":"FZ-4","flow":"checkout","user_id":"u","amount":0,"currency":"USD","metadata":{"a":{"b":[1,{"c":null}]}}}`,
		`{"order_no":"FZ-5","flow":"checkout","user_id":"\u0000","amount":1,"currency":"CNY","coupon":"\ud800"}`,
		`{"order_no":"FZ-6","flow":"checkout","user_id":"u","amount":1,"currency":"CNY","metadata":{"\u0000":"\u0000"}}`,
		`{"order_no":"FZ-7","flow":"checkout","user_id":"u","amount":1,"currency":"CNY","items":[{"sku":"a","qty":9223372036854775807}]}`,
		`{"order_no":"FZ-8","flow":"checkout","user_id":"u","amount":1,"currency":"CNY","ttl":"1ns"}`,
		`{"order_no":"FZ-9","flow":"checkout","user_id":"u","amount":1,"currency":"CNY","metadata":{}}`,
		strings.Repeat("[", 10000),
		`{"a":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5001),
	} {
		f.Add(s)
	}

	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		f.Fatalf("sqlite.Open: %v", err)
	}
	f.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		f.Fatalf("Migrate: %v", err)
	}
	eng, err := engine.New(db, flows.Builtin(), engine.Config{Clock: lapse.NewManualClock(start), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatalf("engine.New: %v", err)
	}
	logs := &syncBuffer{}
	h := lapsehttp.NewServer(eng, lapsehttp.Config{Unauthenticated: true, Logger: slog.New(slog.NewTextHandler(logs, nil))}).Handler()
	newest := func() string { // the order created last, "" for none
		os, err := eng.Orders(ctx, &lapse.OrderListParams{Limit: 1})
		if err != nil {
			f.Fatalf("Orders: %v", err)
		}
		if len(os) == 0 {
			return ""
		}
		return fmt.Sprintf("%s#%d", os[0].OrderNo, os[0].ID)
	}

	f.Fuzz(func(t *testing.T, body string) {
		before := newest()
		req := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		after := newest()
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d for %q: %s\nlogs:\n%s", rec.Code, body, rec.Body, logs)
		case rec.Code == http.StatusCreated:
			if after == before {
				t.Fatalf("201 for %q but no new order", body)
			}
		case rec.Code == http.StatusOK:
			if after != before {
				t.Fatalf("200 for %q created %s", body, after)
			}
		case rec.Code >= 400:
			if after != before {
				t.Fatalf("status %d for %q created %s", rec.Code, body, after)
			}
			if ct := rec.Header().Get("Content-Type"); ct != lapsehttp.ContentTypeProblem {
				t.Fatalf("status %d with Content-Type %q", rec.Code, ct)
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		if !json.Valid(bytes.TrimSpace(rec.Body.Bytes())) {
			t.Fatalf("answer is not JSON: %s", rec.Body)
		}
	})
}

// TestContentEncodingRefused: a body said to be compressed is refused with
// 415 naming Content-Encoding, which the server does not undo: a gzip body
// was refused as JSON that does not parse ("invalid character '\x1f'"), and
// a plain one so labelled was read in spite of its label.
func TestContentEncodingRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(createBody("CE-1", "")))
	_ = zw.Close()
	for _, c := range []struct {
		name, encoding, body string
	}{
		{"gzip body", "gzip", gz.String()},
		{"plain body said gzip", "gzip", createBody("CE-1", "")},
		{"deflate and identity", "identity, deflate", createBody("CE-1", "")},
	} {
		req, err := http.NewRequest("POST", e.url+"/v1/orders", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", c.encoding)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		r := &response{status: res.StatusCode, header: res.Header, body: b}
		if p := r.want(t, http.StatusUnsupportedMediaType).problem(t); p.Field != "Content-Encoding" || p.Code != lapse.EINVALID {
			t.Errorf("%s: problem %+v, want invalid naming Content-Encoding", c.name, p)
		}
	}
	e.do("GET", "/v1/orders/CE-1", "").want(t, http.StatusNotFound)
	// identity is no compression.
	req, err := http.NewRequest("POST", e.url+"/v1/orders", strings.NewReader(createBody("CE-2", "")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "identity")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Errorf("Content-Encoding: identity: %d, want 201", res.StatusCode)
	}
}
