package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/sqlite"
)

// TestMetadataKeysExact: the keys Lapse reads from an order's metadata
// (cards and their product and visits, min_members) are matched exactly, as
// every key of a request is. encoding/json alone read "VISITS" as visits
// and let the last of two spellings win, so that an order whose metadata
// shows a 3-visit card, or a group needing 2 members, was issued an
// unlimited card, or settled with 1: Lapse and the merchant read one order
// two ways. Keys of the caller's own are left alone.
func TestMetadataKeysExact(t *testing.T) {
	order := func(md string) *lapse.Order { return &lapse.Order{Metadata: []byte(md)} }
	for _, md := range []string{
		`{"cards":[{"product":"swim","visits":3,"VISITS":0}]}`,
		`{"cards":[{"product":"swim","Visits":3}]}`,
		`{"cards":[{"Product":"swim"}]}`,
		`{"Cards":[{"product":"swim","visits":3}]}`,
		`{"cards":[{"product":"swim","visits":null}]}`,
		`{"cards":[{"product":"swim","visits":3,"x":1}]}`,
	} {
		if specs, err := engine.CardSpecs(order(md)); lapse.ErrorCode(err) != lapse.EINVALID || !strings.HasPrefix(field(err), "metadata.") {
			t.Errorf("CardSpecs(%s) = %+v, %v; want invalid naming a field of metadata", md, specs, err)
		}
	}
	for _, md := range []string{
		`{"min_members":2,"MIN_MEMBERS":1}`,
		`{"Min_Members":5}`,
	} {
		if n, err := engine.GroupMinMembers(order(md)); lapse.ErrorCode(err) != lapse.EINVALID || !strings.HasPrefix(field(err), "metadata.") {
			t.Errorf("GroupMinMembers(%s) = %d, %v; want invalid naming a field of metadata", md, n, err)
		}
	}

	specs, err := engine.CardSpecs(order(`{"cards":[{"product":"swim","visits":3}],"Title":"x","title":"y","min_members":"own"}`))
	if err != nil || len(specs) != 1 || specs[0] != (lapse.CardSpec{Product: "swim", Visits: 3}) {
		t.Errorf("CardSpecs = %+v, %v; want one swim card of 3 visits", specs, err)
	}
	if n, err := engine.GroupMinMembers(order(`{"min_members":2,"cards":"own","Cards":1}`)); n != 2 || err != nil {
		t.Errorf("GroupMinMembers = %d, %v; want 2", n, err)
	}
}

// field is the field an error of the lapse package names, or "".
func field(err error) string {
	var le *lapse.Error
	if errors.As(err, &le) {
		return le.Field
	}
	return ""
}

// legacyMetadata serves the order no with metadata md, as a group stored
// before its keys were read exactly might hold.
type legacyMetadata struct {
	lapse.Store
	no string
	md []byte
}

func (s legacyMetadata) OrderGet(ctx context.Context, no string) (*lapse.Order, error) {
	o, err := s.Store.OrderGet(ctx, no)
	if err == nil && o.OrderNo == s.no {
		c := *o
		c.Metadata = s.md
		o = &c
	}
	return o, err
}

// TestGroupLegacyMetadataChargesNoOne: a group stored before the keys of
// its metadata were read exactly, whose metadata says "Min_Members": 5
// (read as 5 then, refused now), is not settled on the default of one
// member when it closes with two: it fails, no one charged, as a group too
// small does.
func TestGroupLegacyMetadataChargesNoOne(t *testing.T) {
	clk := lapse.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "lapse.db")
	db, err := sqlite.Open(context.Background(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk})
	e := groupEngine(t, legacyMetadata{Store: db, no: "G-old", md: []byte(`{"Min_Members": 5}`)}, clk, sb)
	ctx := ctxT(t)
	create(t, e, groupReq("G-old", time.Hour))
	for _, u := range []string{"u1", "u2"} {
		if _, _, err := e.JoinGroup(ctx, "G-old", engine.JoinRequest{UserID: u, Method: "tok-" + u, By: app}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Set(t0.Add(time.Hour))
	if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
	g, err := e.Group(ctx, "G-old")
	if err != nil {
		t.Fatal(err)
	}
	if g.Order.State != flows.GroupFailed || len(sb.Payments()) != 0 {
		t.Errorf("group G-old is %s with %d charges; want it failed, no one charged", g.Order.State, len(sb.Payments()))
	}
}
