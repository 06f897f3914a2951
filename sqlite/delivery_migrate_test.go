package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// TestMigrateDeliveryChainIndex upgrades a database with deliveries, from
// before migration 0024, to the chain index on (order_id, subscriber, id):
// the order's deliveries read back as before, and a new delivery chains
// after the order's last one to its subscriber, found by one seek of the
// new index.
func TestMigrateDeliveryChainIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	subs := []string{"stock", "webhook"}

	// A database as migrations before 0024 left it, with an order whose
	// creation was delivered to both subscribers.
	s := openStore(t, path)
	created := newOrder("MC-1", base.Add(time.Minute))
	created.Outbox[0].Subscribers = subs
	o, _, err := s.OrderCreate(ctx, created)
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.DeliveryList(ctx, o.ID)
	if err != nil || len(before) != 2 {
		t.Fatalf("DeliveryList = %d deliveries, %v; want 2", len(before), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{`DROP INDEX deliveries_chain_idx`, `CREATE INDEX deliveries_order_idx ON deliveries (order_id, id)`,
		`DELETE FROM lapse_migrations WHERE version IN (24, 25)`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}

	s = openStore(t, path) // migrates
	var indexes []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_index_list('deliveries') WHERE origin = 'c' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if !slices.Contains(indexes, "deliveries_chain_idx") || slices.Contains(indexes, "deliveries_order_idx") {
		t.Errorf("indexes of deliveries after the upgrade: %v; want deliveries_chain_idx instead of deliveries_order_idx", indexes)
	}
	after, err := s.DeliveryList(ctx, o.ID)
	if err != nil || len(after) != 2 || after[0].ID != before[0].ID || after[1].ID != before[1].ID {
		t.Errorf("DeliveryList after the upgrade = %d deliveries, %v; want the 2 from before, by id", len(after), err)
	}
	plan := queryPlan(t, s, sqlite.DeliveryInsert(1), "e", o.ID, o.OrderNo, "t", "stock", int64(0))
	if !strings.Contains(plan, "deliveries_chain_idx (order_id=? AND subscriber=?)") {
		t.Errorf("delivery insert plan is %q; want its chain looked up in deliveries_chain_idx by order and subscriber", plan)
	}

	p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: base.Add(time.Minute), FiredBy: lapse.FiredByTimer, Deadline: true})
	if err != nil {
		t.Fatal(err)
	}
	for k := range p.Outbox {
		p.Outbox[k].Subscribers = subs
	}
	if moved, err := s.OrderTransitionMany(ctx, []*lapse.OrderTransitionParams{p}); err != nil || len(moved) != 1 {
		t.Fatalf("OrderTransitionMany = %v, %v", moved, err)
	}
	ds, err := s.DeliveryList(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	for _, d := range before {
		last[d.Subscriber] = d.ID
	}
	var chained int
	for _, d := range ds[2:] {
		var after sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT after_id FROM deliveries WHERE id = ?`, d.ID).Scan(&after); err != nil {
			t.Fatal(err)
		}
		if after.Int64 != last[d.Subscriber] {
			t.Errorf("close's delivery %d to %s is after %v, want after %d", d.ID, d.Subscriber, after, last[d.Subscriber])
		}
		chained++
	}
	if chained != len(subs)*len(p.Outbox) {
		t.Errorf("the close wrote %d deliveries, want %d", chained, len(subs)*len(p.Outbox))
	}
}
