package payment

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/lapsehq/lapse"
)

// SandboxSecret returns the secret a sandbox of the gateway named gateway
// signs with when its state is in store, where processes sharing a database
// find it: secret when one is given, otherwise the secret store keeps for
// the gateway, drawn at random and kept by the first caller that had none.
// A given secret is kept too when store keeps none yet, so that processes
// started later without one sign alike. kept is the secret store keeps: when
// it differs from use, another secret was kept first, and the processes that
// start without one sign with that.
func SandboxSecret(ctx context.Context, store lapse.SandboxStore, gateway string, secret []byte) (use, kept []byte, err error) {
	candidate := secret
	if len(candidate) == 0 {
		candidate = []byte(rand.Text())
	}
	kept, err = store.SandboxSecretKeep(ctx, gateway, candidate)
	if err != nil {
		return nil, nil, fmt.Errorf("payment: sandbox %s: keeping its secret: %w", gateway, err)
	}
	if len(secret) > 0 {
		return secret, kept, nil
	}
	return kept, kept, nil
}
