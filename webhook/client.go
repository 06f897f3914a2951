package webhook

import (
	"context"
	"errors"
	"net/http"

	"github.com/lapsehq/lapse/internal/httpcall"
)

// ErrReadTimeout is in the chain of an error when the receiver accepted the
// connection but did not answer within Config.ReadTimeout.
var ErrReadTimeout = errors.New("webhook: no answer within the read timeout")

// roundTrip sends req and reads the answer; see httpcall.Brief. written
// reports whether the whole request reached the connection: when it did, a
// failure leaves the outcome unknown.
func (s *Sink) roundTrip(ctx context.Context, req *http.Request) (httpcall.Answer, bool, error) {
	return httpcall.Brief(ctx, s.client, req, s.timeouts.Read(), ErrReadTimeout)
}
