package access_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

var keyFormat = regexp.MustCompile(`^lapse_([a-z2-7]{12})_[A-Za-z0-9_-]{43}$`)

func TestKeyCreateAuthenticateRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	key, k, err := e.svc.CreateKey(e.ctx, e.root, "  shop backend ", []string{"orders:write", "orders:read", "orders:write"})
	if err != nil {
		t.Fatal(err)
	}
	m := keyFormat.FindStringSubmatch(key)
	if m == nil || m[1] != k.Prefix {
		t.Fatalf("key %q does not have the format, or its prefix is not %q", key, k.Prefix)
	}
	if k.Name != "shop backend" || !slices.Equal(k.Scopes, []string{"orders:read", "orders:write"}) ||
		k.CreatedBy != "cli:root" || !k.CreatedAt.Equal(start) || k.Hash != nil {
		t.Fatalf("key record: %+v", k)
	}
	row := e.lastAudit("apikey.create")
	if row.Target != "apikey:"+k.Prefix || row.ActorKind != "cli" || row.Result != "ok" ||
		string(row.Params) != `{"name":"shop backend","scopes":["orders:read","orders:write"]}` {
		t.Fatalf("audit row: %+v", row)
	}
	e.noSecret(key, key[len("lapse_")+13:])

	p, err := e.svc.Authenticate(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "key" || p.ID != k.Prefix || p.Name != "shop backend" || !p.Can("orders:write") || p.Can("refunds:write") {
		t.Fatalf("principal: %+v", p)
	}
	stored, err := e.db.APIKeyGet(e.ctx, k.Prefix)
	if err != nil || len(stored.Hash) != 32 {
		t.Fatalf("stored key: %+v, %v", stored, err)
	}

	// Made by a key: the actor is the key.
	admin, _, err := e.svc.CreateKey(e.ctx, e.root, "ops", []string{access.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := e.svc.Authenticate(e.ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, k2, err := e.svc.CreateKey(e.ctx, ap, "by a key", []string{"orders:read"}); err != nil || k2.CreatedBy != "key:"+ap.ID {
		t.Fatalf("CreateKey by a key: %+v, %v", k2, err)
	}

	// Revoke, by the bare prefix or "lapse_" and the prefix; twice is once.
	r, changed, err := e.svc.RevokeKey(e.ctx, e.root, "lapse_"+k.Prefix)
	if err != nil || !changed || r.RevokedAt.IsZero() || r.Hash != nil {
		t.Fatalf("RevokeKey: %+v, %v, %v", r, changed, err)
	}
	if again, changed, err := e.svc.RevokeKey(e.ctx, e.root, k.Prefix); err != nil || changed || !again.RevokedAt.Equal(r.RevokedAt) {
		t.Fatalf("RevokeKey again: %+v, changed %v, %v; want it as it was, unchanged", again, changed, err)
	}
	if n := len(e.audit("apikey.revoke")); n != 1 {
		t.Fatalf("%d revoke rows, want 1", n)
	}
	_, err = e.svc.Authenticate(e.ctx, key)
	wantErr(t, err, lapse.EUNAUTHORIZED, "the API key is not valid")
	// The revoked key still tells whose it is, for the audit row of a
	// request refused for it, to the holder of its secret only.
	if p, err := e.svc.KeyHolder(e.ctx, key); err != nil || p.Kind != "key" || p.ID != k.Prefix || p.Name != "shop backend" {
		t.Fatalf("the holder of the revoked key: %+v, %v", p, err)
	}
	wrong := key[:len(key)-1] + "A"
	if wrong == key {
		wrong = key[:len(key)-1] + "B"
	}
	for _, bad := range []string{wrong, "lapse_aaaaaaaaaaaa_" + key[len("lapse_")+13:], "lapse_" + k.Prefix, ""} {
		_, err = e.svc.KeyHolder(e.ctx, bad)
		wantErr(t, err, lapse.EUNAUTHORIZED, "the API key is not valid")
	}

	// A whole key given to RevokeKey is not echoed.
	_, _, err = e.svc.RevokeKey(e.ctx, e.root, "lapse_aaaaaaaaaaaa_"+strings.Repeat("s", 43))
	wantErr(t, err, lapse.ENOTFOUND, "aaaaaaaaaaaa")
	if strings.Contains(err.Error(), "sss") {
		t.Fatalf("the error shows the secret: %v", err)
	}
	_, _, err = e.svc.RevokeKey(e.ctx, e.root, "NOT-A-PREFIX")
	wantErr(t, err, lapse.EINVALID, "")

	keys, err := e.svc.Keys(e.ctx)
	if err != nil || len(keys) != 3 || keys[0].Prefix != k.Prefix || keys[0].RevokedAt.IsZero() || !keys[1].RevokedAt.IsZero() {
		t.Fatalf("Keys: %v, %v", keys, err)
	}
	for _, k := range keys {
		if k.Hash != nil {
			t.Fatal("Keys shows a hash")
		}
	}
}

func TestAuthenticateRefusesTheSameWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	key, k, err := e.svc.CreateKey(e.ctx, e.root, "shop", []string{"orders:read"})
	if err != nil {
		t.Fatal(err)
	}
	revoked, rk, err := e.svc.CreateKey(e.ctx, e.root, "old", []string{"orders:read"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.RevokeKey(e.ctx, e.root, rk.Prefix); err != nil {
		t.Fatal(err)
	}
	secret := key[len(key)-43:]
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	bad := map[string]string{
		"empty":          "",
		"garbage":        "hello",
		"no start":       strings.TrimPrefix(key, "lapse_"),
		"upper prefix":   "lapse_" + strings.ToUpper(k.Prefix) + "_" + secret,
		"short secret":   key[:len(key)-1],
		"long secret":    key + "A",
		"bad separator":  "lapse_" + k.Prefix + "-" + secret,
		"unknown prefix": "lapse_" + "aaaaaaaaaaaa" + "_" + secret,
		"wrong secret":   flip(key, len(key)-5),
		"revoked":        revoked,
		"bearer":         "Bearer " + key,
	}
	var first string
	for what, b := range bad {
		_, err := e.svc.Authenticate(e.ctx, b)
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
		if first == "" {
			first = err.Error()
		}
		if err.Error() != first {
			t.Errorf("%s: %q, want the same message as the others, %q", what, err, first)
		}
	}
	if _, err := e.svc.Authenticate(e.ctx, key); err != nil {
		t.Fatalf("the good key: %v", err)
	}
}

func TestCreateKeyValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	for _, c := range []struct {
		by     *access.Principal
		name   string
		scopes []string
		code   string
	}{
		{e.root, "", []string{"orders:read"}, lapse.EINVALID},
		{e.root, "   ", []string{"orders:read"}, lapse.EINVALID},
		{e.root, strings.Repeat("n", 101), []string{"orders:read"}, lapse.EINVALID},
		{e.root, "tab\there", []string{"orders:read"}, lapse.EINVALID},
		{e.root, "shop", nil, lapse.EINVALID},
		{e.root, "shop", []string{"orders:read", "orders:delete"}, lapse.EINVALID},
		{&access.Principal{Kind: "key", ID: "x", Scopes: []string{"orders:write"}}, "shop", []string{"orders:read"}, lapse.EFORBIDDEN},
		{nil, "shop", []string{"orders:read"}, lapse.EFORBIDDEN},
	} {
		_, _, err := e.svc.CreateKey(e.ctx, c.by, c.name, c.scopes)
		wantErr(t, err, c.code, "")
	}
	if _, _, err := e.svc.CreateKey(e.ctx, e.root, strings.Repeat("ü", 100), []string{"orders:read"}); err != nil {
		t.Fatalf("100 characters: %v", err)
	}
	_, _, err := e.svc.RevokeKey(e.ctx, &access.Principal{Kind: "key", Scopes: []string{"orders:write"}}, "aaaaaaaaaaaa")
	wantErr(t, err, lapse.EFORBIDDEN, "")
	if n := len(e.audit("apikey.create")); n != 1 {
		t.Fatalf("%d create rows, want 1", n)
	}
}

func TestConfiguredAdminKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	adminKey := strings.Repeat("k", 20) + "-configured-admin"
	svc := e.service(e.db, access.Config{AdminKey: adminKey})
	if svc.Config().AdminKey != "" {
		t.Fatal("Config returns the admin key")
	}
	p, err := svc.Authenticate(e.ctx, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "key" || !p.Can(access.ScopeAdmin) || !p.Can(access.ScopeRefundsWrite) {
		t.Fatalf("admin principal: %+v", p)
	}
	_, err = svc.Authenticate(e.ctx, adminKey+"x")
	wantErr(t, err, lapse.EUNAUTHORIZED, "the API key is not valid")
	_, err = e.svc.Authenticate(e.ctx, adminKey) // a service without it
	wantErr(t, err, lapse.EUNAUTHORIZED, "the API key is not valid")
}
