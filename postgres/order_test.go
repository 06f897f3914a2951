package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

func TestOrderCreateManyConflict(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

	// The same order_no twice in one batch.
	twice := []*lapse.OrderCreateParams{createParams("CM-1", &now, now), createParams("CM-2", &now, now), createParams("CM-1", &now, now)}
	if err := s.OrderCreateMany(ctx, twice); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("a batch with a repeated order_no = %v, want a conflict", err)
	}
	if _, err := s.OrderGet(ctx, "CM-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("a refused batch wrote CM-2: %v", err)
	}

	// A clash in a later chunk of COPY undoes the earlier ones.
	var big []*lapse.OrderCreateParams
	for i := range 10_001 {
		big = append(big, createParams(fmt.Sprintf("CB-%05d", i), &now, now))
	}
	big[len(big)-1] = createParams("CM-2", &now, now)
	if err := s.OrderCreateMany(ctx, []*lapse.OrderCreateParams{createParams("CM-2", &now, now)}); err != nil {
		t.Fatal(err)
	}
	if err := s.OrderCreateMany(ctx, big); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("a big batch ending in an existing order_no = %v, want a conflict", err)
	}
	if _, err := s.OrderGet(ctx, "CB-00000"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("a refused batch wrote its first chunk: %v", err)
	}

	// Inside Tx, the batch joins the caller's transaction.
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if err := tx.OrderCreateMany(ctx, []*lapse.OrderCreateParams{createParams("CM-3", &now, now)}); err != nil {
			return err
		}
		_, err := tx.OrderGet(ctx, "CM-3")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := s.OrderGet(ctx, "CM-3"); err != nil || o.Version != 1 || o.State != flows.Unpaid {
		t.Errorf("CM-3 = %+v, %v", o, err)
	}
	if err := s.OrderCreateMany(ctx, nil); err != nil {
		t.Errorf("OrderCreateMany(nil) = %v", err)
	}
}

func TestOrderTransitionManyRepeated(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	o, _, err := s.OrderCreate(ctx, createParams("TM-1", &now, now))
	if err != nil {
		t.Fatal(err)
	}
	closeIt := func() *lapse.OrderTransitionParams {
		p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredByTimer, Deadline: true})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ids, err := s.OrderTransitionMany(ctx, []*lapse.OrderTransitionParams{closeIt(), closeIt()})
	if err != nil || !slices.Equal(ids, []int64{o.ID}) {
		t.Fatalf("OrderTransitionMany of one order twice = %v, %v; want it once", ids, err)
	}
	trs, _ := s.TransitionList(ctx, o.ID)
	evs, _ := s.OutboxList(ctx, o.ID)
	if len(trs) != 2 || len(evs) != 2 {
		t.Errorf("%d log rows and %d events, want 2 and 2", len(trs), len(evs))
	}
}

func TestMetadataBytes(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := createParams("MD-1", nil, now)
	p.Order.Metadata = []byte("{ \"z\":1,\n\t\"a\" : \"\\u00e9\", \"z\": 2 }")
	p.Order.Items = []lapse.Item{}
	if _, _, err := s.OrderCreate(ctx, p); err != nil {
		t.Fatal(err)
	}
	o, err := s.OrderGet(ctx, "MD-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Metadata) != string(p.Order.Metadata) || o.Items != nil || o.DeadlineAt != nil {
		t.Errorf("metadata %q items %#v deadline %v; want the bytes sent, nil items, no deadline", o.Metadata, o.Items, o.DeadlineAt)
	}
	evs, err := s.OutboxList(ctx, o.ID)
	if err != nil || len(evs) != 1 || evs[0].ID != p.Outbox[0].ID || string(evs[0].Payload) != string(p.Outbox[0].Payload) {
		t.Errorf("outbox = %+v, %v", evs, err)
	}
}
