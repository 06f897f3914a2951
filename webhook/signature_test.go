package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/webhook"
)

const (
	secret    = "whsec_0123456789abcdef"
	newSecret = "whsec_fedcba9876543210"
)

var (
	signedAt = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	body     = []byte(`{"id":"0193a5c2-7e41-7c3a-9d1e-4b6f0a2c8e11","type":"order.closed","order":{"order_no":"A-1"}}`)
)

func TestVerify(t *testing.T) {
	t.Parallel()
	header := webhook.Sign(signedAt, body, secret)
	tol := 5 * time.Minute
	tests := []struct {
		name   string
		secret string
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		{"valid", secret, header, body, signedAt, nil},
		{"valid, at the edge of the tolerance", secret, header, body, signedAt.Add(tol), nil},
		{"valid, clock behind by the tolerance", secret, header, body, signedAt.Add(-tol), nil},
		{"valid among other signatures", secret, header + ",v1=" + strings.Repeat("ab", 32) + ",v0=legacy,v2=future", body, signedAt, nil},
		{"valid with spaces after commas", secret, strings.ReplaceAll(header, ",", ", "), body, signedAt, nil},
		{"tampered body", secret, header, append([]byte(nil), strings.Replace(string(body), "A-1", "A-2", 1)...), signedAt, webhook.ErrSignatureMismatch},
		{"empty body", secret, header, nil, signedAt, webhook.ErrSignatureMismatch},
		{"wrong secret", newSecret, header, body, signedAt, webhook.ErrSignatureMismatch},
		{"stale", secret, header, body, signedAt.Add(tol + time.Second), webhook.ErrStaleSignature},
		{"from the future", secret, header, body, signedAt.Add(-tol - time.Second), webhook.ErrStaleSignature},
		{"timestamp changed", secret, strings.Replace(header, "t=1", "t=2", 1), body, signedAt, webhook.ErrSignatureMismatch},
		{"empty", secret, "", body, signedAt, webhook.ErrMalformedSignature},
		{"no v1", secret, "t=1795953600", body, signedAt, webhook.ErrMalformedSignature},
		{"no t", secret, header[strings.Index(header, ",")+1:], body, signedAt, webhook.ErrMalformedSignature},
		{"two t", secret, "t=1795953600," + header, body, signedAt, webhook.ErrMalformedSignature},
		{"signed t", secret, strings.Replace(header, "t=", "t=+", 1), body, signedAt, webhook.ErrMalformedSignature},
		{"negative t", secret, strings.Replace(header, "t=", "t=-", 1), body, signedAt, webhook.ErrMalformedSignature},
		{"huge t", secret, strings.Replace(header, "t=", "t=99999999999999999999", 1), body, signedAt, webhook.ErrMalformedSignature},
		{"short v1", secret, header[:len(header)-2], body, signedAt, webhook.ErrMalformedSignature},
		{"v1 not hex", secret, header[:len(header)-1] + "g", body, signedAt, webhook.ErrMalformedSignature},
		{"item without =", secret, header + ",v1", body, signedAt, webhook.ErrMalformedSignature},
		{"empty key", secret, header + ",=x", body, signedAt, webhook.ErrMalformedSignature},
		{"too long", secret, header + strings.Repeat(",x=y", 2000), body, signedAt, webhook.ErrMalformedSignature},
	}
	for _, tt := range tests {
		err := webhook.Verify(tt.secret, tt.header, tt.body, tt.now, tol)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Verify = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestVerifyUpperCaseHex(t *testing.T) {
	t.Parallel()
	header := webhook.Sign(signedAt, body, secret)
	i := strings.Index(header, "v1=") + 3
	if err := webhook.Verify(secret, header[:i]+strings.ToUpper(header[i:]), body, signedAt, 0); err != nil {
		t.Errorf("Verify of upper-case hex: %v", err)
	}
}

func TestVerifyDefaultTolerance(t *testing.T) {
	t.Parallel()
	header := webhook.Sign(signedAt, body, secret)
	if err := webhook.Verify(secret, header, body, signedAt.Add(webhook.DefaultTolerance), 0); err != nil {
		t.Errorf("within the default tolerance: %v", err)
	}
	if err := webhook.Verify(secret, header, body, signedAt.Add(webhook.DefaultTolerance+time.Second), 0); !errors.Is(err, webhook.ErrStaleSignature) {
		t.Errorf("past the default tolerance: %v, want ErrStaleSignature", err)
	}
	if err := webhook.Verify("", header, body, signedAt, 0); err == nil {
		t.Error("Verify with an empty secret succeeded")
	}
}

func TestSignRotation(t *testing.T) {
	t.Parallel()
	header := webhook.Sign(signedAt, body, secret, newSecret)
	if n := strings.Count(header, "v1="); n != 2 {
		t.Fatalf("header %q has %d v1, want one per secret", header, n)
	}
	for _, s := range []string{secret, newSecret} {
		if err := webhook.Verify(s, header, body, signedAt, 0); err != nil {
			t.Errorf("Verify with %q during rotation: %v", s, err)
		}
	}
	if err := webhook.Verify("whsec_some_other_secret", header, body, signedAt, 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("Verify with a third secret: %v, want ErrSignatureMismatch", err)
	}
}

// The test vector of the package doc, from
// printf '1764417600.{"a":1}' | openssl dgst -sha256 -hmac 0123456789abcdef:
// receivers in other languages check themselves against it.
func TestSignFormat(t *testing.T) {
	t.Parallel()
	got := webhook.Sign(time.Unix(1764417600, 0), []byte(`{"a":1}`), "0123456789abcdef")
	want := "t=1764417600,v1=e7306e2a2f361e3e38138bff3cd5c14d21f4860a5a09cd2c559432c35d50d962"
	if got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(webhook.Sign(signedAt, body, secret), body, signedAt.Unix())
	f.Add(webhook.Sign(signedAt, body, secret, newSecret)+",v2=zz", []byte{}, int64(0))
	f.Add("t=,v1=", []byte("x"), int64(-1))
	f.Add("t=1,t=2,v1=00", []byte(nil), int64(1<<62))
	f.Add(",,,==,t==1,v1==", []byte("{}"), int64(1764417600))
	f.Fuzz(func(t *testing.T, header string, b []byte, unix int64) {
		// Whatever the header, Verify answers with one of its errors, and
		// accepts only a signature made with the secret.
		now := signedAt
		err := webhook.Verify(secret, header, b, now, time.Hour)
		if err != nil && !errors.Is(err, webhook.ErrMalformedSignature) &&
			!errors.Is(err, webhook.ErrSignatureMismatch) && !errors.Is(err, webhook.ErrStaleSignature) {
			t.Fatalf("Verify(%q) = %v: not one of the documented errors", header, err)
		}
		if err == nil {
			var ts string
			for item := range strings.SplitSeq(header, ",") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(item), "t="); ok {
					ts = v
				}
			}
			if !strings.Contains(strings.ToLower(header), hmacHex(secret, ts+"."+string(b))) {
				t.Fatalf("Verify accepted %q without a v1 made with the secret", header)
			}
		}

		// Whatever the body and the time, what Sign makes Verify accepts,
		// and no other body.
		at := time.Unix(int64(uint64(unix)%(1<<40)), 0)
		signed := webhook.Sign(at, b, secret)
		if err := webhook.Verify(secret, signed, b, at, time.Second); err != nil {
			t.Fatalf("Verify(Sign(%v, %q)) = %v", at, b, err)
		}
		if err := webhook.Verify(secret, signed, append(b, '!'), at, time.Second); !errors.Is(err, webhook.ErrSignatureMismatch) {
			t.Fatalf("Verify of a changed body = %v, want ErrSignatureMismatch", err)
		}
	})
}

// hmacHex is the v1 signature computed independently of the package.
func hmacHex(key, payload string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(payload))
	return hex.EncodeToString(h.Sum(nil))
}
