package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// maxHeaderLen bounds the work a hostile header can cause.
const maxHeaderLen = 4 << 10

// Errors of Verify. Each says why a request is rejected; none of them should
// be answered with anything that helps an attacker beyond a 400 or 401.
var (
	ErrMalformedSignature = errors.New("webhook: malformed Lapse-Signature header")
	ErrSignatureMismatch  = errors.New("webhook: no v1 signature matches the body")
	ErrStaleSignature     = errors.New("webhook: signature timestamp outside the tolerance")
)

// Sign returns the Lapse-Signature header value for body signed at t: the
// timestamp, then one v1 signature per secret, in the order given.
func Sign(t time.Time, body []byte, secrets ...string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, secret := range secrets {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(secret, ts, body)))
	}
	return b.String()
}

// mac is the v1 signature: HMAC-SHA256 under secret of ts, ".", body.
func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks the Lapse-Signature header of a request whose raw body is
// body, received at now, against secret. It returns nil only if a v1
// signature matches (compared in constant time) and the timestamp is within
// tolerance of now, before or after; a tolerance of 0 or less means
// DefaultTolerance. Otherwise the error wraps ErrMalformedSignature,
// ErrSignatureMismatch or ErrStaleSignature. The signature is checked
// before the time, so a stale error means an authentic but old request: a
// replay, or a clock out of step.
func Verify(secret string, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return errors.New("webhook: Verify needs a secret")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	ts, sigs, err := parseSignature(header)
	if err != nil {
		return err
	}
	want := mac(secret, ts, body)
	matched := false
	for _, sig := range sigs {
		// Every candidate is compared, so the time taken does not say which
		// one, if any, matched.
		matched = hmac.Equal(want, sig) || matched
	}
	if !matched {
		return ErrSignatureMismatch
	}
	sec, _ := strconv.ParseInt(ts, 10, 64) // parseSignature checked it
	signed := time.Unix(sec, 0)
	if age := now.Sub(signed); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed at %s, received at %s", ErrStaleSignature, signed.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// parseSignature splits a Lapse-Signature header into its timestamp, as
// written, and its decoded v1 signatures. Unknown keys are skipped so that
// later schemes can be added beside v1.
func parseSignature(header string) (ts string, sigs [][]byte, err error) {
	bad := func(why string) (string, [][]byte, error) {
		return "", nil, fmt.Errorf("%w: %s", ErrMalformedSignature, why)
	}
	if len(header) > maxHeaderLen {
		return bad("too long")
	}
	seenT := false
	for item := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || k == "" {
			return bad("every item is key=value")
		}
		switch k {
		case "t":
			if seenT {
				return bad("t appears more than once")
			}
			seenT = true
			if v == "" || len(v) > 18 || strings.Trim(v, "0123456789") != "" {
				return bad("t is not a Unix time in seconds")
			}
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return bad("v1 is not a hex HMAC-SHA256")
			}
			sigs = append(sigs, sig)
		}
	}
	switch {
	case !seenT:
		return bad("no t")
	case len(sigs) == 0:
		return bad("no v1")
	}
	return ts, sigs, nil
}
