package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/lapsehq/lapse"
)

// An API key is "lapse_", a prefix of PrefixLen random lowercase base32
// characters, "_", and a secret of 32 random bytes in unpadded base64url.
// The prefix finds the key; the SHA-256 of the whole key checks it.
const (
	keyStart  = "lapse_"
	PrefixLen = 12
	secretLen = 43 // base64url of 32 bytes, unpadded
	keyLen    = len(keyStart) + PrefixLen + 1 + secretLen
)

var prefixEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newKey returns a new random key and its prefix.
func newKey() (key, prefix string) {
	var p [8]byte // 64 bits; the first 60 make the 12 characters
	var secret [32]byte
	rand.Read(p[:]) // crypto/rand.Read never fails; it crashes the program first
	rand.Read(secret[:])
	prefix = prefixEncoding.EncodeToString(p[:])[:PrefixLen]
	return keyStart + prefix + "_" + base64.RawURLEncoding.EncodeToString(secret[:]), prefix
}

// keyPrefix returns the prefix of a well-formed key.
func keyPrefix(key string) (string, bool) {
	if len(key) != keyLen || !strings.HasPrefix(key, keyStart) {
		return "", false
	}
	rest := key[len(keyStart):]
	prefix, secret := rest[:PrefixLen], rest[PrefixLen+1:]
	if rest[PrefixLen] != '_' || !validPrefix(prefix) {
		return "", false
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(b) != 32 {
		return "", false
	}
	return prefix, true
}

func validPrefix(p string) bool {
	return len(p) == PrefixLen && strings.IndexFunc(p, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '2' <= r && r <= '7')
	}) < 0
}

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// errBadKey is the one answer to every key that does not authenticate, so
// that it tells nothing about why.
func errBadKey() error { return lapse.Errorf(lapse.EUNAUTHORIZED, "the API key is not valid") }

// CreateKey makes a key named name with scopes, on behalf of by, who needs
// the admin scope (else EFORBIDDEN). It returns the key, which is shown
// this once and kept nowhere, and the record kept of it (without its Hash).
// name is 1 to MaxNameLen characters, none of them control, format or
// invisible, of one script, that does not read as another key's name
// without being it (name.go); scopes are AllScopes' (else EINVALID). The key and its audit row "apikey.create" are written
// in one transaction; the row holds the name and scopes, never the key.
func (s *Service) CreateKey(ctx context.Context, by *Principal, name string, scopes []string) (string, *lapse.APIKey, error) {
	if err := requireAdmin(by, "creating an API key"); err != nil {
		return "", nil, err
	}
	name, err := checkName("name", name)
	if err != nil {
		return "", nil, err
	}
	scopes, err = ParseScopes(strings.Join(scopes, ","))
	if err != nil {
		return "", nil, err
	}
	var key string
	var k *lapse.APIKey
	err = s.tx(ctx, func(as lapse.AccessStore) error {
		ks, err := as.APIKeyList(ctx)
		if err != nil {
			return err
		}
		if other, ok := lookAlike(name, ks, func(k *lapse.APIKey) string { return k.Name }, keyFold); ok {
			return errLookAlike("name", "key", other)
		}
		key, k, err = s.createKey(ctx, as, by, name, scopes)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return key, k, nil
}

// createKey inserts a new key and its audit row in the transaction as.
func (s *Service) createKey(ctx context.Context, as lapse.AccessStore, by *Principal, name string, scopes []string) (string, *lapse.APIKey, error) {
	now := s.clock.Now()
	key, prefix := newKey()
	k, err := as.APIKeyCreate(ctx, &lapse.APIKey{
		Prefix: prefix, Name: name, Scopes: scopes, Hash: hashSecret(key),
		CreatedAt: now, CreatedBy: by.Actor(),
	})
	if errors.Is(err, lapse.ErrAccessExists) {
		// 60 random bits: a taken prefix means the random source is broken,
		// and another try would not be safer.
		return "", nil, lapse.Errorf(lapse.EINTERNAL, "access: a new key's random prefix is taken")
	}
	if err != nil {
		return "", nil, err
	}
	e := by.Entry("apikey.create", "apikey:"+prefix, map[string]any{"name": name, "scopes": scopes})
	e.At, e.Result = now, "ok"
	if err := lapse.AuditAppend(ctx, as, e); err != nil {
		return "", nil, err
	}
	k.Hash = nil
	return key, k, nil
}

// Keys returns every API key, revoked ones too, by ID, without their
// hashes.
func (s *Service) Keys(ctx context.Context) ([]*lapse.APIKey, error) {
	ks, err := s.access.APIKeyList(ctx)
	for _, k := range ks {
		k.Hash = nil
	}
	return ks, err
}

// RevokeKey revokes the key with prefix (given bare or as "lapse_" and the
// prefix), on behalf of by, who needs the admin scope (else EFORBIDDEN).
// An unknown prefix is ENOTFOUND. A key already revoked is returned as it
// is, with changed false and no audit row; otherwise the revocation and its
// audit row "apikey.revoke" are written in one transaction. From then on
// Authenticate refuses the key.
func (s *Service) RevokeKey(ctx context.Context, by *Principal, prefix string) (k *lapse.APIKey, changed bool, err error) {
	if err := requireAdmin(by, "revoking an API key"); err != nil {
		return nil, false, err
	}
	prefix = strings.TrimPrefix(strings.TrimSpace(prefix), keyStart)
	if i := strings.IndexByte(prefix, '_'); i >= 0 {
		prefix = prefix[:i] // a whole key: never echo its secret
	}
	if !validPrefix(prefix) {
		return nil, false, lapse.FieldError("prefix", "is not an API key prefix (%d characters a-z, 2-7)", PrefixLen)
	}
	err = s.tx(ctx, func(as lapse.AccessStore) error {
		now := s.clock.Now()
		var err error
		changed = false // a transaction run again starts over
		if k, err = as.APIKeyGet(ctx, prefix); err != nil {
			if errors.Is(err, lapse.ErrAccessNotFound) {
				return lapse.Refine(lapse.ErrAccessNotFound, "no API key has the prefix %s", prefix)
			}
			return err
		}
		if !k.RevokedAt.IsZero() {
			return nil
		}
		if k, err = as.APIKeyRevoke(ctx, prefix, now); err != nil {
			return err
		}
		changed = true
		e := by.Entry("apikey.revoke", "apikey:"+prefix, map[string]any{"name": k.Name})
		e.At, e.Result = now, "ok"
		return lapse.AuditAppend(ctx, as, e)
	})
	if err != nil {
		return nil, false, err
	}
	k.Hash = nil
	return k, changed, nil
}

// Authenticate returns the principal of key: the configured AdminKey (with
// the admin scope), or a stored key that is not revoked (with its scopes).
// Any other key, whatever is wrong with it (unknown, malformed, revoked, a
// wrong secret), is the same EUNAUTHORIZED error. A failing store is its
// own error, not EUNAUTHORIZED.
func (s *Service) Authenticate(ctx context.Context, key string) (*Principal, error) {
	if s.adminHash != nil && subtle.ConstantTimeCompare(hashSecret(key), s.adminHash) == 1 {
		return &Principal{Kind: KindKey, ID: "admin", Name: "configured admin key", Scopes: []string{ScopeAdmin}}, nil
	}
	k, err := s.storedKey(ctx, key)
	if err != nil {
		return nil, err
	}
	if !k.RevokedAt.IsZero() {
		return nil, errBadKey()
	}
	return keyPrincipal(k), nil
}

// KeyHolder returns the principal of key, a stored key whose secret is
// right, whether it is revoked or not: who sent a request that is refused
// for its key, for the refusal's audit row (S9). It lets no one act;
// Authenticate does. Any other key (unknown, malformed, a wrong secret) is
// Authenticate's EUNAUTHORIZED error: whoever sent it holds no key.
func (s *Service) KeyHolder(ctx context.Context, key string) (*Principal, error) {
	k, err := s.storedKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return keyPrincipal(k), nil
}

// storedKey returns the stored key that key is, revoked or not: its prefix
// finds it and the hash of all of it matches. Any other key is errBadKey.
func (s *Service) storedKey(ctx context.Context, key string) (*lapse.APIKey, error) {
	prefix, ok := keyPrefix(key)
	if !ok {
		return nil, errBadKey()
	}
	k, err := s.access.APIKeyGet(ctx, prefix)
	if errors.Is(err, lapse.ErrAccessNotFound) {
		return nil, errBadKey()
	}
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(hashSecret(key), k.Hash) != 1 {
		return nil, errBadKey()
	}
	return k, nil
}

func keyPrincipal(k *lapse.APIKey) *Principal {
	return &Principal{Kind: KindKey, ID: k.Prefix, Name: k.Name, Scopes: k.Scopes}
}
