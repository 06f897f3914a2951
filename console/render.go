package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/lapsehq/lapse/access"

	"github.com/lapsehq/lapse"
)

// view is what every page's template gets: the page's data in Data, and
// around it who is looking, in which language and zone, and the flash
// message of the action that led here.
type view struct {
	Lang  string
	Zone  *time.Location
	Op    *access.Principal // nil on the login page
	Path  string
	Flash *flash
	Data  any
}

// funcs are the templates' functions.
var funcs = template.FuncMap{
	"t":        t,
	"money":    lapse.Money,
	"when":     when,
	"can":      func(p *access.Principal, scope string) bool { return p.Can(scope) },
	"zones":    func() []string { return commonZones },
	"okResult": okResult,
}

// okResult reports whether an audit row's result is a success: "ok", or
// "ok: " and what the success was (a request repeated, a code sent again
// while the second factor was fresh).
func okResult(result string) bool { return result == "ok" || strings.HasPrefix(result, "ok: ") }

// commonZones are the time zones the preferences offer.
var commonZones = []string{"UTC", "Asia/Shanghai", "Asia/Hong_Kong", "Asia/Singapore", "Asia/Tokyo", "Europe/London",
	"Europe/Berlin", "America/New_York", "America/Los_Angeles"}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		tpl, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, err
		}
		pages[name] = tpl
	}
	return pages, nil
}

// render writes the page name with data, as the operator r comes from
// sees it. It renders into a buffer first, so that a template that fails
// is a clean 500, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	c.renderStatus(w, r, http.StatusOK, name, data)
}

func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	op := operatorOf(r)
	v := view{Op: op, Path: r.URL.Path, Data: data, Flash: takeFlash(w, r)}
	v.Lang, v.Zone = langOf(r, ""), time.UTC
	if op != nil {
		v.Lang, v.Zone = langOf(r, op.Lang), zoneOf(op.TimeZone)
	}
	tpl := c.pages[name]
	if tpl == nil {
		c.log.Error("console: no such page template", "page", name)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, v); err != nil {
		c.log.Error("console: rendering failed", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// flash is the outcome of an action, shown once on the page the action
// redirects to.
type flash struct {
	Kind string `json:"kind"` // ok, pending or error
	Text string `json:"text"`
}

// flashCookie is the flash's cookie. Its __Host- prefix makes the browser
// take it only from this host, over HTTPS, for the path /: a neighbouring
// subdomain cannot plant a message ("refund approved") on the console's
// pages, as it could set a cookie of a plain name.
const flashCookie = "__Host-lapse_flash"

// setFlash keeps f for the next page and redirects there (post, redirect,
// get: a reload does not repeat the action).
func setFlash(w http.ResponseWriter, r *http.Request, to string, f flash) {
	raw, _ := json.Marshal(f)
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(raw), Path: "/",
		MaxAge: 60, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode})
	raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		return nil
	}
	var f flash
	if json.Unmarshal(raw, &f) != nil || f.Text == "" {
		return nil
	}
	return &f
}
