package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// newMember builds a member of the group o joining at base+1m, its charge
// keyed by group and user.
func newMember(o *lapse.Order, user string) *lapse.GroupMember {
	return &lapse.GroupMember{OrderID: o.ID, GroupID: o.OrderNo, UserID: user, Provider: "sandbox", Method: "tok-" + user,
		Amount: 999, Currency: "CNY", Key: o.OrderNo + "/" + user, JoinedAt: base.Add(time.Minute)}
}

// memberString prints a member with its times, which %+v would print as a
// pointer.
func memberString(m *lapse.GroupMember) string {
	charged := "<nil>"
	if m.ChargedAt != nil {
		charged = m.ChargedAt.String()
	}
	c := *m
	c.ChargedAt = nil
	return fmt.Sprintf("%+v charged_at=%s", c, charged)
}

func testGroupMember(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "GM-1", base.Add(time.Hour), base)
	in := newMember(o, "u1")
	m1, created, err := s.GroupMemberAdd(ctxT(t), in)
	if err != nil || !created {
		t.Fatalf("GroupMemberAdd = %v, %v", created, err)
	}
	want := *in
	want.ID, want.Status, want.UpdatedAt = m1.ID, lapse.ChargePending, in.JoinedAt
	if m1.ID == 0 || memberString(m1) != memberString(&want) {
		t.Errorf("GroupMemberAdd returned\n%s\nwant\n%s", memberString(m1), memberString(&want))
	}

	// The same user again, under another key: nothing written, the first
	// member returned.
	again := newMember(o, "u1")
	again.Method, again.Key, again.Amount = "tok-other", "GM-1/u1-again", 1
	dup, created, err := s.GroupMemberAdd(ctxT(t), again)
	if err != nil || created || memberString(dup) != memberString(m1) {
		t.Errorf("GroupMemberAdd again = %+v, %v, %v; want the first member, not created", dup, created, err)
	}
	// Another user under a key already taken is refused.
	clash := newMember(o, "u9")
	clash.Key = in.Key
	if _, _, err := s.GroupMemberAdd(ctxT(t), clash); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("GroupMemberAdd with a taken key = %v, want an ECONFLICT error", err)
	}
	m2, created, err := s.GroupMemberAdd(ctxT(t), newMember(o, "u2"))
	if err != nil || !created || m2.ID <= m1.ID {
		t.Fatalf("GroupMemberAdd u2 = %+v, %v, %v", m2, created, err)
	}
	// A user joins each group once, not once overall.
	o2 := mustCreate(t, s, "GM-2", base.Add(time.Hour), base)
	if m, created, err := s.GroupMemberAdd(ctxT(t), newMember(o2, "u1")); err != nil || !created || m.OrderID != o2.ID || m.GroupID != "GM-2" {
		t.Errorf("GroupMemberAdd of u1 to another group = %+v, %v, %v", m, created, err)
	}
	list, err := s.GroupMemberList(ctxT(t), o.ID)
	if err != nil || len(list) != 2 || list[0].ID != m1.ID || list[1].ID != m2.ID {
		t.Fatalf("GroupMemberList = %+v, %v; want u1, u2", list, err)
	}

	// A charge that fails, is retried, and succeeds.
	update := func(from, to lapse.ChargeStatus, attempt bool, txn, msg string, at time.Time) (*lapse.GroupMember, error) {
		p := &lapse.GroupMemberUpdateParams{ID: m1.ID, From: from, To: to, Attempt: attempt, TxnID: txn, Error: msg, At: at}
		if to == lapse.ChargeCharged {
			charged := at.Add(-time.Second) // the provider's time, which the store keeps as given
			p.ChargedAt = &charged
		}
		return s.GroupMemberUpdate(ctxT(t), p)
	}
	t1, t2, t3, t4 := base.Add(2*time.Minute), base.Add(3*time.Minute), base.Add(4*time.Minute), base.Add(5*time.Minute)
	m, err := update(lapse.ChargePending, lapse.ChargeCharging, true, "", "", t1)
	if err != nil || m.Status != lapse.ChargeCharging || m.Attempts != 1 || m.TxnID != "" || m.LastError != "" ||
		!m.UpdatedAt.Equal(t1) || m.ChargedAt != nil || !m.JoinedAt.Equal(in.JoinedAt) {
		t.Fatalf("claim = %s, %v", memberString(m), err)
	}
	m, err = update(lapse.ChargeCharging, lapse.ChargeFailed, false, "txn-1", "declined", t2)
	if err != nil || m.Status != lapse.ChargeFailed || m.Attempts != 1 || m.TxnID != "txn-1" || m.LastError != "declined" ||
		!m.UpdatedAt.Equal(t2) || m.ChargedAt != nil {
		t.Fatalf("fail = %s, %v", memberString(m), err)
	}
	m, err = update(lapse.ChargeFailed, lapse.ChargeCharging, true, "", "", t3)
	if err != nil || m.Attempts != 2 || m.TxnID != "txn-1" || m.LastError != "" || !m.UpdatedAt.Equal(t3) {
		t.Fatalf("second claim = %s, %v; want 2 attempts, txn id kept, error cleared", memberString(m), err)
	}
	m, err = update(lapse.ChargeCharging, lapse.ChargeCharged, false, "", "", t4)
	if charged := t4.Add(-time.Second); err != nil || m.Status != lapse.ChargeCharged || m.Attempts != 2 || m.TxnID != "txn-1" ||
		!m.UpdatedAt.Equal(t4) || !timeEq(m.ChargedAt, &charged) {
		t.Fatalf("charged = %s, %v", memberString(m), err)
	}
	// ChargedAt is kept unless set.
	kept := *m.ChargedAt
	if m, err = update(lapse.ChargeCharged, lapse.ChargeFailed, false, "", "", t4); err != nil || !timeEq(m.ChargedAt, &kept) {
		t.Fatalf("an update without ChargedAt = %s, %v; want charged_at kept", memberString(m), err)
	}
	if m, err = update(lapse.ChargeFailed, lapse.ChargeCharged, false, "", "", t4); err != nil {
		t.Fatal(err)
	}
	if _, err := update(lapse.ChargeCharging, lapse.ChargeFailed, true, "txn-2", "late", base.Add(time.Hour)); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("GroupMemberUpdate from a status it left = %v, want ErrStale", err)
	}
	if list, err := s.GroupMemberList(ctxT(t), o.ID); err != nil || len(list) != 2 || memberString(list[0]) != memberString(m) {
		t.Errorf("after a stale update, GroupMemberList = %+v, %v; want u1 unchanged %s", list, err, memberString(m))
	}
	if _, err := s.GroupMemberUpdate(ctxT(t), &lapse.GroupMemberUpdateParams{ID: m2.ID + 100, From: lapse.ChargePending,
		To: lapse.ChargeCharging, At: t1}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("GroupMemberUpdate of a missing member = %v, want ErrStale", err)
	}

	// A member is found by its charge's key, as its provider knows it.
	if got, err := s.GroupMemberGet(ctxT(t), in.Key); err != nil || memberString(got) != memberString(m) {
		t.Errorf("GroupMemberGet(%q) = %+v, %v; want %s", in.Key, got, err, memberString(m))
	}
	if got, err := s.GroupMemberGet(ctxT(t), "GM-1/nobody"); !errors.Is(err, lapse.ErrGroupMemberNotFound) {
		t.Errorf("GroupMemberGet of an unknown key = %+v, %v; want ErrGroupMemberNotFound", got, err)
	}

	// A review goes with its change, or not at all; a change to the same
	// status writes its fields and its review.
	t5 := base.Add(6 * time.Minute)
	review := &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "the provider reports another charge", CreatedAt: t5}
	if _, err := s.GroupMemberUpdate(ctxT(t), &lapse.GroupMemberUpdateParams{ID: m2.ID, From: lapse.ChargeCharging,
		To: lapse.ChargeCharging, At: t5, Review: review}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("a stale GroupMemberUpdate with a review = %v, want ErrStale", err)
	}
	if rs, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID}); err != nil || len(rs) != 0 {
		t.Fatalf("reviews after a stale update = %+v, %v; want none", rs, err)
	}
	touched, err := s.GroupMemberUpdate(ctxT(t), &lapse.GroupMemberUpdateParams{ID: m2.ID, From: lapse.ChargePending,
		To: lapse.ChargePending, Error: "held", At: t5, Review: review})
	if err != nil || touched.Status != lapse.ChargePending || touched.Attempts != 0 || touched.LastError != "held" || !touched.UpdatedAt.Equal(t5) {
		t.Fatalf("GroupMemberUpdate to the same status = %s, %v", memberString(touched), err)
	}
	rs, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || len(rs) != 1 || rs[0].OrderNo != o.OrderNo || rs[0].Reason != review.Reason || !rs[0].CreatedAt.Equal(t5) ||
		rs[0].DeliveryID != 0 || rs[0].ResolvedAt != nil {
		t.Errorf("reviews after an update with one = %+v, %v", rs, err)
	}
}

func testGroupMemberConcurrent(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "GM-C", base.Add(time.Hour), base)
	var wg sync.WaitGroup
	var created atomic.Int32
	ids := make([]int64, 8)
	for i := range ids {
		wg.Go(func() {
			m, c, err := s.GroupMemberAdd(ctxT(t), newMember(o, "u1"))
			if err != nil {
				t.Errorf("GroupMemberAdd: %v", err)
				return
			}
			if c {
				created.Add(1)
			}
			ids[i] = m.ID
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d concurrent adders of one member created, want exactly 1", created.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Errorf("adders saw members %v, want one", ids)
			break
		}
	}
	if list, err := s.GroupMemberList(ctxT(t), o.ID); err != nil || len(list) != 1 {
		t.Errorf("GroupMemberList = %d members, %v; want 1", len(list), err)
	}
}

// testGroupMemberInTx checks that a member added in a transaction that rolls
// back is gone, and that the transaction saw it.
func testGroupMemberInTx(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "GM-T", base.Add(time.Hour), base)
	boom := errors.New("boom")
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, _, err := tx.GroupMemberAdd(ctxT(t), newMember(o, "u1")); err != nil {
			return err
		}
		if list, err := tx.GroupMemberList(ctxT(t), o.ID); err != nil || len(list) != 1 {
			t.Errorf("GroupMemberList inside Tx = %d members, %v; want the one added", len(list), err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want fn's error", err)
	}
	if list, err := s.GroupMemberList(ctxT(t), o.ID); err != nil || len(list) != 0 {
		t.Errorf("after rollback GroupMemberList = %d members, %v; want none", len(list), err)
	}
	// The key and user are free again.
	if _, created, err := s.GroupMemberAdd(ctxT(t), newMember(o, "u1")); err != nil || !created {
		t.Errorf("GroupMemberAdd after rollback = %v, %v", created, err)
	}
}

// newCards builds the bundle of o issued at base+1m: a count card of visits
// visits and a card without a count.
func newCards(o *lapse.Order, visits int) *lapse.CardIssueParams {
	at := base.Add(time.Minute)
	return &lapse.CardIssueParams{OrderID: o.ID, Cards: []*lapse.Card{
		{OrderID: o.ID, OrderNo: o.OrderNo, UserID: o.UserID, Product: "gym-10", Visits: visits, IssuedAt: at},
		{OrderID: o.ID, OrderNo: o.OrderNo, UserID: o.UserID, Product: "locker", IssuedAt: at},
	}}
}

// cardString prints a card with its times, which %+v would print as a
// pointer.
func cardString(c *lapse.Card) string {
	revoked := "<nil>"
	if c.RevokedAt != nil {
		revoked = c.RevokedAt.String()
	}
	x := *c
	x.RevokedAt = nil
	return fmt.Sprintf("%+v revoked_at=%s", x, revoked)
}

func cardsString(cs []*lapse.Card) string {
	out := ""
	for _, c := range cs {
		out += "\n\t" + cardString(c)
	}
	return out
}

func testCard(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "CD-1", base.Add(time.Hour), base)
	other := mustCreate(t, s, "CD-2", base.Add(time.Hour), base)

	missing := newCards(o, 10)
	missing.OrderID = other.ID + 1000
	for _, c := range missing.Cards {
		c.OrderID = missing.OrderID
	}
	if _, _, err := s.CardIssue(ctxT(t), missing); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("CardIssue for a missing order = %v, want ErrOrderNotFound", err)
	}
	for _, id := range []int64{o.ID, other.ID} {
		if cs, err := s.CardList(ctxT(t), id); err != nil || len(cs) != 0 {
			t.Errorf("refused issues wrote cards of order %d: %s, %v", id, cardsString(cs), err)
		}
	}

	in := newCards(o, 10)
	in.Cards[0].Status = lapse.CardVoided // the store issues every card active
	cards, created, err := s.CardIssue(ctxT(t), in)
	if err != nil || !created || len(cards) != 2 {
		t.Fatalf("CardIssue = %s, %v, %v", cardsString(cards), created, err)
	}
	for i, c := range cards {
		want := *in.Cards[i]
		want.ID, want.Status = c.ID, lapse.CardActive
		if c.ID == 0 || cardString(c) != cardString(&want) {
			t.Errorf("issued card %d = %s\nwant %s", i, cardString(c), cardString(&want))
		}
	}
	if cards[1].ID <= cards[0].ID {
		t.Errorf("issued cards %d, %d: want them by id, in the order given", cards[0].ID, cards[1].ID)
	}
	again, created, err := s.CardIssue(ctxT(t), newCards(o, 99))
	if err != nil || created || cardsString(again) != cardsString(cards) {
		t.Errorf("CardIssue again = %s, %v, %v; want the first cards, not created", cardsString(again), created, err)
	}
	if list, err := s.CardList(ctxT(t), o.ID); err != nil || cardsString(list) != cardsString(cards) {
		t.Errorf("CardList = %s, %v; want %s", cardsString(list), err, cardsString(cards))
	}
	if c, err := s.CardGet(ctxT(t), cards[1].ID); err != nil || cardString(c) != cardString(cards[1]) {
		t.Errorf("CardGet = %+v, %v", c, err)
	}
	if _, err := s.CardGet(ctxT(t), cards[1].ID+100); !errors.Is(err, lapse.ErrCardNotFound) {
		t.Errorf("CardGet of a missing card = %v, want ErrCardNotFound", err)
	}

	count, plain := cards[0], cards[1]
	for i := range 3 {
		c, err := s.CardUse(ctxT(t), visit(count.ID))
		if err != nil || c.Used != i+1 || c.Status != lapse.CardActive {
			t.Fatalf("CardUse %d = %+v, %v", i+1, c, err)
		}
	}
	for i := range 12 { // a card without a count has no limit
		if c, err := s.CardUse(ctxT(t), visit(plain.ID)); err != nil || c.Used != i+1 {
			t.Fatalf("CardUse %d of a card without a count = %+v, %v", i+1, c, err)
		}
	}
	if _, err := s.CardUse(ctxT(t), visit(plain.ID+100)); !errors.Is(err, lapse.ErrCardNotFound) {
		t.Errorf("CardUse of a missing card = %v, want ErrCardNotFound", err)
	}

	at := base.Add(time.Hour)
	revoked, err := s.CardRevoke(ctxT(t), o.ID, at)
	if err != nil || len(revoked) != 2 {
		t.Fatalf("CardRevoke = %s, %v", cardsString(revoked), err)
	}
	wantRevoked := []struct {
		id             int64
		used, deducted int
	}{{count.ID, 3, 7}, {plain.ID, 12, 0}}
	for i, want := range wantRevoked {
		c := revoked[i]
		if c.ID != want.id || c.Status != lapse.CardVoided || c.Used != want.used || c.Deducted != want.deducted || !timeEq(c.RevokedAt, &at) {
			t.Errorf("revoked card %d = %s; want id %d voided at %v, used %d, deducted %d", i, cardString(c), want.id, at, want.used, want.deducted)
		}
	}
	if list, err := s.CardList(ctxT(t), o.ID); err != nil || cardsString(list) != cardsString(revoked) {
		t.Errorf("CardList after revoke = %s, %v; want %s", cardsString(list), err, cardsString(revoked))
	}
	if again, err := s.CardRevoke(ctxT(t), o.ID, at.Add(time.Minute)); err != nil || len(again) != 0 {
		t.Errorf("second CardRevoke = %s, %v; want none, no error", cardsString(again), err)
	}
	if _, err := s.CardUse(ctxT(t), visit(plain.ID)); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("CardUse of a voided card = %v, want ErrStale", err)
	}
	// An order whose cards were revoked gets no new ones.
	if again, created, err := s.CardIssue(ctxT(t), newCards(o, 10)); err != nil || created || cardsString(again) != cardsString(revoked) {
		t.Errorf("CardIssue after revoke = %s, %v, %v; want the voided cards, not created", cardsString(again), created, err)
	}
	if cs, err := s.CardRevoke(ctxT(t), other.ID+1000, at); err != nil || len(cs) != 0 {
		t.Errorf("CardRevoke of an order without cards = %s, %v; want none, no error", cardsString(cs), err)
	}

	// A count card stops at its visits; revoked then, it has nothing to deduct.
	small, _, err := s.CardIssue(ctxT(t), newCards(other, 2))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.CardUse(ctxT(t), visit(small[0].ID)); err != nil {
			t.Fatalf("CardUse: %v", err)
		}
	}
	if _, err := s.CardUse(ctxT(t), visit(small[0].ID)); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("CardUse of a used-up card = %v, want ErrStale", err)
	}
	if c, err := s.CardGet(ctxT(t), small[0].ID); err != nil || c.Used != 2 || c.Status != lapse.CardActive {
		t.Errorf("used-up card = %+v, %v; want used 2, active", c, err)
	}
	if cs, err := s.CardRevoke(ctxT(t), other.ID, at); err != nil || len(cs) != 2 || cs[0].Deducted != 0 || cs[0].Used != 2 {
		t.Errorf("CardRevoke of a used-up card = %s, %v; want it deducted 0", cardsString(cs), err)
	}
}

// testCardOrder checks the order cards come back in: issued in the order
// given, their ids following it, and listed and revoked by id.
func testCardOrder(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "CO-1", base.Add(time.Hour), base)
	p := &lapse.CardIssueParams{OrderID: o.ID}
	for _, product := range []string{"zeta", "alpha", "mid", "beta", "omega"} {
		p.Cards = append(p.Cards, &lapse.Card{OrderID: o.ID, OrderNo: o.OrderNo, UserID: o.UserID, Product: product, Visits: 3, IssuedAt: base})
	}
	issued, created, err := s.CardIssue(ctxT(t), p)
	if err != nil || !created || len(issued) != len(p.Cards) {
		t.Fatalf("CardIssue = %s, %v, %v", cardsString(issued), created, err)
	}
	for i, c := range issued {
		if c.Product != p.Cards[i].Product || i > 0 && c.ID <= issued[i-1].ID {
			t.Fatalf("issued %s; want the cards in the order given, ids increasing", cardsString(issued))
		}
	}
	// A use between them changes nothing of the order.
	if _, err := s.CardUse(ctxT(t), visit(issued[3].ID)); err != nil {
		t.Fatal(err)
	}
	if list, err := s.CardList(ctxT(t), o.ID); err != nil || len(list) != len(issued) {
		t.Fatalf("CardList = %s, %v", cardsString(list), err)
	} else {
		for i, c := range list {
			if c.ID != issued[i].ID {
				t.Errorf("CardList = %s; want them by id", cardsString(list))
				break
			}
		}
	}
	revoked, err := s.CardRevoke(ctxT(t), o.ID, base.Add(time.Hour))
	if err != nil || len(revoked) != len(issued) {
		t.Fatalf("CardRevoke = %s, %v", cardsString(revoked), err)
	}
	for i, c := range revoked {
		if c.ID != issued[i].ID || c.Status != lapse.CardVoided {
			t.Errorf("CardRevoke = %s; want every card, voided, by id", cardsString(revoked))
			break
		}
	}
	if again, created, err := s.CardIssue(ctxT(t), p); err != nil || created || cardsString(again) != cardsString(revoked) {
		t.Errorf("CardIssue again = %s, %v, %v; want the voided cards by id, not created", cardsString(again), created, err)
	}
}

func testCardConcurrent(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "CD-C", base.Add(time.Hour), base)
	var wg sync.WaitGroup
	var created atomic.Int32
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			cs, c, err := s.CardIssue(ctxT(t), newCards(o, 5))
			if err != nil {
				t.Errorf("CardIssue: %v", err)
				return
			}
			if c {
				created.Add(1)
			}
			got[i] = cardsString(cs)
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d concurrent issuers for one order created, want exactly 1", created.Load())
	}
	list, err := s.CardList(ctxT(t), o.ID)
	if err != nil || len(list) != 2 {
		t.Fatalf("CardList = %s, %v; want one bundle of 2", cardsString(list), err)
	}
	for i, g := range got {
		if g != cardsString(list) {
			t.Errorf("issuer %d got %s; want %s", i, g, cardsString(list))
		}
	}

	// Twelve uses race for five visits: five win.
	var uses atomic.Int32
	for range 12 {
		wg.Go(func() {
			_, err := s.CardUse(ctxT(t), visit(list[0].ID))
			switch {
			case err == nil:
				uses.Add(1)
			case !errors.Is(err, lapse.ErrStale):
				t.Errorf("CardUse: %v", err)
			}
		})
	}
	wg.Wait()
	if c, err := s.CardGet(ctxT(t), list[0].ID); uses.Load() != 5 || err != nil || c.Used != 5 {
		t.Errorf("%d of 12 concurrent uses succeeded, card %+v, %v; want 5 and used 5", uses.Load(), c, err)
	}
}

// testCardInTx checks that cards issued in a transaction that rolls back are
// gone, so that the order can be issued its cards again.
func testCardInTx(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "CD-T", base.Add(time.Hour), base)
	boom := errors.New("boom")
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, created, err := tx.CardIssue(ctxT(t), newCards(o, 5)); err != nil || !created {
			return fmt.Errorf("CardIssue = %v, %w", created, err)
		}
		if _, created, err := tx.CardIssue(ctxT(t), newCards(o, 5)); err != nil || created {
			return fmt.Errorf("CardIssue again in the transaction = %v, %w", created, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want fn's error", err)
	}
	if cs, err := s.CardList(ctxT(t), o.ID); err != nil || len(cs) != 0 {
		t.Errorf("after rollback CardList = %s, %v; want none", cardsString(cs), err)
	}
	if _, created, err := s.CardIssue(ctxT(t), newCards(o, 5)); err != nil || !created {
		t.Errorf("CardIssue after rollback = %v, %v", created, err)
	}
}

// testGroupMemberGetByTxn finds a member by its charge's transaction, of
// its provider: the first by id when several say so, none for an empty id.
func testGroupMemberGetByTxn(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := mustCreate(t, s, "GT-1", base.Add(time.Hour), base)
	var ms []*lapse.GroupMember
	for _, u := range []string{"u1", "u2", "u3", "u4", "u5", "u6", "u7"} {
		m, _, err := s.GroupMemberAdd(ctx, newMember(o, u))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	at := base.Add(2 * time.Minute)
	for i, c := range []struct {
		to  lapse.ChargeStatus
		txn string
	}{{lapse.ChargeCharged, "t-1"}, {lapse.ChargeFailed, "t-2"}, {lapse.ChargeCharged, "t-2"}, {}, // u4 stays pending
		// Transaction ids are compared byte for byte, and one of blanks is
		// one all the same: none of these is another's, nor none.
		{lapse.ChargeCharged, " "}, {lapse.ChargeCharged, "T-1"}, {lapse.ChargeCharged, "t-1 "}} {
		if c.to == "" {
			continue
		}
		got, err := s.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: ms[i].ID, From: lapse.ChargePending, To: c.to, TxnID: c.txn, At: at})
		if err != nil {
			t.Fatal(err)
		}
		if got.TxnID != c.txn {
			t.Fatalf("GroupMemberUpdate of %s to %s with txn %q = %s; want that txn", ms[i].UserID, c.to, c.txn, memberString(got))
		}
		ms[i] = got
	}
	for _, c := range []struct {
		provider, txn string
		want          *lapse.GroupMember // nil: not found
	}{
		{"sandbox", "t-1", ms[0]},
		{"sandbox", "t-2", ms[1]},
		{"other", "t-1", nil},
		{"sandbox", "t-9", nil},
		{"sandbox", "", nil}, // u4 is pending: no transaction yet
		{"sandbox", " ", ms[4]},
		{"sandbox", "T-1", ms[5]},
		{"sandbox", "t-1 ", ms[6]},
		{"sandbox", "t-1  ", nil},
	} {
		got, err := s.GroupMemberGetByTxn(ctx, c.provider, c.txn)
		switch {
		case c.want == nil && (!errors.Is(err, lapse.ErrGroupMemberNotFound) || lapse.ErrorCode(err) != lapse.ENOTFOUND):
			t.Errorf("GroupMemberGetByTxn(%s, %q) = %+v, %v; want ErrGroupMemberNotFound", c.provider, c.txn, got, err)
		case c.want != nil && (err != nil || memberString(got) != memberString(c.want)):
			t.Errorf("GroupMemberGetByTxn(%s, %q) = %+v, %v; want %s", c.provider, c.txn, got, err, memberString(c.want))
		}
	}
}

// testGroupMemberCaptured keeps what the provider took by a member's
// transaction as given, and keeps it through changes that do not set it.
func testGroupMemberCaptured(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := mustCreate(t, s, "GK-1", base.Add(time.Hour), base)
	m, _, err := s.GroupMemberAdd(ctx, newMember(o, "u1"))
	if err != nil || m.CapturedAmount != 0 || m.CapturedCurrency != "" {
		t.Fatalf("GroupMemberAdd = %s, %v; want nothing captured", memberString(m), err)
	}
	at := base.Add(2 * time.Minute)
	for _, c := range []struct {
		from, to lapse.ChargeStatus
		amount   int64
		currency string
		want     int64
		wantCur  string
	}{
		{lapse.ChargePending, lapse.ChargeFailed, 500, "USD", 500, "USD"},
		{lapse.ChargeFailed, lapse.ChargeCharging, 0, "", 500, "USD"}, // kept
		{lapse.ChargeCharging, lapse.ChargeCharged, 999, "CNY", 999, "CNY"},
	} {
		got, err := s.GroupMemberUpdate(ctx, &lapse.GroupMemberUpdateParams{ID: m.ID, From: c.from, To: c.to, TxnID: "t-k",
			CapturedAmount: c.amount, CapturedCurrency: c.currency, At: at})
		if err != nil || got.CapturedAmount != c.want || got.CapturedCurrency != c.wantCur {
			t.Fatalf("%s → %s capturing %d %s = %s, %v; want %d %s", c.from, c.to, c.amount, c.currency, memberString(got), err, c.want, c.wantCur)
		}
		if read, err := s.GroupMemberGet(ctx, m.Key); err != nil || memberString(read) != memberString(got) {
			t.Errorf("GroupMemberGet = %s, %v; want %s", memberString(read), err, memberString(got))
		}
	}
}

// testChargeSaltKeep: the salt of the charge keys is the first one kept,
// whoever asks, however many ask at once, and for good.
func testChargeSaltKeep(t *testing.T, s lapse.Store) {
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			salt, err := s.ChargeSaltKeep(ctxT(t), fmt.Sprintf("salt-%d", i))
			if err != nil {
				t.Errorf("ChargeSaltKeep %d: %v", i, err)
			}
			got[i] = salt
		})
	}
	wg.Wait()
	for i, salt := range got {
		if salt != got[0] || !strings.HasPrefix(salt, "salt-") {
			t.Fatalf("concurrent keeps got %q; want one of the salts asked, the same for all (%d)", got, i)
		}
	}
	if salt, err := s.ChargeSaltKeep(ctxT(t), "later"); err != nil || salt != got[0] {
		t.Errorf("ChargeSaltKeep later = %q, %v; want the first kept, %q", salt, err, got[0])
	}
}
