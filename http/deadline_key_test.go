package http_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestDeadlineIdempotencyKey: a client that retries an extension after a
// lost answer, under the same Idempotency-Key, extends once: the retry
// answers 200 with the order as it stands. The key with another body is a
// 409 and changes nothing; another key extends again. So on a group's
// route too.
func TestDeadlineIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"DK-1","flow":"checkout","user_id":"u","amount":100,"currency":"USD","ttl":"15m"}`).
		want(t, http.StatusCreated)
	key := header("Idempotency-Key", "retry-1")
	want := start.Add(25 * time.Minute)
	check := func(o *lapse.Order, version int64) {
		t.Helper()
		if !o.DeadlineAt.Equal(want) || o.Version != version {
			t.Fatalf("DK-1: deadline %s, version %d; want %s, version %d", o.DeadlineAt, o.Version, want, version)
		}
	}
	check(e.call("PATCH", "/v1/orders/DK-1/deadline", `{"extend_by":"10m"}`, key).want(t, http.StatusOK).order(t), 2)
	for range 2 {
		check(e.call("PATCH", "/v1/orders/DK-1/deadline", `{"extend_by":"10m"}`, key).want(t, http.StatusOK).order(t), 2)
	}
	for _, body := range []string{`{"extend_by":"20m"}`, `{"extend_by":"10m","reason":"other"}`, `{"deadline_at":"2026-11-29T13:00:00Z"}`} {
		if p := e.call("PATCH", "/v1/orders/DK-1/deadline", body, key).want(t, http.StatusConflict).problem(t); p.Code != lapse.ECONFLICT {
			t.Errorf("another body %s under the same key: %+v, want a 409", body, p)
		}
	}
	o, err := e.engine.Order(t.Context(), "DK-1")
	if err != nil {
		t.Fatal(err)
	}
	check(o, 2)
	want = want.Add(10 * time.Minute)
	check(e.call("PATCH", "/v1/orders/DK-1/deadline", `{"extend_by":"10m"}`, header("Idempotency-Key", "retry-2")).want(t, http.StatusOK).order(t), 3)

	// A group's route takes a key as the order's does.
	e.do("POST", "/v1/groups", `{"group_id":"DK-G","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`).want(t, http.StatusCreated)
	for range 2 {
		e.call("PATCH", "/v1/groups/DK-G/deadline", `{"extend_by":"1h"}`, key).want(t, http.StatusOK)
	}
	g, err := e.engine.Order(t.Context(), "DK-G")
	if err != nil || !g.DeadlineAt.Equal(start.Add(2*time.Hour)) || g.Version != 2 {
		t.Fatalf("DK-G extended twice under one key: %+v, %v; want it extended once", g, err)
	}
	e.call("PATCH", "/v1/groups/DK-G/deadline", `{"extend_by":"2h"}`, key).want(t, http.StatusConflict)
}
