package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// TestAccessDeadlinesBroughtEarlierAddUpWithCloses: an operator who brings
// an order's deadline earlier has its timer close it on their word, as a
// manual close of it would: the move counts one order toward four eyes,
// with their closes and cancels, so that closing orders by moving their
// deadlines a moment away is no way around a second operator. A deadline
// moved later counts nothing; keys are not counted; an approved move is
// carried out as approved.
func TestAccessDeadlinesBroughtEarlierAddUpWithCloses(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 2})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	for i := 1; i <= 5; i++ {
		g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":"DM-%d","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"72h"}`, i),
			bearer(g.admin)).want(t, http.StatusCreated)
	}
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	code := header(lapsehttp.SecondFactorHeader, g.code("alice"))
	soon := g.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	earlier := `{"deadline_at":"` + soon + `","reason":"fraud"}`
	later := `{"extend_by":"1h","reason":"customer asked"}`
	deadline := func(no string) time.Time {
		t.Helper()
		o, err := g.engine.Order(context.Background(), no)
		if err != nil || o.DeadlineAt == nil {
			t.Fatalf("order %s: %+v, %v", no, o, err)
		}
		return *o.DeadlineAt
	}

	// Later counts nothing, however often.
	for range 3 {
		g.call("PATCH", "/v1/orders/DM-1/deadline", later, alice, code).want(t, http.StatusOK)
	}
	// Earlier: one order each; the third on her word waits.
	g.call("PATCH", "/v1/orders/DM-1/deadline", earlier, alice).want(t, http.StatusOK)
	g.call("PATCH", "/v1/orders/DM-2/deadline", earlier, alice).want(t, http.StatusOK)
	was := deadline("DM-3")
	a := g.call("PATCH", "/v1/orders/DM-3/deadline", earlier, alice).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Action != "order.deadline" || a.Target != "order:DM-3" || a.Count != 1 {
		t.Fatalf("alice's third deadline brought earlier: %+v, want it waiting for approval at the stake of one order", a)
	}
	if !deadline("DM-3").Equal(was) {
		t.Fatalf("a deadline move waiting for approval moved DM-3's deadline to %s", deadline("DM-3"))
	}
	// With her closes: a close of one more order waits too.
	body, _ := json.Marshal(map[string]any{"selector": map[string]any{"order_nos": []string{"DM-5"}}, "reason": "fraud"})
	if c := g.call("POST", "/v1/closes", string(body), alice).want(t, http.StatusAccepted).approval(t); c.Status != lapse.ApprovalPending {
		t.Errorf("alice's close after two deadlines brought earlier: %+v, want it waiting for approval", c)
	}
	// Later is still hers to move.
	g.call("PATCH", "/v1/orders/DM-4/deadline", later, alice).want(t, http.StatusOK)
	// A key moves within its scope, uncounted.
	writer := bearer(g.key("shop", access.ScopeOrdersWrite))
	g.call("PATCH", "/v1/orders/DM-4/deadline", earlier, writer).want(t, http.StatusOK)

	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	if at := deadline("DM-3"); at.Format(time.RFC3339Nano) != soon {
		t.Errorf("the approved move left DM-3's deadline at %s, want %s", at, soon)
	}
}

// TestGroupDeadlineBroughtEarlierIsAMassAction: an operator who brings an
// open group buy's deadline earlier (as the group) settles it early for
// every member, so the move counts its members, as a cancel of the group
// does; moved later it counts nothing.
func TestGroupDeadlineBroughtEarlierIsAMassAction(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{ApprovalCount: 2})
	for id, members := range map[string][]string{"GD-3": {"u1", "u2", "u3"}, "GD-1": {"u1"}} {
		g.call("POST", "/v1/groups", `{"group_id":"`+id+`","organiser":"org","price":990,"currency":"CNY","ttl":"72h"}`, bearer(g.admin)).
			want(t, http.StatusCreated)
		for _, u := range members {
			g.call("POST", "/v1/groups/"+id+"/members", `{"user_id":"`+u+`","method":"ok-`+u+`"}`, bearer(g.admin)).want(t, http.StatusCreated)
		}
	}
	g.operator("alice", access.RoleOperator)
	alice := session(g.login("alice"))
	code := header(lapsehttp.SecondFactorHeader, g.code("alice"))
	earlier := `{"deadline_at":"` + g.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) + `"}`

	g.call("PATCH", "/v1/groups/GD-3/deadline", `{"extend_by":"1h"}`, alice, code).want(t, http.StatusOK)
	a := g.call("PATCH", "/v1/groups/GD-3/deadline", earlier, alice).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Action != "group.deadline" || a.Target != "group:GD-3" || a.Count != 3 {
		t.Fatalf("alice's earlier deadline of GD-3: %+v, want it waiting for approval at the stake of its 3 members", a)
	}
	g.call("PATCH", "/v1/groups/GD-1/deadline", earlier, alice).want(t, http.StatusOK)
	if st := g.state("GD-1"); st != flows.GroupOpen {
		t.Errorf("GD-1 is %s, want it still open until its deadline", st)
	}
	a = g.call("PATCH", "/v1/groups/GD-3/deadline", earlier, alice).want(t, http.StatusAccepted).approval(t)
	if a.Count != 3 {
		t.Errorf("alice's earlier deadline of GD-3 again: %+v", a)
	}
}

// TestGroupDeadlineEarlierNeedsOperations: the deadline of an open group
// buy settles it for every member, so bringing it earlier is the group's
// mass action, as a cancel of it is: the order's route (orders:write)
// refuses it with 403 naming the group's route and its scope, changing
// nothing, and the group's route needs operations:write. Moving it later
// only keeps the group open longer: the order's route still may. The
// group's route refuses an order that is not a group buy.
func TestGroupDeadlineEarlierNeedsOperations(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{})
	g.call("POST", "/v1/groups", `{"group_id":"GS-1","organiser":"org","price":990,"currency":"CNY","ttl":"72h"}`, bearer(g.admin)).
		want(t, http.StatusCreated)
	g.call("POST", "/v1/groups/GS-1/members", `{"user_id":"u1","method":"ok-u1"}`, bearer(g.admin)).want(t, http.StatusCreated)
	g.call("POST", "/v1/orders", `{"order_no":"GS-O","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"72h"}`,
		bearer(g.admin)).want(t, http.StatusCreated)
	writer := bearer(g.key("shop", access.ScopeOrdersWrite))
	ops := bearer(g.key("ops", access.ScopeOperationsWrite))
	deadline := func() time.Time {
		t.Helper()
		o, err := g.engine.Order(context.Background(), "GS-1")
		if err != nil || o.DeadlineAt == nil {
			t.Fatalf("order GS-1: %+v, %v", o, err)
		}
		return *o.DeadlineAt
	}
	was := deadline()
	for _, body := range []string{
		`{"deadline_at":"` + g.clock.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano) + `"}`,
		`{"deadline_at":"` + was.Add(-time.Microsecond).UTC().Format(time.RFC3339Nano) + `"}`,
	} {
		p := g.call("PATCH", "/v1/orders/GS-1/deadline", body, writer).want(t, http.StatusForbidden).problem(t)
		if p.Code != lapse.EFORBIDDEN || !strings.Contains(p.Detail, "PATCH /v1/groups/GS-1/deadline") || !strings.Contains(p.Detail, access.ScopeOperationsWrite) {
			t.Errorf("orders:write bringing GS-1's deadline earlier: %+v, want a 403 naming the group's route and %s", p, access.ScopeOperationsWrite)
		}
		g.call("PATCH", "/v1/groups/GS-1/deadline", body, writer).want(t, http.StatusForbidden)
	}
	if at := deadline(); !at.Equal(was) {
		t.Fatalf("refused moves left GS-1's deadline at %s, want %s", at, was)
	}
	// Later: the order's route may.
	g.call("PATCH", "/v1/orders/GS-1/deadline", `{"extend_by":"1h"}`, writer).want(t, http.StatusOK)
	was = was.Add(time.Hour)
	if at := deadline(); !at.Equal(was) {
		t.Fatalf("GS-1's deadline extended by an hour is %s, want %s", at, was)
	}
	// Earlier, as the group, with operations:write.
	soon := g.clock.Now().Add(time.Minute).UTC()
	var gv struct {
		GroupID string `json:"group_id"`
		Order   struct {
			DeadlineAt time.Time `json:"deadline_at"`
		} `json:"order"`
	}
	r := g.call("PATCH", "/v1/groups/GS-1/deadline", `{"deadline_at":"`+soon.Format(time.RFC3339Nano)+`"}`, ops).want(t, http.StatusOK)
	if err := json.Unmarshal(r.body, &gv); err != nil || gv.GroupID != "GS-1" || !gv.Order.DeadlineAt.Equal(soon) {
		t.Fatalf("GS-1 brought earlier as the group: %s (%v), want the group with its deadline at %s", r.body, err, soon)
	}
	if at := deadline(); !at.Equal(soon) {
		t.Fatalf("GS-1's deadline is %s, want %s", at, soon)
	}
	// Not a group buy: the group's route refuses it.
	if p := g.call("PATCH", "/v1/groups/GS-O/deadline", `{"extend_by":"1h"}`, ops).want(t, http.StatusBadRequest).problem(t); !strings.Contains(p.Detail, "not a group buy") {
		t.Errorf("the group's route moving a checkout order: %+v, want a 400 saying it is not a group buy", p)
	}
}
