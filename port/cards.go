package port

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/lapsehq/lapse"
)

var _ lapse.CardIssuer = (*Port)(nil)

// Issue asks a merchant's card service to issue the cards of a paid order,
// as the card issuer of flows that issue benefits (membership):
//
//	POST <URL>/issue
//	Idempotency-Key: lapse-cards-<order_no>
//
//	{"idempotency_key": "…", "order_no": "M-1", "user_id": "u1",
//	 "cards": [{"product": "swim-10", "visits": 10}, {"product": "gym"}]}
//
// The service issues the cards once per key and answers 2xx (or 409 when
// the key was issued before); 408, 425, 429 and 5xx are retried on the
// issue schedule; any other 4xx refuses for good, and the order goes to
// manual review. Sending the same key again is how a lost answer is
// resolved, so an unknown outcome is retried like a failure. Issue returns
// no cards: they live in the merchant's service.
func (p *Port) Issue(ctx context.Context, r *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	return nil, p.cardCall(ctx, "issue", r.IdempotencyKey, r.OrderNo, r)
}

// Revoke asks the service to revoke every card of an order (a refund
// started): POST <URL>/revoke with {"idempotency_key", "order_no"}, answered
// as Issue is. Count cards lose the visits they have left; every card of a
// bundle is voided; an order without cards is not an error. An order's
// cards may be revoked under more than one key: the refund's
// (lapse-revoke-<order_no>), and then, for cards an issue that the refund
// overtook brought after it, one of the issuing attempt's own
// (lapse-unissue-<delivery>-<attempt>-<order_no>), which must revoke them.
// No key names two orders.
func (p *Port) Revoke(ctx context.Context, r *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	return nil, p.cardCall(ctx, "revoke", r.IdempotencyKey, r.OrderNo, r)
}

func (p *Port) cardCall(ctx context.Context, op, key, orderNo string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("port %q: %s %s: %w", p.name, op, key, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url.JoinPath(op).String(), bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("port %q: %s %s: %w", p.name, op, key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderIdempotencyKey, key)
	req.Header.Set(HeaderOrderNo, orderNo)
	a, written, err := p.send(ctx, req)
	switch {
	case err != nil && written:
		return fmt.Errorf("port %q: %s %s: no answer, sent again on the next attempt under the same key: %w", p.name, op, key, err)
	case err != nil:
		return fmt.Errorf("port %q: %s %s: not sent: %w", p.name, op, key, err)
	case a.Status/100 == 2 || a.Status == http.StatusConflict:
		return nil
	}
	return fmt.Errorf("port %q: %s %s: %w", p.name, op, key,
		&StatusError{StatusCode: a.Status, Body: a.Body, Refused: a.Status/100 == 4 && !retryable(a.Status)})
}
