package main

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/jsonbody"
	"github.com/lapsehq/lapse/internal/problem"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/webhook"
)

// paymentFlags configure the payment providers: whose callbacks are
// verified (and how), and which provider ports Lapse calls to refund late
// payments and to close payments before closing their orders.
type paymentFlags struct {
	sandbox       bool
	sandboxSecret string
	sandboxFail   float64
	sandboxLost   float64

	hmacSecrets    string
	stripeSecrets  string
	stripeTestMode bool

	wechatMchID, wechatAppID, wechatKey, wechatCerts  string
	alipayAppID, alipaySeller, alipayEmail, alipayKey string

	providers, providerSecrets, merchants string
	grace                                 string
}

// applyGrace sets the grace of the flows named in --payment-grace.
func (p *paymentFlags) applyGrace(fs []*lapse.Flow) error {
	graces, err := parsePairs(p.grace)
	if err != nil {
		return fmt.Errorf("--payment-grace: %w", err)
	}
	for name, v := range graces {
		i := slices.IndexFunc(fs, func(f *lapse.Flow) bool { return f.Name == name })
		if i < 0 {
			return fmt.Errorf("--payment-grace: no flow %q", name)
		}
		d, err := lapse.ParseDuration(v) // as a flow file's grace
		if err != nil || d <= 0 {
			return fmt.Errorf("--payment-grace: %s=%s is not a positive duration", name, v)
		}
		fs[i].Grace = d
		if err := fs[i].Validate(); err != nil {
			return fmt.Errorf("--payment-grace: %s=%s: %s", name, v, lapse.ErrorMessage(err))
		}
	}
	return nil
}

// payments is the payment configuration built from the flags.
type payments struct {
	callbacks map[string]lapse.PaymentCallback
	engine    engine.PaymentConfig
	sandbox   *payment.Sandbox // nil unless --sandbox
}

// build checks the flags and builds callbacks and ports. base is the
// address this process serves, where the sandbox sends its callbacks (empty
// for a process that serves none, such as lapse close: its sandbox sends
// none, which closing payments never needs); store
// keeps the sandbox's state, which every process on the database shares,
// and its secret when --sandbox-secret is not given.
func (p *paymentFlags) build(ctx context.Context, base string, store lapse.SandboxStore, log *slog.Logger) (*payments, error) {
	out := &payments{callbacks: map[string]lapse.PaymentCallback{},
		engine: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{}, Merchants: map[string]string{}}}
	if p.sandbox {
		secret, kept, err := payment.SandboxSecret(ctx, store, "sandbox", []byte(p.sandboxSecret))
		if err != nil {
			return nil, fmt.Errorf("--sandbox: %w", err)
		}
		if !bytes.Equal(secret, kept) {
			log.Warn("sandbox: --sandbox-secret differs from the secret kept in the database, which the processes started without --sandbox-secret sign with; processes sharing the sandbox should sign alike")
		}
		cfg := payment.SandboxConfig{Secret: secret, FailRate: p.sandboxFail, UnknownRate: p.sandboxLost, Store: store}
		if base != "" {
			cfg.CallbackURL = base + "/v1/payments/sandbox/callback"
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--sandbox: %w", err)
		}
		out.sandbox = payment.NewSandbox(cfg)
		out.callbacks["sandbox"] = out.sandbox.Verifier()
		out.engine.Providers["sandbox"] = out.sandbox
	}
	if p.hmacSecrets != "" {
		out.callbacks["hmac"] = &payment.HMAC{Provider: "hmac", Secrets: splitSecrets(p.hmacSecrets)}
	}
	if p.stripeSecrets != "" {
		out.callbacks["stripe"] = &payment.Stripe{Provider: "stripe", Secrets: splitSecrets(p.stripeSecrets), TestMode: p.stripeTestMode}
	}
	if p.wechatMchID != "" {
		cb, err := p.wechatPay()
		if err != nil {
			return nil, err
		}
		out.callbacks["wechatpay"] = cb
	}
	if p.alipayAppID != "" {
		if (p.alipaySeller == "" && p.alipayEmail == "") || p.alipayKey == "" {
			return nil, errors.New("--alipay-app-id needs --alipay-seller-id or --alipay-seller-email (or both), and --alipay-public-key")
		}
		pem, err := readSetFile(p.alipayKey)
		if err != nil {
			return nil, fmt.Errorf("--alipay-public-key: %w", err)
		}
		key, err := payment.ParseAlipayPublicKey(string(pem))
		if err != nil {
			return nil, fmt.Errorf("--alipay-public-key %s: %w", p.alipayKey, err)
		}
		out.callbacks["alipay"] = &payment.Alipay{Provider: "alipay", AppID: p.alipayAppID, SellerID: p.alipaySeller,
			SellerEmail: p.alipayEmail, PublicKey: key}
	}
	secrets, err := parsePairs(p.providerSecrets)
	if err != nil {
		return nil, fmt.Errorf("--payment-provider-secrets: %w", err)
	}
	urls, err := parsePairs(p.providers)
	if err != nil {
		return nil, fmt.Errorf("--payment-providers: %w", err)
	}
	for name, u := range urls {
		if out.engine.Providers[name] != nil {
			return nil, fmt.Errorf("--payment-providers: %s is the built-in sandbox", name)
		}
		prov, err := payment.NewHTTPProvider(payment.HTTPProviderConfig{Name: name, BaseURL: u, Secret: []byte(secrets[name])})
		if err != nil {
			return nil, fmt.Errorf("--payment-providers %s: %w", name, err)
		}
		out.engine.Providers[name] = prov
	}
	if out.engine.Merchants, err = parsePairs(p.merchants); err != nil {
		return nil, fmt.Errorf("--payment-merchants: %w", err)
	}
	if s, ok := out.callbacks["stripe"].(*payment.Stripe); ok {
		// A Connect endpoint hears every connected account: only a
		// payment on the one named here (none: the platform's own) pays.
		s.Account = out.engine.Merchants["stripe"]
	}
	return out, nil
}

func (p *paymentFlags) wechatPay() (*payment.WeChatPay, error) {
	if p.wechatAppID == "" || len(p.wechatKey) != 32 || p.wechatCerts == "" {
		return nil, errors.New("--wechatpay-mchid needs --wechatpay-appid, a 32-byte --wechatpay-apiv3-key and --wechatpay-platform-keys")
	}
	keys := map[string]*rsa.PublicKey{}
	for _, f := range strings.Split(p.wechatCerts, ",") {
		id, file, named := strings.Cut(f, "=")
		if !named {
			id, file = "", f
		}
		pem, err := readSetFile(strings.TrimSpace(file))
		if err != nil {
			return nil, fmt.Errorf("--wechatpay-platform-keys: %w", err)
		}
		serial, key, err := payment.ParseWeChatPayKey(pem)
		if err != nil {
			return nil, fmt.Errorf("--wechatpay-platform-keys %s: %w", file, err)
		}
		if serial == "" {
			serial = id
		}
		if serial == "" {
			return nil, fmt.Errorf("--wechatpay-platform-keys %s: a public key file is given as PUB_KEY_ID_…=FILE", file)
		}
		keys[serial] = key
	}
	return &payment.WeChatPay{Provider: "wechatpay", MchID: p.wechatMchID, AppID: p.wechatAppID, APIv3Key: []byte(p.wechatKey), Platform: keys}, nil
}

// check returns what is wrong with the flags that build can tell without
// the database, so that lapse serve refuses them before it opens it:
//
//   - the sandbox's rates, which together are at most 1;
//   - the secrets that sign payment callbacks (--hmac-secrets,
//     --stripe-secrets) and the requests to the providers
//     (--payment-provider-secrets): anyone who has one can mark an order
//     paid, so each must be at least as long as a webhook's
//     (webhook.MinSecretLen bytes), and a list given holds one at least;
//   - a setting that would be ignored: --stripe-test-mode without
//     --stripe-secrets, a WeChat Pay or Alipay setting
//     without the merchant id or app id that turns the provider on, a
//     provider secret or a merchant account for a provider that is not
//     configured. A merchant account misspelt would leave the provider it
//     was meant for unchecked.
func (p *paymentFlags) check() error {
	if p.sandboxFail+p.sandboxLost > 1 {
		return fmt.Errorf("--sandbox-fail-rate %v and --sandbox-unknown-rate %v add up to more than 1", p.sandboxFail, p.sandboxLost)
	}
	if p.wechatMchID == "" && (p.wechatAppID != "" || p.wechatKey != "" || p.wechatCerts != "") {
		return errors.New("--wechatpay-appid, --wechatpay-apiv3-key and --wechatpay-platform-keys need --wechatpay-mchid, which turns WeChat Pay on")
	}
	if p.stripeSecrets == "" && p.stripeTestMode {
		return errors.New("--stripe-test-mode needs --stripe-secrets, which turns Stripe on")
	}
	if p.alipayAppID == "" && (p.alipaySeller != "" || p.alipayEmail != "" || p.alipayKey != "") {
		return errors.New("--alipay-seller-id, --alipay-seller-email and --alipay-public-key need --alipay-app-id, which turns Alipay on")
	}
	check := func(name, list string) error {
		secrets := splitSecrets(list)
		if len(secrets) == 0 {
			return fmt.Errorf("--%s: give at least one secret", name)
		}
		for i, s := range secrets {
			if len(s) < webhook.MinSecretLen {
				return fmt.Errorf("--%s: secret %d is %d bytes; at least %d are required", name, i+1, len(s), webhook.MinSecretLen)
			}
		}
		return nil
	}
	if p.hmacSecrets != "" {
		if err := check("hmac-secrets", p.hmacSecrets); err != nil {
			return err
		}
	}
	if p.stripeSecrets != "" {
		if err := check("stripe-secrets", p.stripeSecrets); err != nil {
			return err
		}
	}
	secrets, err := parsePairs(p.providerSecrets)
	if err != nil {
		return fmt.Errorf("--payment-provider-secrets: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		if err := check("payment-provider-secrets", secrets[name]); err != nil {
			return fmt.Errorf("%w (the secret of %s)", err, name)
		}
	}
	urls, err := parsePairs(p.providers)
	if err != nil {
		return fmt.Errorf("--payment-providers: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(urls)) {
		if secrets[name] == "" {
			return fmt.Errorf("--payment-providers: %s has no secret in --payment-provider-secrets", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		if _, ok := urls[name]; !ok {
			return fmt.Errorf("--payment-provider-secrets: %s is not in --payment-providers", name)
		}
	}
	merchants, err := parsePairs(p.merchants)
	if err != nil {
		return fmt.Errorf("--payment-merchants: %w", err)
	}
	known := p.providerNames(urls)
	for _, name := range slices.Sorted(maps.Keys(merchants)) {
		if !slices.Contains(known, name) {
			if len(known) == 0 {
				return fmt.Errorf("--payment-merchants: %s: no payment provider is configured", name)
			}
			return fmt.Errorf("--payment-merchants: %s is not a configured payment provider (%s)", name, strings.Join(known, ", "))
		}
	}
	return nil
}

// providerNames are the payments' providers the flags configure, sorted:
// the callbacks build verifies and the provider ports in urls.
func (p *paymentFlags) providerNames(urls map[string]string) []string {
	var names []string
	for name, on := range map[string]bool{
		"sandbox": p.sandbox, "hmac": p.hmacSecrets != "", "stripe": p.stripeSecrets != "",
		"wechatpay": p.wechatMchID != "", "alipay": p.alipayAppID != "",
	} {
		if on {
			names = append(names, name)
		}
	}
	for name := range urls {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// splitSecrets splits a comma-separated list of secrets.
func splitSecrets(s string) [][]byte {
	var out [][]byte
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, []byte(part))
		}
	}
	return out
}

// sandboxHandler serves the sandbox gateway under /sandbox/: its provider
// protocol (signed requests), and POST /sandbox/pay, where a demo customer
// pays an order: {"order_no", "amount", "currency"}, read as strictly as
// every API body. The payment's callback reaches this process like any
// provider's; when it was not delivered the answer says so in
// callback_error (the payment was made all the same: a customer's money
// moved). A refusal (a closed order) is 409; a database that did not answer
// is 503.
func sandboxHandler(sb *payment.Sandbox, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/sandbox/", http.StripPrefix("/sandbox", sb.Handler()))
	mux.HandleFunc("POST /sandbox/pay", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			OrderNo  *string `json:"order_no"`
			Amount   *int64  `json:"amount"`
			Currency *string `json:"currency"`
		}
		err := jsonbody.Read(w, r, 4096, &req)
		switch {
		case err != nil:
		case req.OrderNo == nil || *req.OrderNo == "":
			err = lapse.FieldError("order_no", "is required")
		case req.Amount == nil || *req.Amount <= 0:
			err = lapse.FieldError("amount", "is required: a positive number of minor units")
		case req.Currency == nil:
			err = lapse.CheckCurrency("currency", "")
		default:
			err = lapse.CheckCurrency("currency", *req.Currency)
		}
		if err != nil {
			p, _ := problem.Of(err)
			problem.Write(w, p)
			return
		}
		pp, err := sb.Pay(r.Context(), *req.OrderNo, *req.Amount, *req.Currency)
		out := struct {
			*lapse.ProviderPayment
			CallbackError string `json:"callback_error,omitempty"`
		}{ProviderPayment: pp}
		switch {
		case errors.Is(err, payment.ErrSandboxCallback):
			log.Warn("sandbox: paid, but the callback was not delivered", "order_no", *req.OrderNo, "err", err)
			out.CallbackError = err.Error()
		case errors.Is(err, lapse.ErrRefused):
			problem.Write(w, problem.New(http.StatusConflict, lapse.ECONFLICT, "", err.Error()))
			return
		case err != nil:
			// The gateway's state is in the database, which did not answer.
			log.Error("sandbox: pay failed", "order_no", *req.OrderNo, "err", err)
			problem.Write(w, problem.New(http.StatusServiceUnavailable, lapse.EUNAVAILABLE, "", "the sandbox gateway is unavailable; try again"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}
