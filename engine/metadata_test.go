package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
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
