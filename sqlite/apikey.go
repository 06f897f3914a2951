package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
		return nil, fmt.Errorf("api key %s: scopes: %w", k.Prefix, err)
	}
	k.CreatedAt, k.RevokedAt = column.Time(created), column.ZeroTime(revoked)
	return &k, nil
}

func apiKeyNotFound(prefix string) error {
	return lapse.Refine(lapse.ErrAccessNotFound, "no API key with prefix %q", prefix)
}

// APIKeyCreate inserts k; a taken prefix meets the unique key:
// lapse.ErrAccessExists.
func (s *Store) APIKeyCreate(ctx context.Context, k *lapse.APIKey) (*lapse.APIKey, error) {
	var got *lapse.APIKey
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanAPIKey(w.tx.QueryRowContext(ctx, `INSERT INTO api_keys (prefix, name, scopes, hash, created_at, created_by, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING `+apiKeyCols,
			k.Prefix, k.Name, column.Scopes(k.Scopes), k.Hash, column.Micros(k.CreatedAt), k.CreatedBy, column.ZeroMicros(k.RevokedAt)))
		if isUnique(err) {
			return lapse.Refine(lapse.ErrAccessExists, "an API key with prefix %q exists", k.Prefix)
		}
		return err
	})
	if err != nil {
		return nil, fail(err, "api key create %s", k.Prefix)
	}
	return got, nil
}

// APIKeyGet returns the key with prefix, or lapse.ErrAccessNotFound.
func (s *Store) APIKeyGet(ctx context.Context, prefix string) (*lapse.APIKey, error) {
	k, err := scanAPIKey(s.db().QueryRowContext(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE prefix = ?`, prefix))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, apiKeyNotFound(prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: api key get %s: %w", prefix, err)
	}
	return k, nil
}

// APIKeyList returns every key by id.
func (s *Store) APIKeyList(ctx context.Context) ([]*lapse.APIKey, error) {
	ks, err := queryAll(ctx, s.db(), scanAPIKey, `SELECT `+apiKeyCols+` FROM api_keys ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: api key list: %w", err)
	}
	return ks, nil
}

// APIKeyRevoke sets revoked_at where it is NULL, in one statement.
func (s *Store) APIKeyRevoke(ctx context.Context, prefix string, at time.Time) (*lapse.APIKey, error) {
	var got *lapse.APIKey
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanAPIKey(w.tx.QueryRowContext(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)
			WHERE prefix = ? RETURNING `+apiKeyCols, column.Micros(at), prefix))
		if errors.Is(err, sql.ErrNoRows) {
			return apiKeyNotFound(prefix)
		}
		return err
	})
	if err != nil {
		return nil, fail(err, "api key revoke %s", prefix)
	}
	return got, nil
}
