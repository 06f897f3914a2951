package engine

import (
	"encoding/json"
	"errors"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/jsonbody"
)

// readMetadata reads the keys that Lapse takes from an order's metadata into
// v, a pointer to a struct of them, each key matched exactly; the caller's
// own keys are skipped. encoding/json alone reads "VISITS" as visits and
// lets the last of two spellings win, so that Lapse would act on another
// value than the merchant's systems read in the same metadata. strict also
// refuses keys that name no field and null for one that cannot be absent,
// for the parts of metadata that are Lapse's alone (a card). An error is
// EINVALID and names the field under metadata.
func readMetadata(md json.RawMessage, v any, strict bool) error {
	read := jsonbody.DecodeLenient
	if strict {
		read = jsonbody.Decode
	}
	err := read(md, v)
	var le *lapse.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &le) && le.Field != "":
		return lapse.FieldError("metadata."+le.Field, "%s", le.Message)
	}
	return lapse.FieldError("metadata", "must be a JSON object")
}
