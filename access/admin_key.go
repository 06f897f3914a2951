package access

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/lapsehq/lapse"
)

// FirstKeyName is the name of the admin key EnsureAdminKey makes.
const FirstKeyName = "admin (first start)"

// EnsureAdminKey gives a new installation its first credential. When no
// AdminKey is configured and the store has neither an unrevoked key nor an
// operator that is not disabled, it makes a key with the admin scope named
// FirstKeyName, writes it to a new file at path (mode 0600) and returns
// created=true. Otherwise it writes nothing and returns false: an
// installation that has credentials never gets another this way.
//
// It never overwrites a file: when a key is needed and path exists, it
// fails with an ECONFLICT error and makes no key. (A file from an earlier
// first start holds a key that is in the store, so then no key is needed.)
//
// Concurrent first starts on one database make one key. The check and the
// insert are one transaction that begins by taking the audit log's head,
// which AuditHead locks until the transaction ends: a second caller waits
// there, and when it reads on, the first caller's key is committed and
// counted. (On SQLite every transaction holds the file's write lock from
// its start anyway.) The file is written inside the transaction too, so
// that a key is kept only when its file was written; were the commit to
// fail after that, the file is removed again.
func (s *Service) EnsureAdminKey(ctx context.Context, path string) (bool, error) {
	if s.adminHash != nil {
		return false, nil
	}
	if path == "" {
		return false, lapse.FieldError("path", "is required: the first admin key is written to it")
	}
	created := false
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		created = false // a retried transaction starts over
		if _, _, err := as.AuditHead(ctx); err != nil {
			return err
		}
		if need, err := needFirstKey(ctx, as); err != nil || !need {
			return err
		}
		key, _, err := s.createKey(ctx, as, system(), FirstKeyName, []string{ScopeAdmin})
		if err != nil {
			return err
		}
		if err := writeNew(path, key+"\n"); err != nil {
			return err
		}
		created = true
		return nil
	})
	if err != nil {
		if created {
			_ = os.Remove(path) // the key it holds was not kept
		}
		return false, err
	}
	return created, nil
}

// needFirstKey reports whether the store has no credential: no unrevoked
// key and no operator that is not disabled.
func needFirstKey(ctx context.Context, as lapse.AccessStore) (bool, error) {
	keys, err := as.APIKeyList(ctx)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if k.RevokedAt.IsZero() {
			return false, nil
		}
	}
	n, err := as.OperatorCount(ctx)
	return n == 0, err
}

// writeNew writes data to a file at path that must not exist, readable by
// its owner only, and syncs it.
func writeNew(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return lapse.Errorf(lapse.ECONFLICT, "the first admin key's file %s exists, and the store has no key in force: remove the file, or configure an admin key", path)
	}
	if err != nil {
		return lapse.Errorf(lapse.EINTERNAL, "access: write the first admin key: %v", err)
	}
	_, err = f.WriteString(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return lapse.Errorf(lapse.EINTERNAL, "access: write the first admin key: %v", err)
	}
	return nil
}
