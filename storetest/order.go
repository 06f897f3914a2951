package storetest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

func testOrderCreate(t *testing.T, s lapse.Store) {
	deadline := base.Add(15 * time.Minute)
	p := newOrder("A-1", deadline, base)
	o, created, err := s.OrderCreate(ctxT(t), p)
	if err != nil || !created {
		t.Fatalf("OrderCreate = created %v, %v", created, err)
	}
	if o.ID == 0 || o.Version != 1 {
		t.Fatalf("created order has id %d version %d, want an id and version 1", o.ID, o.Version)
	}
	got := mustGet(t, s, "A-1")
	want := *p.Order
	want.ID = o.ID
	if got.ID != want.ID || got.OrderNo != want.OrderNo || got.Flow != want.Flow || got.State != want.State ||
		!timeEq(got.DeadlineAt, want.DeadlineAt) || got.Amount != want.Amount || got.Currency != want.Currency ||
		got.UserID != want.UserID || !slices.Equal(got.Items, want.Items) || string(got.Metadata) != string(want.Metadata) ||
		got.Version != 1 || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(base) || got.ClosedAt != nil ||
		got.CloseReason != "" || got.RequestHash != want.RequestHash {
		t.Fatalf("OrderGet round trip:\n got %+v\nwant %+v", got, want)
	}
	if got.CreatedAt.Location() != time.UTC || got.DeadlineAt.Location() != time.UTC {
		t.Errorf("times come back in %v, want UTC", got.CreatedAt.Location())
	}
	trs, err := s.TransitionList(ctxT(t), o.ID)
	if err != nil || len(trs) != 1 {
		t.Fatalf("TransitionList = %d rows, %v; want the creation row", len(trs), err)
	}
	if tr := trs[0]; tr.FromState != "" || tr.ToState != flows.Unpaid || tr.Event != lapse.EventCreate ||
		tr.Version != 1 || tr.Actor != "storetest" || tr.FiredBy != lapse.FiredByApp || !tr.CreatedAt.Equal(base) {
		t.Errorf("creation row = %+v", tr)
	}
	evs, err := s.OutboxList(ctxT(t), o.ID)
	if err != nil || len(evs) != 1 {
		t.Fatalf("OutboxList = %d rows, %v; want order.created", len(evs), err)
	}
	if ev := evs[0]; ev.ID != p.Outbox[0].ID || ev.Type != lapse.EventOrderCreated || ev.OrderNo != "A-1" ||
		string(ev.Payload) != string(p.Outbox[0].Payload) || ev.Seq == 0 || !ev.CreatedAt.Equal(base) {
		t.Errorf("outbox row = %+v", ev)
	}

	// An order with no items, metadata or deadline round-trips as such.
	p2 := newOrder("A-2", deadline, base)
	p2.Order.Items, p2.Order.Metadata, p2.Order.DeadlineAt = nil, nil, nil
	if _, _, err := s.OrderCreate(ctxT(t), p2); err != nil {
		t.Fatal(err)
	}
	got2 := mustGet(t, s, "A-2")
	if len(got2.Items) != 0 || len(got2.Metadata) != 0 || got2.DeadlineAt != nil {
		t.Errorf("empty fields came back as items %v metadata %q deadline %v", got2.Items, got2.Metadata, got2.DeadlineAt)
	}
}

// testOrderCreateLog checks that the creation row of an order is at the
// version the store gives the order, 1, whatever p.Log says, with the rest
// of p.Log as given, and that metadata comes back byte for byte: it is the
// caller's JSON, not the store's reading of it.
func testOrderCreateLog(t *testing.T, s lapse.Store) {
	p := newOrder("CL-1", base.Add(time.Hour), base)
	p.Log.Version = 0
	p.Order.Metadata = []byte("{ \"z\":1,\n\t\"a\" : \"\\u00e9\", \"z\": 2 }")
	o, _, err := s.OrderCreate(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	bulk := newOrder("CL-2", base.Add(time.Hour), base)
	bulk.Log.Version = 7
	if err := s.OrderCreateMany(ctxT(t), []*lapse.OrderCreateParams{bulk}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*lapse.Order{o, mustGet(t, s, "CL-2")} {
		trs, err := s.TransitionList(ctxT(t), o.ID)
		if err != nil || len(trs) != 1 {
			t.Fatalf("TransitionList(%s) = %d rows, %v", o.OrderNo, len(trs), err)
		}
		if tr := trs[0]; tr.Version != 1 || o.Version != 1 || tr.Event != lapse.EventCreate || tr.ToState != flows.Unpaid ||
			tr.Actor != "storetest" || tr.FiredBy != lapse.FiredByApp || !tr.CreatedAt.Equal(base) {
			t.Errorf("creation row of %s = %+v, want version 1 and the rest of the log as given", o.OrderNo, tr)
		}
	}
	if got := mustGet(t, s, "CL-1"); string(got.Metadata) != string(p.Order.Metadata) {
		t.Errorf("metadata = %q, want the bytes written, %q", got.Metadata, p.Order.Metadata)
	}
}

func testOrderCreateDuplicate(t *testing.T, s lapse.Store) {
	first := mustCreate(t, s, "D-1", base.Add(time.Minute), base)
	p := newOrder("D-1", base.Add(time.Hour), base.Add(time.Second))
	p.Order.Amount = 5
	o, created, err := s.OrderCreate(ctxT(t), p)
	if err != nil || created {
		t.Fatalf("second OrderCreate = created %v, %v; want the existing order", created, err)
	}
	if o.ID != first.ID || o.Amount != first.Amount || !timeEq(o.DeadlineAt, first.DeadlineAt) {
		t.Errorf("second OrderCreate returned %+v, want the first order %+v", o, first)
	}
	if tr, ev := counts(t, s, first); tr != 1 || ev != 1 {
		t.Errorf("after a duplicate create: %d log rows, %d events; want 1 and 1", tr, ev)
	}

	// Concurrent creates of one order_no: exactly one creates.
	var wg sync.WaitGroup
	var mu sync.Mutex
	createdN := 0
	ids := map[int64]bool{}
	for range 8 {
		wg.Go(func() {
			o, created, err := s.OrderCreate(ctxT(t), newOrder("D-2", base.Add(time.Minute), base))
			if err != nil {
				t.Errorf("concurrent OrderCreate: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[o.ID] = true
			if created {
				createdN++
			}
		})
	}
	wg.Wait()
	if createdN != 1 || len(ids) != 1 {
		t.Errorf("8 concurrent creates: %d created, %d distinct ids; want 1 and 1", createdN, len(ids))
	}
}

func testOrderCreateAtomic(t *testing.T, s lapse.Store) {
	a := newOrder("X-1", base.Add(time.Minute), base)
	if _, _, err := s.OrderCreate(ctxT(t), a); err != nil {
		t.Fatal(err)
	}
	b := newOrder("X-2", base.Add(time.Minute), base)
	b.Outbox[0].ID = a.Outbox[0].ID // an outbox clash must undo the order insert
	if _, _, err := s.OrderCreate(ctxT(t), b); !errors.Is(err, lapse.ErrEventExists) {
		t.Fatalf("OrderCreate with a clashing outbox id = %v, want ErrEventExists", err)
	}
	if _, err := s.OrderGet(ctxT(t), "X-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("order of a failed create exists: %v", err)
	}
}

func testOrderCreateMany(t *testing.T, s lapse.Store) {
	var ps []*lapse.OrderCreateParams
	for i := range 1000 {
		ps = append(ps, newOrder(orderNo("B", i), base.Add(time.Duration(i)*time.Second), base))
	}
	if err := s.OrderCreateMany(ctxT(t), ps); err != nil {
		t.Fatalf("OrderCreateMany: %v", err)
	}
	for _, i := range []int{0, 517, 999} {
		o := mustGet(t, s, orderNo("B", i))
		want := ps[i].Order
		if o.Version != 1 || o.State != flows.Unpaid || !timeEq(o.DeadlineAt, want.DeadlineAt) || o.Amount != want.Amount ||
			!slices.Equal(o.Items, want.Items) || string(o.Metadata) != string(want.Metadata) || o.RequestHash != want.RequestHash {
			t.Errorf("bulk-created %s = %+v", o.OrderNo, o)
		}
		if tr, ev := counts(t, s, o); tr != 1 || ev != 1 {
			t.Errorf("bulk-created %s has %d log rows and %d events; want 1 and 1", o.OrderNo, tr, ev)
		}
	}
	// One existing order_no refuses the whole batch.
	clash := []*lapse.OrderCreateParams{newOrder("B-new-1", base, base), newOrder(orderNo("B", 3), base, base)}
	if err := s.OrderCreateMany(ctxT(t), clash); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("OrderCreateMany with an existing order_no = %v, want a conflict", err)
	}
	if _, err := s.OrderGet(ctxT(t), "B-new-1"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("a refused batch wrote B-new-1: %v", err)
	}
	if n, _ := s.OrderCountDue(ctxT(t), base.Add(time.Hour)); n != 1000 {
		t.Errorf("OrderCountDue = %d, want 1000", n)
	}
}

// testOrderCreateRolledBack creates one order_no from many transactions at
// once, each of which rolls back once it finds that it created the order,
// as a creation whose stock or coupon is refused does: each of the others
// then waits for the next, and creates or finds the order in turn, with no
// error of its own (InnoDB deadlocks the creators that wait with a shared
// lock on the key when its holder rolls back).
func testOrderCreateRolledBack(t *testing.T, s lapse.Store) {
	refused := errors.New("refused")
	for round := range 5 {
		no := orderNo("ORB", round)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				err := s.Tx(ctxT(t), func(tx lapse.Store) error {
					_, created, err := tx.OrderCreate(ctxT(t), newOrder(no, base.Add(time.Hour), base))
					if err == nil && created {
						return refused
					}
					return err
				})
				if err != nil && !errors.Is(err, refused) {
					t.Errorf("%s, creator %d: %v", no, i, err)
				}
			})
		}
		wg.Wait()
		if _, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("OrderGet(%s) after every creation rolled back = %v; want ErrOrderNotFound", no, err)
		}
	}
}

func testOrderGetNotFound(t *testing.T, s lapse.Store) {
	if _, err := s.OrderGet(ctxT(t), "nope"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("OrderGet(nope) = %v, want ErrOrderNotFound", err)
	}
	if lapse.ErrorCode(lapse.ErrOrderNotFound) != lapse.ENOTFOUND {
		t.Errorf("ErrOrderNotFound has code %q", lapse.ErrorCode(lapse.ErrOrderNotFound))
	}
}

func testOrderList(t *testing.T, s lapse.Store) {
	// 30 orders, one second apart, users u-0..u-9; every third one closed.
	for i := range 30 {
		at := base.Add(time.Duration(i) * time.Second)
		o := mustCreate(t, s, orderNo("L", i), at.Add(time.Hour), at)
		if i%3 == 0 {
			if _, err := s.OrderTransition(ctxT(t), plan(t, o, flows.Cancel, at)); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := s.OrderList(ctxT(t), &lapse.OrderListParams{Limit: 100})
	if err != nil || len(all) != 30 {
		t.Fatalf("OrderList all = %d, %v", len(all), err)
	}
	for i, o := range all {
		if want := orderNo("L", 29-i); o.OrderNo != want {
			t.Fatalf("OrderList[%d] = %s, want %s (newest first)", i, o.OrderNo, want)
		}
	}

	// Paging with a cursor visits every order once, in order.
	var paged []string
	var cur *lapse.OrderCursor
	for {
		page, err := s.OrderList(ctxT(t), &lapse.OrderListParams{Limit: 7, Before: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			paged = append(paged, o.OrderNo)
		}
		if len(page) < 7 {
			break
		}
		last := page[len(page)-1]
		cur = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if len(paged) != 30 || paged[0] != orderNo("L", 29) || paged[29] != orderNo("L", 0) {
		t.Errorf("paging visited %d orders: %v", len(paged), paged)
	}

	closed, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{State: flows.Closed, Limit: 100})
	if len(closed) != 10 {
		t.Errorf("state=CLOSED: %d orders, want 10", len(closed))
	}
	user, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{UserID: "u-3", Limit: 100})
	if len(user) != 3 { // L-00003, L-00013, L-00023
		t.Errorf("user_id=u-3: %d orders, want 3", len(user))
	}
	from, to := base.Add(10*time.Second), base.Add(20*time.Second)
	window, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{CreatedFrom: &from, CreatedTo: &to, Limit: 100})
	if len(window) != 10 || window[0].OrderNo != orderNo("L", 19) || window[9].OrderNo != orderNo("L", 10) {
		t.Errorf("created in [10s, 20s): %d orders", len(window))
	}
	both, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{State: flows.Unpaid, UserID: "u-3", CreatedFrom: &from, Limit: 100})
	if len(both) != 2 || both[0].OrderNo != orderNo("L", 23) || both[1].OrderNo != orderNo("L", 13) {
		t.Errorf("combined filter: %d orders, want L-00023 and L-00013", len(both))
	}
	none, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{Flow: "groupbuy", Limit: 100})
	if len(none) != 0 {
		t.Errorf("flow=groupbuy: %d orders, want 0", len(none))
	}

	// The probe's orders are left out unless asked for, with every other
	// filter as it was; a number that only contains the prefix is no probe's.
	probe := mustCreate(t, s, lapse.ProbeOrderPrefix+"1", base.Add(time.Hour), base.Add(40*time.Second))
	mustCreate(t, s, "X-"+lapse.ProbeOrderPrefix+"1", base.Add(time.Hour), base.Add(41*time.Second))
	plain, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{Limit: 100})
	if len(plain) != 31 || plain[0].OrderNo != "X-"+lapse.ProbeOrderPrefix+"1" || plain[1].OrderNo != orderNo("L", 29) {
		t.Errorf("default listing: %d orders, want the 31 that are not the probe's", len(plain))
	}
	withProbes, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{Probes: true, Limit: 100})
	if len(withProbes) != 32 || withProbes[1].OrderNo != probe.OrderNo {
		t.Errorf("listing with Probes: %d orders, want 32 with the probe's second", len(withProbes))
	}
	unpaid, _ := s.OrderList(ctxT(t), &lapse.OrderListParams{State: flows.Unpaid, Probes: true, CreatedFrom: &to, Limit: 100})
	if len(unpaid) != 7+2 {
		t.Errorf("state=UNPAID from 20s with Probes: %d orders, want 9", len(unpaid))
	}
	// Only the prefix as it is written is the probe's: SQLite's LIKE
	// ignores case, and left a merchant's LAPSE-PROBE-1 out of every list
	// and of a manual close by its user.
	upper := strings.ToUpper(lapse.ProbeOrderPrefix) + "1"
	mustCreate(t, s, upper, base.Add(time.Hour), base.Add(42*time.Second))
	plain, _ = s.OrderList(ctxT(t), &lapse.OrderListParams{Limit: 100})
	if len(plain) != 32 || plain[0].OrderNo != upper {
		t.Errorf("default listing: %d orders, want the 32 that are not the probe's, %s first", len(plain), upper)
	}
}

func testOrderTransition(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "T-1", base.Add(time.Minute), base)
	now := base.Add(2 * time.Minute)
	p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredBySweep, Actor: "engine", Reason: "deadline passed", Deadline: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.OrderTransition(ctxT(t), p)
	if err != nil {
		t.Fatalf("OrderTransition: %v", err)
	}
	if got.State != flows.Closed || got.Version != 2 || got.DeadlineAt != nil || !timeEq(got.ClosedAt, &now) ||
		got.CloseReason != "TIMEOUT" || got.FiredBy != lapse.FiredBySweep || !got.UpdatedAt.Equal(now) ||
		!got.CreatedAt.Equal(base) || got.Amount != o.Amount {
		t.Errorf("after TIMEOUT: %+v", got)
	}
	// The deadline it closed at stays on the order.
	if dl := base.Add(time.Minute); !timeEq(p.ClosedDeadlineAt, &dl) || !timeEq(got.ClosedDeadlineAt, &dl) {
		t.Errorf("closed deadline: planned %v, stored %v; want %v", p.ClosedDeadlineAt, got.ClosedDeadlineAt, dl)
	}
	if again := mustGet(t, s, "T-1"); again.Version != 2 || again.State != flows.Closed || !timeEq(again.ClosedDeadlineAt, p.ClosedDeadlineAt) {
		t.Errorf("OrderGet after transition: %+v", again)
	}
	trs, _ := s.TransitionList(ctxT(t), o.ID)
	if len(trs) != 2 {
		t.Fatalf("%d log rows, want 2", len(trs))
	}
	if tr := trs[1]; tr.FromState != flows.Unpaid || tr.ToState != flows.Closed || tr.Event != flows.Timeout ||
		tr.Version != 2 || tr.FiredBy != lapse.FiredBySweep || tr.Actor != "engine" || tr.Reason != "deadline passed" ||
		!tr.CreatedAt.Equal(now) || tr.ID <= trs[0].ID {
		t.Errorf("transition row = %+v", tr)
	}
	evs, _ := s.OutboxList(ctxT(t), o.ID)
	if len(evs) != 2 || evs[1].Type != flows.EventOrderClosed || evs[1].ID != p.Outbox[0].ID || evs[1].Seq <= evs[0].Seq {
		t.Errorf("outbox = %+v", evs)
	}

	// A transition into a state with a deadline stores it.
	o2 := mustCreate(t, s, "T-2", base.Add(time.Minute), base)
	p2 := plan(t, o2, flows.Pay, base.Add(time.Second))
	d := base.Add(time.Hour)
	p2.DeadlineAt = &d
	got2, err := s.OrderTransition(ctxT(t), p2)
	if err != nil || got2.State != flows.Paid || !timeEq(got2.DeadlineAt, &d) || got2.ClosedAt != nil || got2.ClosedDeadlineAt != nil {
		t.Errorf("PAY with a deadline: %+v, %v", got2, err)
	}
}

func testOrderTransitionStale(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "S-1", base.Add(time.Minute), base)
	pay := plan(t, o, flows.Pay, base.Add(time.Second))
	cancel := plan(t, o, flows.Cancel, base.Add(time.Second))
	if _, err := s.OrderTransition(ctxT(t), pay); err != nil {
		t.Fatal(err)
	}
	// Planned against version 1 / UNPAID: the order moved on.
	if _, err := s.OrderTransition(ctxT(t), cancel); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("stale CANCEL = %v, want ErrStale", err)
	}
	// Same state, older version.
	o2 := mustCreate(t, s, "S-2", base.Add(time.Minute), base)
	if _, err := s.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: o2.ID, FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: base.Add(time.Hour), At: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OrderTransition(ctxT(t), plan(t, o2, flows.Cancel, base)); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("CANCEL at an old version = %v, want ErrStale", err)
	}
	if got := mustGet(t, s, "S-1"); got.State != flows.Paid || got.Version != 2 {
		t.Errorf("order after stale CANCEL: %s v%d", got.State, got.Version)
	}
	if tr, ev := counts(t, s, o); tr != 2 || ev != 2 {
		t.Errorf("stale transition wrote rows: %d log rows, %d events; want 2 and 2", tr, ev)
	}
	// Unknown order id.
	ghost := *pay
	ghost.OrderID = 1 << 40
	if _, err := s.OrderTransition(ctxT(t), &ghost); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("transition of a missing order = %v, want ErrStale", err)
	}
}

func testOrderTransitionAtomic(t *testing.T, s lapse.Store) {
	o1 := mustCreate(t, s, "AT-1", base.Add(time.Minute), base)
	o2 := mustCreate(t, s, "AT-2", base.Add(time.Minute), base)
	p1 := plan(t, o1, flows.Cancel, base)
	if _, err := s.OrderTransition(ctxT(t), p1); err != nil {
		t.Fatal(err)
	}
	p2 := plan(t, o2, flows.Cancel, base)
	p2.Outbox[0].ID = p1.Outbox[0].ID // the outbox insert fails: S6, all or nothing
	if _, err := s.OrderTransition(ctxT(t), p2); err == nil {
		t.Fatal("transition with a clashing outbox id succeeded")
	}
	if got := mustGet(t, s, "AT-2"); got.State != flows.Unpaid || got.Version != 1 {
		t.Errorf("order moved although its outbox row failed: %s v%d", got.State, got.Version)
	}
	if tr, ev := counts(t, s, o2); tr != 1 || ev != 1 {
		t.Errorf("failed transition left %d log rows, %d events; want 1 and 1", tr, ev)
	}
}

func testOrderTransitionMany(t *testing.T, s lapse.Store) {
	var ps []*lapse.OrderTransitionParams
	var want []int64
	for i := range 20 {
		o := mustCreate(t, s, orderNo("M", i), base.Add(time.Minute), base)
		p := plan(t, o, flows.Timeout, base.Add(time.Minute))
		if i%4 == 0 { // planned against a version the order no longer has
			if _, err := s.OrderTransition(ctxT(t), plan(t, o, flows.Pay, base)); err != nil {
				t.Fatal(err)
			}
		} else {
			want = append(want, o.ID)
		}
		ps = append(ps, p)
	}
	got, err := s.OrderTransitionMany(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("OrderTransitionMany applied %v, want %v", got, want)
	}
	for i := range 20 {
		o := mustGet(t, s, orderNo("M", i))
		tr, ev := counts(t, s, o)
		wantState := flows.Closed
		if i%4 == 0 {
			wantState = flows.Paid
		}
		if o.State != wantState || tr != 2 || ev != 2 {
			t.Errorf("%s: %s with %d log rows, %d events; want %s, 2, 2", o.OrderNo, o.State, tr, ev, wantState)
		}
		if dl := base.Add(time.Minute); wantState == flows.Closed && !timeEq(o.ClosedDeadlineAt, &dl) {
			t.Errorf("%s closed at deadline %v, want %v", o.OrderNo, o.ClosedDeadlineAt, dl)
		}
	}
	if ids, err := s.OrderTransitionMany(ctxT(t), nil); err != nil || len(ids) != 0 {
		t.Errorf("OrderTransitionMany(nil) = %v, %v", ids, err)
	}
}

func testOrderDeadlineSet(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "DL-1", base.Add(time.Minute), base)
	later := base.Add(time.Hour)
	ev := lapse.NewOutboxEvent(lapse.EventOrderDeadlineChanged, o, nil)
	got, err := s.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: later, At: base.Add(time.Second), Outbox: []lapse.OutboxEvent{ev}})
	if err != nil {
		t.Fatal(err)
	}
	if !timeEq(got.DeadlineAt, &later) || got.Version != 2 || got.State != flows.Unpaid || !got.UpdatedAt.Equal(base.Add(time.Second)) {
		t.Errorf("after OrderDeadlineSet: %+v", got)
	}
	if tr, evs := counts(t, s, o); tr != 1 || evs != 2 {
		t.Errorf("deadline change wrote %d log rows and %d events; want 1 (no state change) and 2", tr, evs)
	}
	if _, err := s.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid, FromVersion: 1, DeadlineAt: base, At: base}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("OrderDeadlineSet at an old version = %v, want ErrStale", err)
	}
	if got.IntentAt != nil || got.IntentProvider != "" {
		t.Errorf("a plain deadline change recorded an intent: %+v", got)
	}

	// With a payment intent: recorded with the move, and kept by later moves.
	started := base.Add(2 * time.Second)
	grace := later.Add(2 * time.Minute)
	got, err = s.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid, FromVersion: 2,
		DeadlineAt: grace, At: started, IntentAt: &started, IntentProvider: "sandbox", PayBy: &grace})
	if err != nil || !timeEq(got.IntentAt, &started) || got.IntentProvider != "sandbox" || !timeEq(got.DeadlineAt, &grace) || !timeEq(got.PayBy, &grace) {
		t.Fatalf("OrderDeadlineSet with an intent = %+v, %v", got, err)
	}
	got, err = s.OrderDeadlineSet(ctxT(t), &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: flows.Unpaid, FromVersion: 3, DeadlineAt: later, At: started})
	if err != nil || !timeEq(got.IntentAt, &started) || got.IntentProvider != "sandbox" || !timeEq(got.PayBy, &grace) {
		t.Errorf("a later deadline change lost the intent: %+v, %v", got, err)
	}
	if read := mustGet(t, s, "DL-1"); !timeEq(read.IntentAt, &started) || read.IntentProvider != "sandbox" || !timeEq(read.PayBy, &grace) {
		t.Errorf("OrderGet after an intent: %+v", read)
	}
}

func testOrderClaimDue(t *testing.T, s lapse.Store) {
	// Deadlines at base+i minutes for i in 0..9, created out of order.
	for _, i := range []int{5, 2, 8, 0, 9, 1, 7, 3, 6, 4} {
		mustCreate(t, s, orderNo("C", i), base.Add(time.Duration(i)*time.Minute), base)
	}
	closed := mustGet(t, s, orderNo("C", 0))
	if _, err := s.OrderTransition(ctxT(t), plan(t, closed, flows.Cancel, base)); err != nil {
		t.Fatal(err)
	}
	due, err := s.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: base.Add(5 * time.Minute), Flows: []string{"checkout"}, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range due {
		got = append(got, o.OrderNo)
	}
	// C-0 is closed (no deadline any more); earliest first; limit 3.
	if want := []string{orderNo("C", 1), orderNo("C", 2), orderNo("C", 3)}; !slices.Equal(got, want) {
		t.Errorf("OrderClaimDue = %v, want %v", got, want)
	}
	if due[0].Version != 1 || due[0].State != flows.Unpaid || due[0].Amount != 1999 || len(due[0].Items) != 1 {
		t.Errorf("claimed order is not whole: %+v", due[0])
	}
	all, _ := s.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: base.Add(5 * time.Minute), Flows: []string{"checkout"}, Limit: 100})
	if len(all) != 5 { // C-1..C-5: a deadline equal to DueBy is due
		t.Errorf("OrderClaimDue up to +5m = %d orders, want 5", len(all))
	}
	other, _ := s.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: base.Add(time.Hour), Flows: []string{"groupbuy"}, Limit: 100})
	if len(other) != 0 {
		t.Errorf("OrderClaimDue for another flow = %d orders", len(other))
	}
	// From: deadlines at or after it only, earliest first.
	from, err := s.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: base.Add(5 * time.Minute), Flows: []string{"checkout"}, Limit: 100,
		From: base.Add(3 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, o := range from {
		got = append(got, o.OrderNo)
	}
	if want := []string{orderNo("C", 3), orderNo("C", 4), orderNo("C", 5)}; !slices.Equal(got, want) {
		t.Errorf("OrderClaimDue from +3m = %v, want %v (a deadline equal to From is claimed)", got, want)
	}
	if late, err := s.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: base.Add(5 * time.Minute), Flows: []string{"checkout"}, Limit: 100,
		From: base.Add(6 * time.Minute)}); err != nil || len(late) != 0 {
		t.Errorf("OrderClaimDue from after DueBy = %d orders, %v; want none", len(late), err)
	}

	// FromID: many orders share one deadline (a flash sale); a claim comes
	// back in id order, and one from (that deadline, an id) reads on after
	// that id, then on to the later deadlines.
	flash := base.Add(20 * time.Minute)
	var ids []int64
	for i := range 7 {
		ids = append(ids, mustCreate(t, s, orderNo("CF", i), flash, base).ID)
	}
	later := mustCreate(t, s, orderNo("CF", 7), flash.Add(time.Second), base)
	claim := func(from time.Time, fromID int64, limit int) []int64 {
		t.Helper()
		due, err := s.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: flash.Add(time.Minute), Flows: []string{"checkout"},
			Limit: limit, From: from, FromID: fromID})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, o := range due {
			got = append(got, o.ID)
		}
		return got
	}
	if got, want := claim(flash, 0, 3), ids[:3]; !slices.Equal(got, want) {
		t.Errorf("OrderClaimDue from the flash deadline = %v, want %v (by id)", got, want)
	}
	if got, want := claim(flash, ids[2], 3), ids[3:6]; !slices.Equal(got, want) {
		t.Errorf("OrderClaimDue from the flash deadline after id %d = %v, want %v", ids[2], got, want)
	}
	if got, want := claim(flash, ids[5], 3), []int64{ids[6], later.ID}; !slices.Equal(got, want) {
		t.Errorf("OrderClaimDue from the flash deadline after id %d = %v, want %v, then the later deadline", ids[5], got, want)
	}
	if got := claim(flash.Add(time.Second), later.ID, 3); len(got) != 0 {
		t.Errorf("OrderClaimDue after the last = %v, want none", got)
	}
}

// testOrderClaimDueConcurrent runs several claimers the way the deadline
// engine does: claim in a transaction, plan, apply. Every order must move
// exactly once. A claimer that finds nothing stops only once nothing is
// due: a claim may come back empty while other claimers hold every due
// row it reaches (SKIP LOCKED), and under load the others may then be the
// ones that stop, as the engine's next pass would pick up what is left.
func testOrderClaimDueConcurrent(t *testing.T, s lapse.Store) {
	const n = 300
	for i := range n {
		mustCreate(t, s, orderNo("CC", i), base.Add(time.Duration(i)*time.Millisecond), base)
	}
	now := base.Add(time.Hour)
	giveUp := time.Now().Add(30 * time.Second)
	var mu sync.Mutex
	moved := map[int64]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				var applied []int64
				err := s.Tx(ctxT(t), func(tx lapse.Store) error {
					due, err := tx.OrderClaimDue(ctxT(t), &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{"checkout"}, Limit: 25})
					if err != nil {
						return err
					}
					var ps []*lapse.OrderTransitionParams
					for _, o := range due {
						p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredByTimer, Deadline: true})
						if err != nil {
							return err
						}
						ps = append(ps, p)
					}
					applied, err = tx.OrderTransitionMany(ctxT(t), ps)
					return err
				})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(applied) == 0 {
					left, err := s.OrderCountDue(ctxT(t), now)
					if err != nil || left == 0 || time.Now().After(giveUp) {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, id := range applied {
					moved[id]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(moved) != n {
		t.Errorf("%d orders moved, want %d", len(moved), n)
	}
	for id, c := range moved {
		if c != 1 {
			t.Errorf("order %d moved %d times", id, c)
		}
	}
	if left, _ := s.OrderCountDue(ctxT(t), now); left != 0 {
		t.Errorf("%d orders still due", left)
	}
}

func testOrderNextDeadline(t *testing.T, s lapse.Store) {
	if _, ok, err := s.OrderNextDeadline(ctxT(t), []string{"checkout"}, time.Time{}); ok || err != nil {
		t.Errorf("OrderNextDeadline on an empty store = %v, %v", ok, err)
	}
	o := mustCreate(t, s, "N-1", base.Add(3*time.Minute), base)
	o2 := mustCreate(t, s, "N-2", base.Add(7*time.Minute), base)
	deadlineMin := func(when string, ids []int64, want time.Duration) { // want 0: none
		t.Helper()
		got, ok, err := s.OrderDeadlineMin(ctxT(t), ids)
		if err != nil || ok != (want != 0) || ok && !got.Equal(base.Add(want)) {
			t.Errorf("%s: OrderDeadlineMin(%v) = %v, %v, %v; want +%v", when, ids, got, ok, err, want)
		}
	}
	deadlineMin("both", []int64{o2.ID, o.ID}, 3*time.Minute)
	deadlineMin("N-2", []int64{o2.ID}, 7*time.Minute)
	deadlineMin("none named", nil, 0)
	deadlineMin("no such order", []int64{o2.ID + 1000}, 0)
	next, ok, err := s.OrderNextDeadline(ctxT(t), []string{"checkout"}, time.Time{})
	if err != nil || !ok || !next.Equal(base.Add(3*time.Minute)) {
		t.Errorf("OrderNextDeadline = %v, %v, %v; want +3m", next, ok, err)
	}
	if _, ok, _ := s.OrderNextDeadline(ctxT(t), []string{"groupbuy"}, time.Time{}); ok {
		t.Error("OrderNextDeadline of another flow found one")
	}
	// From a time on: the deadline at it counts, those before do not.
	for _, c := range []struct {
		from time.Duration
		want time.Duration // 0: none
	}{{3 * time.Minute, 3 * time.Minute}, {3*time.Minute + time.Microsecond, 7 * time.Minute}, {7 * time.Minute, 7 * time.Minute},
		{7*time.Minute + time.Microsecond, 0}} {
		next, ok, err := s.OrderNextDeadline(ctxT(t), []string{"checkout"}, base.Add(c.from))
		if err != nil || ok != (c.want != 0) || ok && !next.Equal(base.Add(c.want)) {
			t.Errorf("OrderNextDeadline from +%v = %v, %v, %v; want +%v", c.from, next, ok, err, c.want)
		}
	}
	if _, err := s.OrderTransition(ctxT(t), plan(t, o, flows.Cancel, base)); err != nil {
		t.Fatal(err)
	}
	next, _, _ = s.OrderNextDeadline(ctxT(t), []string{"checkout"}, time.Time{})
	if !next.Equal(base.Add(7 * time.Minute)) {
		t.Errorf("OrderNextDeadline after closing N-1 = %v, want +7m", next)
	}
	deadlineMin("N-1 closed", []int64{o.ID}, 0)
	deadlineMin("N-1 closed, N-2", []int64{o.ID, o2.ID}, 7*time.Minute)
	for _, c := range []struct {
		at   time.Duration
		want int64
	}{{0, 0}, {7 * time.Minute, 1}, {time.Hour, 1}} {
		if n, err := s.OrderCountDue(ctxT(t), base.Add(c.at)); err != nil || n != c.want {
			t.Errorf("OrderCountDue(+%v) = %d, %v; want %d", c.at, n, err, c.want)
		}
	}
}

func testTxRollback(t *testing.T, s lapse.Store) {
	boom := errors.New("boom")
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctxT(t), newOrder("R-1", base.Add(time.Minute), base)); err != nil {
			return err
		}
		// Reads inside the transaction see its writes.
		if _, err := tx.OrderGet(ctxT(t), "R-1"); err != nil {
			return err
		}
		// A nested Tx that succeeds keeps its writes for the outer one,
		// which rolls them back with its own.
		if err := tx.Tx(ctxT(t), func(tx lapse.Store) error {
			_, _, err := tx.OrderCreate(ctxT(t), newOrder("R-2", base.Add(time.Minute), base))
			return err
		}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx returned %v, want fn's error", err)
	}
	for _, no := range []string{"R-1", "R-2"} {
		if _, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s exists after rollback: %v", no, err)
		}
	}
	if err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		_, _, err := tx.OrderCreate(ctxT(t), newOrder("R-3", base.Add(time.Minute), base))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, "R-3")
	if err := s.Ping(ctxT(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
