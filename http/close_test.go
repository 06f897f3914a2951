package http_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
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
