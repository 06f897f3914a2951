package access

import (
	"testing"

	"github.com/alexedwards/argon2id"
)

// TestDummyHashCostsWhatARealOneDoes checks that the hash an unknown
// name's login is compared against decodes with the configured parameters,
// so that comparing against it derives a key of the same cost as a real
// hash does, and that it matches no password. A hash that failed to decode
// would be refused at once, and tell by its speed that the name is unknown.
func TestDummyHashCostsWhatARealOneDoes(t *testing.T) {
	want := &argon2id.Params{Memory: 2048, Iterations: 3, Parallelism: 2, SaltLength: 16, KeyLength: 32}
	h := dummyHash(want)
	got, salt, key, err := argon2id.DecodeHash(h)
	if err != nil {
		t.Fatalf("DecodeHash(%q): %v", h, err)
	}
	if *got != *want || len(salt) != int(want.SaltLength) || len(key) != int(want.KeyLength) {
		t.Errorf("dummy hash %q has parameters %+v, salt %d and key %d bytes; want %+v", h, *got, len(salt), len(key), *want)
	}
	real, err := argon2id.CreateHash("a password", want)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := argon2id.DecodeHash(real); err != nil {
		t.Fatal(err)
	}
	if h[:len("$argon2id$v=19$m=2048,t=3,p=2$")] != real[:len("$argon2id$v=19$m=2048,t=3,p=2$")] {
		t.Errorf("dummy hash %q and real hash %q differ before the salt", h, real)
	}
	for _, p := range []string{"", "a password", "correct horse battery staple"} {
		if ok, err := argon2id.ComparePasswordAndHash(p, h); ok || err != nil {
			t.Errorf("ComparePasswordAndHash(%q, dummy) = %v, %v; want false, nil", p, ok, err)
		}
	}
	if dummyHash(want) == h {
		t.Error("two dummy hashes are the same: their salt and key are not random")
	}
}
