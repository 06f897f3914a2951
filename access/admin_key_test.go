package access_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// unrevoked counts the keys in force.
func (e *env) unrevoked() int {
	e.t.Helper()
	keys, err := e.svc.Keys(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if k.RevokedAt.IsZero() {
			n++
		}
	}
	return n
}

func TestEnsureAdminKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	path := filepath.Join(t.TempDir(), "admin.key")
	created, err := e.svc.EnsureAdminKey(e.ctx, path)
	if err != nil || !created {
		t.Fatalf("EnsureAdminKey = %v, %v; want true", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(b))
	p, err := e.svc.Authenticate(e.ctx, key)
	if err != nil || !p.Can(access.ScopeAdmin) || p.Name != access.FirstKeyName {
		t.Fatalf("the key in the file: %+v, %v", p, err)
	}
	row := e.lastAudit("apikey.create")
	if row.ActorKind != "system" || row.Target != "apikey:"+p.ID {
		t.Fatalf("audit row: %+v", row)
	}
	e.noSecret(key)

	// Again, with the file there: nothing to do.
	if created, err := e.svc.EnsureAdminKey(e.ctx, path); err != nil || created {
		t.Fatalf("again: %v, %v", created, err)
	}
	// Without the file: the key is in the store, so no new one, no file.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if created, err := e.svc.EnsureAdminKey(e.ctx, path); err != nil || created {
		t.Fatalf("without the file: %v, %v", created, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a file was written: %v", err)
	}
	if n := e.unrevoked(); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
	// With it revoked, and nothing else in force, a first key is made again.
	if _, _, err := e.svc.RevokeKey(e.ctx, e.root, p.ID); err != nil {
		t.Fatal(err)
	}
	if created, err := e.svc.EnsureAdminKey(e.ctx, path); err != nil || !created {
		t.Fatalf("after revoking: %v, %v", created, err)
	}
}

func TestEnsureAdminKeyNotWhenCredentialsExist(t *testing.T) {
	t.Parallel()
	t.Run("key", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, access.Config{})
		if _, _, err := e.svc.CreateKey(e.ctx, e.root, "shop", []string{"orders:read"}); err != nil {
			t.Fatal(err)
		}
		ensureNone(t, e, e.svc)
	})
	t.Run("operator", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, access.Config{})
		e.addOperator("alice", access.RoleViewer)
		ensureNone(t, e, e.svc)
	})
	t.Run("configured", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, access.Config{})
		ensureNone(t, e, e.service(e.db, access.Config{AdminKey: strings.Repeat("a", 40)}))
	})
}

// ensureNone checks that EnsureAdminKey makes no key and writes no file.
func ensureNone(t *testing.T, e *env, svc *access.Service) {
	t.Helper()
	before := e.unrevoked()
	path := filepath.Join(t.TempDir(), "admin.key")
	if created, err := svc.EnsureAdminKey(e.ctx, path); err != nil || created {
		t.Fatalf("EnsureAdminKey = %v, %v; want false", created, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a file was written: %v", err)
	}
	if n := e.unrevoked(); n != before {
		t.Fatalf("%d keys, want %d", n, before)
	}
}

func TestEnsureAdminKeyRefusesToOverwrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	path := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(path, []byte("something else\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.EnsureAdminKey(e.ctx, path)
	wantErr(t, err, lapse.ECONFLICT, "exists")
	if b, _ := os.ReadFile(path); string(b) != "something else\n" {
		t.Fatalf("the file was changed: %q", b)
	}
	if n := e.unrevoked(); n != 0 {
		t.Fatalf("%d keys kept, want 0", n)
	}
	if n := len(e.audit("apikey.create")); n != 0 {
		t.Fatalf("%d audit rows kept, want 0", n)
	}
	_, err = e.svc.EnsureAdminKey(e.ctx, "")
	wantErr(t, err, lapse.EINVALID, "")
}

// TestEnsureAdminKeyConcurrent starts Lapse twice at once on one database,
// as two processes would (two stores on one file), and in one process twice
// with one file.
func TestEnsureAdminKeyConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	dir := t.TempDir()
	other := e.service(openDB(t, e.path), access.Config{})
	svcs := []*access.Service{e.svc, other, e.svc, other}
	paths := []string{
		filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key"),
		filepath.Join(dir, "a.key"), filepath.Join(dir, "c.key"),
	}
	var wg sync.WaitGroup
	created := make([]bool, len(svcs))
	errs := make([]error, len(svcs))
	for i := range svcs {
		wg.Go(func() { created[i], errs[i] = svcs[i].EnsureAdminKey(e.ctx, paths[i]) })
	}
	wg.Wait()
	n := 0
	for i := range svcs {
		if errs[i] != nil {
			t.Errorf("caller %d: %v", i, errs[i])
		}
		if created[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d callers created a key, want 1", n)
	}
	if k := e.unrevoked(); k != 1 {
		t.Fatalf("%d keys, want 1", k)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.key"))
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
}
