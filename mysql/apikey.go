package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const apiKeyCols = `id, prefix, name, scopes, hash, created_at, created_by, revoked_at`

func scanAPIKey(r scanner) (*lapse.APIKey, error) {
	var (
		k       lapse.APIKey
		scopes  string
		created int64
		revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Prefix, &k.Name, &scopes, &k.Hash, &created, &k.CreatedBy, &revoked); err != nil {
		return nil, err
	}
	var err error
	if k.Scopes, err = column.ParseScopes(scopes); err != nil {
		return nil, fmt.Errorf("the scopes of key %s: %w", k.Prefix, err)
	}
	k.CreatedAt, k.RevokedAt = column.Time(created), column.ZeroTime(revoked)
	return &k, nil
}

// APIKeyCreate inserts k and returns it with its id, or returns an error
// that is lapse.ErrAccessExists when its prefix is taken.
func (s *Store) APIKeyCreate(ctx context.Context, k *lapse.APIKey) (*lapse.APIKey, error) {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO api_keys (prefix, name, scopes, hash, created_at, created_by, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, k.Prefix, k.Name, column.Scopes(k.Scopes), k.Hash, column.Micros(k.CreatedAt),
			k.CreatedBy, column.ZeroMicros(k.RevokedAt))
	})
	if isDuplicateKey(err, "api_keys_prefix_key") {
		return nil, lapse.Refine(lapse.ErrAccessExists, "an API key with prefix %q exists", k.Prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: create API key %s: %w", k.Prefix, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, fmt.Errorf("mysql: create API key %s: %w", k.Prefix, err)
	}
	out := *k
	out.ID, out.Scopes, out.Hash = id, slices.Clone(k.Scopes), bytes.Clone(k.Hash)
	out.CreatedAt, out.RevokedAt = kept(k.CreatedAt), kept(k.RevokedAt)
	return &out, nil
}

// APIKeyGet returns the key with prefix, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) APIKeyGet(ctx context.Context, prefix string) (*lapse.APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE prefix = ?`, prefix))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, accessNotFound("no API key with prefix %q", prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get API key %s: %w", prefix, err)
	}
	return k, nil
}

// APIKeyList returns every key by id.
func (s *Store) APIKeyList(ctx context.Context) ([]*lapse.APIKey, error) {
	ks, err := queryAll(ctx, s, scanAPIKey, `SELECT `+apiKeyCols+` FROM api_keys ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("mysql: list API keys: %w", err)
	}
	return ks, nil
}

// APIKeyRevoke sets the key's revoked_at unless it has one, in an UPDATE
// guarded by revoked_at IS NULL, and reads the key back.
func (s *Store) APIKeyRevoke(ctx context.Context, prefix string, at time.Time) (*lapse.APIKey, error) {
	k, err := write(ctx, s, func(w *Store) (*lapse.APIKey, error) {
		if _, err := w.exec(ctx, `UPDATE api_keys SET revoked_at = ? WHERE prefix = ? AND revoked_at IS NULL`,
			column.ZeroMicros(at), prefix); err != nil {
			return nil, err
		}
		k, err := scanAPIKey(w.queryRow(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE prefix = ?`, prefix))
		if errors.Is(err, sql.ErrNoRows) {
			return nil, accessNotFound("no API key with prefix %q", prefix)
		}
		return k, err
	})
	if err != nil {
		return nil, fail(err, "revoke API key %s", prefix)
	}
	return k, nil
}
