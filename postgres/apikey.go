package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const apiKeyColumns = `id, prefix, name, scopes, hash, created_at, created_by, revoked_at`

func scanAPIKey(row pgx.Row) (*lapse.APIKey, error) {
	var (
		k       lapse.APIKey
		revoked *time.Time
	)
	if err := row.Scan(&k.ID, &k.Prefix, &k.Name, &k.Scopes, &k.Hash, &k.CreatedAt, &k.CreatedBy, &revoked); err != nil {
		return nil, err
	}
	if len(k.Scopes) == 0 {
		k.Scopes = nil
	}
	k.CreatedAt, k.RevokedAt = k.CreatedAt.UTC(), timeOf(revoked)
	return &k, nil
}

// scopesArg is a key's scopes as a text[] argument: an empty array rather
// than NULL when it has none.
func scopesArg(scopes []string) []string {
	if scopes == nil {
		return []string{}
	}
	return scopes
}

// APIKeyCreate inserts k unless its prefix is taken: then it writes nothing
// and returns lapse.ErrAccessExists, raising no SQL error, so that a caller's
// transaction stays usable. An insert that meets a concurrent one of the same
// prefix waits for it to end.
func (s *Store) APIKeyCreate(ctx context.Context, k *lapse.APIKey) (*lapse.APIKey, error) {
	got, err := scanAPIKey(s.db.QueryRow(ctx, `INSERT INTO api_keys (prefix, name, scopes, hash, created_at, created_by, revoked_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (prefix) DO NOTHING RETURNING `+apiKeyColumns,
		k.Prefix, k.Name, scopesArg(k.Scopes), k.Hash, k.CreatedAt, k.CreatedBy, nullTime(k.RevokedAt)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessExists, "an API key with prefix %q exists", k.Prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: create api key %s: %w", k.Prefix, err)
	}
	return got, nil
}

// APIKeyGet returns the key with prefix, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) APIKeyGet(ctx context.Context, prefix string) (*lapse.APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE prefix = $1`, prefix))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no API key with prefix %q", prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get api key %s: %w", prefix, err)
	}
	return k, nil
}

// APIKeyList returns every key by id.
func (s *Store) APIKeyList(ctx context.Context) ([]*lapse.APIKey, error) {
	rows, err := s.db.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list api keys: %w", err)
	}
	ks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list api keys: %w", err)
	}
	return ks, nil
}

// APIKeyRevoke sets revoked_at unless it is set, in one statement that
// returns the key either way; a missing key is lapse.ErrAccessNotFound.
func (s *Store) APIKeyRevoke(ctx context.Context, prefix string, at time.Time) (*lapse.APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2)
		WHERE prefix = $1 RETURNING `+apiKeyColumns, prefix, nullTime(at)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no API key with prefix %q", prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: revoke api key %s: %w", prefix, err)
	}
	return k, nil
}
