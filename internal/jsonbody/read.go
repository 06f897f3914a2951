package jsonbody

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/problem"
)

// Read reads r's body, JSON by its Content-Type, sent as it is (no
// Content-Encoding but identity) and at most limit bytes, and decodes it
// into v with Decode. A Content-Type that is missing or not JSON, or a
// Content-Encoding, is a *problem.MediaTypeError (415); every other failure
// is an EINVALID error naming the field when there is one.
func Read(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	if err := checkContentEncoding(r.Header.Values("Content-Encoding")); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return lapse.Errorf(lapse.EINVALID, "the request body is larger than the limit of %d bytes", mbe.Limit)
		}
		return lapse.Errorf(lapse.EINVALID, "the request body could not be read")
	}
	return Decode(body, v)
}

func checkContentType(ct string) error {
	if ct == "" {
		return &problem.MediaTypeError{Err: lapse.FieldError("Content-Type", "is missing; send application/json")}
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return &problem.MediaTypeError{Err: lapse.FieldError("Content-Type", "is %q; send application/json", ct)}
	}
	// JSON is UTF-8 (RFC 8259): a body said to be in another charset is
	// read as UTF-8 all the same, and Latin-1 text that happens to be valid
	// UTF-8 ("Ã©") would be kept as other text than the caller sent.
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return &problem.MediaTypeError{Err: lapse.FieldError("Content-Type", "says charset %q; JSON is UTF-8: send application/json, with charset=utf-8 or none", cs)}
	}
	return nil
}

// checkContentEncoding refuses a body said to be compressed (gzip, br, …):
// Lapse reads a body as it is sent, so a compressed one was refused as JSON
// that does not parse, which names no cause, and an uncompressed one so
// labelled was read in spite of its label.
func checkContentEncoding(values []string) error {
	for _, v := range values {
		for coding := range strings.SplitSeq(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return &problem.MediaTypeError{Err: lapse.FieldError("Content-Encoding",
					"is %q; send the body uncompressed, without the header", strings.Join(values, ", "))}
			}
		}
	}
	return nil
}
