package console

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFlashCookieIsHostOnly: the flash goes in a __Host- cookie (Secure,
// path /, no domain), and a flash under any other name, such as one a
// neighbouring subdomain set, is not shown.
func TestFlashCookieIsHostOnly(t *testing.T) {
	w := httptest.NewRecorder()
	setFlash(w, httptest.NewRequest("POST", "/console/orders/A-1/retry", nil), "/console/orders/A-1", flash{Kind: "ok", Text: "retried"})
	cks := w.Result().Cookies()
	if len(cks) != 1 || !strings.HasPrefix(cks[0].Name, "__Host-") || cks[0].Path != "/" || !cks[0].Secure || cks[0].Domain != "" {
		t.Fatalf("the flash's cookie = %+v; want one __Host- cookie, Secure, path /, no domain", cks)
	}

	r := httptest.NewRequest("GET", "/console/orders/A-1", nil)
	r.AddCookie(cks[0])
	if f := takeFlash(httptest.NewRecorder(), r); f == nil || f.Text != "retried" {
		t.Fatalf("the flash read back = %+v", f)
	}

	planted := base64.RawURLEncoding.EncodeToString([]byte(`{"kind":"ok","text":"refund approved"}`))
	for _, name := range []string{"lapse_flash", "__Secure-lapse_flash"} {
		r := httptest.NewRequest("GET", "/console/orders/A-1", nil)
		r.AddCookie(&http.Cookie{Name: name, Value: planted})
		if f := takeFlash(httptest.NewRecorder(), r); f != nil {
			t.Errorf("a flash in the cookie %s was shown: %+v", name, f)
		}
	}
}
