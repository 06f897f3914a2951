package storetest

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// visit is a visit of card id at base, under no key.
func visit(id int64) *lapse.CardUseParams { return &lapse.CardUseParams{CardID: id, At: base} }

// testCardVisit checks the visits CardUse records: each with its key and
// the card's count once it was counted, found again by the key, which names
// one visit. A visit refused for any reason writes nothing and leaves its
// key free.
func testCardVisit(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "CV-1", base.Add(time.Hour), base)
	cards, _, err := s.CardIssue(ctxT(t), newCards(o, 3))
	if err != nil {
		t.Fatal(err)
	}
	count, plain := cards[0], cards[1]
	used := func(c *lapse.Card) int {
		t.Helper()
		got, err := s.CardGet(ctxT(t), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Used
	}
	if c, err := s.CardUse(ctxT(t), visit(count.ID)); err != nil || c.Used != 1 {
		t.Fatalf("CardUse without a key = %+v, %v", c, err)
	}
	at := base.Add(time.Minute)
	if c, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: count.ID, Key: "k-1", At: at}); err != nil || c.Used != 2 {
		t.Fatalf("CardUse under k-1 = %+v, %v", c, err)
	}
	v, err := s.CardVisitGet(ctxT(t), "k-1")
	if err != nil || v.ID == 0 || v.CardID != count.ID || v.Key != "k-1" || v.Used != 2 || !v.At.Equal(at) || v.At.Location() != time.UTC {
		t.Errorf("CardVisitGet(k-1) = %+v, %v; want card %d, used 2, at %v", v, err, count.ID, at)
	}
	for _, c := range []*lapse.Card{count, plain} {
		if _, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: c.ID, Key: "k-1", At: at}); !errors.Is(err, lapse.ErrCardVisitExists) {
			t.Errorf("CardUse of card %d under the key of a visit = %v, want ErrCardVisitExists", c.ID, err)
		}
	}
	if a, b := used(count), used(plain); a != 2 || b != 0 {
		t.Errorf("after the refused visits the cards are used %d and %d; want 2 and 0", a, b)
	}
	if _, err := s.CardVisitGet(ctxT(t), "k-none"); !errors.Is(err, lapse.ErrCardVisitNotFound) {
		t.Errorf("CardVisitGet of a key no visit has = %v, want ErrCardVisitNotFound", err)
	}
	// Keys are told apart byte for byte, and as long as a store keeps them.
	long := strings.Repeat("k", 255)
	for _, key := range []string{"K-1", long} {
		if _, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: plain.ID, Key: key, At: at}); err != nil {
			t.Errorf("CardUse under %.10s… = %v", key, err)
		}
		if v, err := s.CardVisitGet(ctxT(t), key); err != nil || v.Key != key || v.CardID != plain.ID {
			t.Errorf("CardVisitGet(%.10s…) = %+v, %v", key, v, err)
		}
	}

	// Refused visits leave their keys free.
	if _, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: count.ID, Key: "k-2", At: at}); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		p    *lapse.CardUseParams
		want error
	}{
		{"used up", &lapse.CardUseParams{CardID: count.ID, Key: "k-3", At: at}, lapse.ErrStale},
		{"missing", &lapse.CardUseParams{CardID: plain.ID + 100, Key: "k-4", At: at}, lapse.ErrCardNotFound},
	}
	for _, r := range refused {
		if _, err := s.CardUse(ctxT(t), r.p); !errors.Is(err, r.want) {
			t.Errorf("CardUse of a card %s = %v, want %v", r.name, err, r.want)
		}
		if _, err := s.CardVisitGet(ctxT(t), r.p.Key); !errors.Is(err, lapse.ErrCardVisitNotFound) {
			t.Errorf("the visit of a card %s was recorded: %v", r.name, err)
		}
	}
	if _, err := s.CardRevoke(ctxT(t), o.ID, at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: plain.ID, Key: "k-5", At: at}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("CardUse of a voided card = %v, want ErrStale", err)
	}
	if _, err := s.CardVisitGet(ctxT(t), "k-5"); !errors.Is(err, lapse.ErrCardVisitNotFound) {
		t.Errorf("the visit of a voided card was recorded: %v", err)
	}
	if a, b := used(count), used(plain); a != 3 || b != 2 {
		t.Errorf("cards used %d and %d; want 3 and 2", a, b)
	}
	// A refused visit's key is free for the next.
	other := mustCreate(t, s, "CV-2", base.Add(time.Hour), base)
	more, _, err := s.CardIssue(ctxT(t), newCards(other, 3))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k-3", "k-4", "k-5"} {
		if _, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: more[1].ID, Key: key, At: at}); err != nil {
			t.Errorf("CardUse under %s, the key of a refused visit = %v", key, err)
		}
	}
}

// testCardVisitConcurrent: visits under one key race, of one card and of
// another: exactly one is counted, and every other is refused, counting
// nothing.
func testCardVisitConcurrent(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "CV-C", base.Add(time.Hour), base)
	cards, _, err := s.CardIssue(ctxT(t), newCards(o, 20))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var counted atomic.Int32
	for i := range 12 {
		wg.Go(func() {
			_, err := s.CardUse(ctxT(t), &lapse.CardUseParams{CardID: cards[i%2].ID, Key: "race", At: base})
			switch {
			case err == nil:
				counted.Add(1)
			case !errors.Is(err, lapse.ErrCardVisitExists):
				t.Errorf("CardUse: %v", err)
			}
		})
	}
	wg.Wait()
	list, err := s.CardList(ctxT(t), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	v, verr := s.CardVisitGet(ctxT(t), "race")
	if counted.Load() != 1 || list[0].Used+list[1].Used != 1 || verr != nil || v.Used != 1 {
		t.Errorf("%d of 12 visits under one key counted, cards used %d and %d, visit %+v, %v; want exactly 1",
			counted.Load(), list[0].Used, list[1].Used, v, verr)
	}
}
