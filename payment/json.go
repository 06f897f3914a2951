package payment

import "github.com/lapsehq/lapse/internal/jsonbody"

// decodeStrict decodes one JSON object of a message whose format Lapse
// defines (the hmac scheme, the provider protocol) with the one strict
// reading every body gets: see jsonbody.Decode. Its error is EINVALID and
// names the field.
func decodeStrict(body []byte, v any) error { return jsonbody.Decode(body, v) }

// decodeLenient is decodeStrict but for keys that name no field, which it
// skips: Stripe and WeChat Pay add fields to their objects without notice,
// and a verified callback must not fail on one. See jsonbody.DecodeLenient.
func decodeLenient(body []byte, v any) error { return jsonbody.DecodeLenient(body, v) }
