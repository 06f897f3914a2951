package console

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"

	lapsehttp "github.com/lapsehq/lapse/http"
)

// outcome is how an action the console asked of the API ended.
type outcome struct {
	Status   int
	Detail   string // the problem's detail, for a refusal
	Approval int64  // the approval request, when the action waits for one (202)
	Body     []byte
}

// call asks the API to carry out an action for the operator of r: method
// and path of an API route, body as its JSON, code as the operator's
// second factor (empty: none given). The request carries the operator's
// session, so that the API decides and audits it as it would any other.
func (c *Console) call(r *http.Request, method, path string, body any, code string) outcome {
	return c.callWith(r, method, path, body, code, nil)
}

// callWith is call with more request headers, such as a refund's
// Idempotency-Key.
func (c *Console) callWith(r *http.Request, method, path string, body any, code string, header http.Header) outcome {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return outcome{Status: http.StatusInternalServerError, Detail: err.Error()}
		}
	}
	req := httptest.NewRequestWithContext(r.Context(), method, path, bytes.NewReader(raw))
	for k, vs := range header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ck, err := r.Cookie(lapsehttp.SessionCookie); err == nil {
		req.AddCookie(ck)
	}
	if code != "" {
		req.Header.Set(lapsehttp.SecondFactorHeader, code)
	}
	req.RemoteAddr = net.JoinHostPort(c.clientAddr(r), "0") // the client's address, read once
	rec := httptest.NewRecorder()
	c.cfg.API.ServeHTTP(rec, req)
	out := outcome{Status: rec.Code, Body: rec.Body.Bytes()}
	switch {
	case rec.Code == http.StatusAccepted:
		var a struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		}
		if json.Unmarshal(out.Body, &a) == nil && a.Status == "pending" {
			out.Approval = a.ID
		}
	case rec.Code >= 400:
		var p struct {
			Detail string `json:"detail"`
		}
		if json.Unmarshal(out.Body, &p) == nil {
			out.Detail = p.Detail
		}
	}
	return out
}

// flashOf is the flash message of an action's outcome in lang.
func flashOf(lang string, o outcome) flash {
	switch {
	case o.Approval != 0:
		return flash{Kind: "pending", Text: t(lang, "common.pending", o.Approval)}
	case o.Status >= 400:
		return flash{Kind: "error", Text: t(lang, "common.error", o.Detail)}
	default:
		return flash{Kind: "ok", Text: t(lang, "common.done")}
	}
}
