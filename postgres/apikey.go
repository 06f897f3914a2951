package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// lapse.ErrAccessNotFound. Outside Tx, concurrent calls share a statement
// (batch.go): every request with a key reads its key, so that a key
// revoked is refused from the next request on, and at thousands of
// requests a second those reads were a statement and a commit each. A
// batch reads at a snapshot taken after each of its calls was made, as a
// statement of its own would; each caller gets a key of its own.
func (s *Store) APIKeyGet(ctx context.Context, prefix string) (*lapse.APIKey, error) {
	if s.keyReads == nil || s.tx != nil {
		return s.apiKeyGet(ctx, prefix)
	}
	c, err := s.keyReads.do(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("postgres: get api key %s: %w", prefix, err)
	}
	if c.decided {
		return c.r, c.err
	}
	return s.apiKeyGet(ctx, prefix)
}

// apiKeyGet is APIKeyGet's own statement.
func (s *Store) apiKeyGet(ctx context.Context, prefix string) (*lapse.APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE prefix = $1`, prefix))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no API key with prefix %q", prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get api key %s: %w", prefix, err)
	}
	return k, nil
}

// Batches of APIKeyGet: many calls of one key are the common case (a
// service's key on every request), so a batch takes them all, reads each
// prefix once and answers each call with a copy. One read is in flight at
// a time: a read is a round trip of well under a millisecond, so that with
// two a call mostly found a slot free and went nearly alone (2.7 calls a
// statement at 32 keyed clients on 2 cores, 4.5 with one), and each
// statement costs the database some 40 µs of CPU whatever it reads.
const (
	maxKeyReads     = 1
	maxKeyReadBatch = 128
)

// apiKeyGetManySQL reads the keys of distinct prefixes, at most one each
// (prefix is unique). The LIMIT says so to the planner: api_keys holds a
// few rows, too few changed for autovacuum ever to analyze it, and without
// statistics the generic plan of prefix = ANY($1) reckons on ten rows
// where a custom plan knows the array, so PostgreSQL planned the read anew
// every time, about 70 µs, five times what running it took (2026-12-07,
// pg_stat_statements). With the LIMIT the generic plan looks as cheap and
// is kept, planned once per connection (outbox.go's bounded does the same).
const apiKeyGetManySQL = `SELECT ` + apiKeyColumns + ` FROM api_keys WHERE prefix = ANY($1) LIMIT cardinality($1)`

// keyReader is the Store's batcher of APIKeyGet.
type keyReader = batcher[string, *lapse.APIKey]

func newKeyReader(s *Store, gather time.Duration) *keyReader {
	return &keyReader{max: maxKeyReads, gather: gather, write: s.apiKeyGetMany,
		take: func(queue []*batchCall[string, *lapse.APIKey]) (batch, rest []*batchCall[string, *lapse.APIKey]) {
			n := min(len(queue), maxKeyReadBatch)
			return slices.Clone(queue[:n]), queue[n:]
		}}
}

// apiKeyGetMany reads the keys of a batch, deciding every call when its
// statement succeeds. A call alone is read by APIKeyGet's own statement.
func (s *Store) apiKeyGetMany(ctx context.Context, batch []*batchCall[string, *lapse.APIKey]) {
	if len(batch) == 1 {
		c := batch[0]
		c.r, c.err = s.apiKeyGet(c.ctx, c.p)
		c.decided = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	var prefixes []string
	for _, c := range batch {
		if !slices.Contains(prefixes, c.p) {
			prefixes = append(prefixes, c.p)
		}
	}
	rows, err := s.db.Query(ctx, apiKeyGetManySQL, prefixes)
	if err != nil {
		return // each call is read alone, and reports its own error
	}
	ks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return
	}
	for _, c := range batch {
		c.decided = true
		i := slices.IndexFunc(ks, func(k *lapse.APIKey) bool { return k.Prefix == c.p })
		if i < 0 {
			c.err = lapse.Refine(lapse.ErrAccessNotFound, "no API key with prefix %q", c.p)
			continue
		}
		k := *ks[i]
		k.Scopes, k.Hash = slices.Clone(k.Scopes), slices.Clone(k.Hash)
		c.r = &k
	}
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
