package port

import (
	"context"
	"errors"
	"net/http"

	"github.com/lapsehq/lapse/internal/httpcall"
)

// ErrReadTimeout is in the chain of an error when the port accepted the
// connection but did not answer within Config.ReadTimeout.
var ErrReadTimeout = errors.New("port: no answer within the read timeout")

// roundTrip sends req and reads the answer; see httpcall.Brief. written
// reports whether the whole request reached the connection: when it did, a
// failure leaves the outcome unknown.
func (p *Port) roundTrip(ctx context.Context, req *http.Request) (httpcall.Answer, bool, error) {
	return httpcall.Brief(ctx, p.client, req, p.timeouts.Read(), ErrReadTimeout)
}
