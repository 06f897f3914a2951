package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/sqlite"
)

// Appenders of two stores on one file, as two processes hold it, take turns
// at the head too: SQLite's write lock is the file's, not the store's.
func TestAuditTwoStores(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lapse.db")
	a, b := openStore(t, path), openStore(t, path)
	const each = 25
	var wg sync.WaitGroup
	for w, s := range []*sqlite.Store{a, b, a, b} {
		wg.Go(func() {
			for i := range each {
				e := &lapse.AuditEntry{At: base, ActorKind: "system", ActorID: fmt.Sprint(w), Action: "test", Target: fmt.Sprint(i)}
				if err := lapse.AuditRecord(context.Background(), s, e); err != nil {
					t.Errorf("AuditRecord: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for name, s := range map[string]*sqlite.Store{"a": a, "b": b} {
		if n, err := lapse.AuditVerify(context.Background(), s, 0); n != 4*each || err != nil {
			t.Errorf("%s: AuditVerify = %d, %v; want %d rows", name, n, err, 4*each)
		}
	}
}
