package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// TestOrderTransitionManyChunks applies more transitions than one statement
// holds, some stale, each with two events for two subscribers: every order
// that moved has its log row, its events in order and its deliveries
// chained, the deliveries of its second event after those of its first and
// those of its creation; the stale ones have nothing new.
func TestOrderTransitionManyChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	subs := []string{"stock", "webhook"}
	n := 2*sqlite.BatchRows + 7
	deadline := base.Add(time.Minute)
	creates := make([]*lapse.OrderCreateParams, n)
	for i := range creates {
		creates[i] = newOrder(fmt.Sprintf("TM-%04d", i), deadline)
		creates[i].Outbox[0].Subscribers = subs
	}
	if err := s.OrderCreateMany(ctx, creates); err != nil {
		t.Fatal(err)
	}
	checkout := flows.Checkout()
	var ps []*lapse.OrderTransitionParams
	var want []int64
	for i := range n {
		o, err := s.OrderGet(ctx, fmt.Sprintf("TM-%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		p, err := checkout.Plan(o, lapse.Firing{Event: flows.Timeout, Now: deadline, FiredBy: lapse.FiredByTimer, Actor: "test", Deadline: true})
		if err != nil {
			t.Fatal(err)
		}
		second := lapse.NewOutboxEvent("order.test", o, p)
		p.Outbox = append(p.Outbox, second)
		for k := range p.Outbox {
			p.Outbox[k].Subscribers = subs
		}
		if i%7 == 3 { // planned against a version the order no longer has
			p.FromVersion = 0
		} else {
			want = append(want, o.ID)
		}
		ps = append(ps, p)
	}
	got, err := s.OrderTransitionMany(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("OrderTransitionMany moved %d orders %v, want %d in the order given", len(got), got, len(want))
	}

	db := s.ReaderDB()
	for i, p := range ps {
		moved := i%7 != 3
		o, err := s.OrderGet(ctx, fmt.Sprintf("TM-%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		log, err := s.TransitionList(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.OutboxList(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !moved {
			if o.State != flows.Unpaid || o.Version != 1 || len(log) != 1 || len(evs) != 1 {
				t.Errorf("%s, stale: %s v%d with %d log rows and %d events; want unpaid v1, 1, 1", o.OrderNo, o.State, o.Version, len(log), len(evs))
			}
			continue
		}
		if o.State != flows.Closed || o.Version != 2 || len(log) != 2 || log[1].Version != 2 || log[1].ToState != flows.Closed {
			t.Errorf("%s: %s v%d with log %+v; want closed v2, logged", o.OrderNo, o.State, o.Version, log)
		}
		if len(evs) != 3 || evs[1].ID != p.Outbox[0].ID || evs[2].ID != p.Outbox[1].ID {
			t.Errorf("%s: %d events, want its creation, then the close's two in order", o.OrderNo, len(evs))
		}
		for _, sub := range subs {
			rows, err := db.QueryContext(ctx, `SELECT id, event_id, coalesce(after_id, 0) FROM deliveries
				WHERE order_id = ? AND subscriber = ? ORDER BY id`, o.ID, sub)
			if err != nil {
				t.Fatal(err)
			}
			var chain []string
			var last int64
			for rows.Next() {
				var id, after int64
				var ev string
				if err := rows.Scan(&id, &ev, &after); err != nil {
					t.Fatal(err)
				}
				if after != last {
					t.Errorf("%s to %s: delivery %d after %d, want after %d", o.OrderNo, sub, id, after, last)
				}
				chain, last = append(chain, ev), id
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if wantChain := []string{evs[0].ID, evs[1].ID, evs[2].ID}; !slices.Equal(chain, wantChain) {
				t.Errorf("%s to %s: deliveries of %v, want %v", o.OrderNo, sub, chain, wantChain)
			}
		}
	}
}

// TestOrderTransitionManyRefuses: an order given twice is refused, and an
// event id that exists is lapse.ErrEventExists naming it; either way
// nothing is written.
func TestOrderTransitionManyRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	deadline := base.Add(time.Minute)
	var ps []*lapse.OrderTransitionParams
	for i := range sqlite.BatchRows + 3 {
		o, _, err := s.OrderCreate(ctx, newOrder(fmt.Sprintf("TR-%04d", i), deadline))
		if err != nil {
			t.Fatal(err)
		}
		p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: deadline, FiredBy: lapse.FiredByTimer, Deadline: true})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	unchanged := func(what string) {
		t.Helper()
		var closed, events int
		if err := s.ReaderDB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM orders WHERE state <> 'UNPAID'),
			(SELECT count(*) FROM outbox)`).Scan(&closed, &events); err != nil {
			t.Fatal(err)
		}
		if closed != 0 || events != len(ps) {
			t.Errorf("%s wrote: %d orders moved, %d events; want 0 and %d", what, closed, events, len(ps))
		}
	}

	twice := append(slices.Clone(ps), ps[5])
	if _, err := s.OrderTransitionMany(ctx, twice); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("OrderTransitionMany with an order twice = %v, want EINVALID", err)
	}
	unchanged("an order twice")

	taken := slices.Clone(ps)
	clash := *ps[len(ps)-2]
	clash.Outbox = slices.Clone(clash.Outbox)
	clash.Outbox[0].ID = ps[1].Outbox[0].ID
	taken[len(ps)-2] = &clash
	_, err := s.OrderTransitionMany(ctx, taken)
	if !errors.Is(err, lapse.ErrEventExists) || !strings.Contains(err.Error(), ps[1].Outbox[0].ID) {
		t.Errorf("OrderTransitionMany with an event id twice = %v, want ErrEventExists naming %s", err, ps[1].Outbox[0].ID)
	}
	unchanged("an event id twice")
}
