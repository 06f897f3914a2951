package main

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/jsonbody"
	"github.com/lapsehq/lapse/internal/problem"
	"github.com/lapsehq/lapse/payment"
)

// paymentFlags configure the payment providers: whose callbacks are
// verified (and how), and which provider ports Lapse calls to refund late
// payments and to close payments before closing their orders.
type paymentFlags struct {
	sandbox       bool
	sandboxSecret string
	sandboxFail   float64
	sandboxLost   float64

	hmacSecrets   string
	stripeSecrets string

	wechatMchID, wechatAppID, wechatKey, wechatCerts  string
	alipayAppID, alipaySeller, alipayEmail, alipayKey string

	providers, providerSecrets, merchants string
	grace                                 string
}

func (p *paymentFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.sandbox, "sandbox", false, "run the built-in sandbox payment provider: callbacks at /v1/payments/sandbox/callback, its gateway at /sandbox/ (customers pay with POST /sandbox/pay)")
	fs.StringVar(&p.sandboxSecret, "sandbox-secret", "", "secret of the sandbox's signatures (its callbacks, and requests to its gateway); processes sharing a database share the sandbox and must sign alike (default: the secret kept in the database, which the first process to start brought or drew at random)")
	fs.Float64Var(&p.sandboxFail, "sandbox-fail-rate", 0, "share of the sandbox's charges, refunds and closes that fail and do nothing (0 to 1), to watch retries")
	fs.Float64Var(&p.sandboxLost, "sandbox-unknown-rate", 0, "share of the sandbox's charges, refunds and closes that take effect but lose their answer, to watch query-backs")
	fs.StringVar(&p.hmacSecrets, "hmac-secrets", "", "comma-separated secrets of the generic HMAC callback scheme, at /v1/payments/hmac/callback (the first signs)")
	fs.StringVar(&p.stripeSecrets, "stripe-secrets", "", "comma-separated Stripe endpoint signing secrets (whsec_…): Stripe webhooks at /v1/payments/stripe/callback")
	fs.StringVar(&p.wechatMchID, "wechatpay-mchid", "", "WeChat Pay merchant id: WeChat Pay v3 notifications at /v1/payments/wechatpay/callback")
	fs.StringVar(&p.wechatAppID, "wechatpay-appid", "", "WeChat Pay app id the notifications must be for")
	fs.StringVar(&p.wechatKey, "wechatpay-apiv3-key", "", "WeChat Pay APIv3 key (32 bytes), which decrypts notifications")
	fs.StringVar(&p.wechatCerts, "wechatpay-platform-keys", "", "comma-separated PEM files of WeChat Pay platform certificates or public keys (a public key file as ID=FILE)")
	fs.StringVar(&p.alipayAppID, "alipay-app-id", "", "Alipay app_id: Alipay notifications at /v1/payments/alipay/callback")
	fs.StringVar(&p.alipaySeller, "alipay-seller-id", "", "Alipay seller_id (2088…) the notifications must be for")
	fs.StringVar(&p.alipayEmail, "alipay-seller-email", "", "Alipay seller account (seller_email) that confirms the seller of a notification without a seller_id")
	fs.StringVar(&p.alipayKey, "alipay-public-key", "", "file with Alipay's public key (base64 or PEM)")
	fs.StringVar(&p.providers, "payment-providers", "", "comma-separated NAME=URL of provider ports speaking Lapse's provider protocol (refunds, queries, closes)")
	fs.StringVar(&p.providerSecrets, "payment-provider-secrets", "", "comma-separated NAME=SECRET that sign the requests to each provider port")
	fs.StringVar(&p.merchants, "payment-merchants", "", "comma-separated NAME=ACCOUNT: the merchant account each provider's payments must be made to")
	fs.StringVar(&p.grace, "payment-grace", "", "comma-separated FLOW=DURATION: how long past its deadline an order whose customer started paying in time stays open (checkout: 2m)")
}

// applyGrace sets the grace of the flows named in --payment-grace.
func (p *paymentFlags) applyGrace(fs []*lapse.Flow) error {
	graces, err := pairs("--payment-grace", p.grace)
	if err != nil {
		return err
	}
	for name, v := range graces {
		i := slices.IndexFunc(fs, func(f *lapse.Flow) bool { return f.Name == name })
		if i < 0 {
			return fmt.Errorf("--payment-grace: no flow %q", name)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("--payment-grace: %s=%s is not a positive duration", name, v)
		}
		fs[i].Grace = d
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
// address this process serves, where the sandbox sends its callbacks; store
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
		cfg := payment.SandboxConfig{Secret: secret, CallbackURL: base + "/v1/payments/sandbox/callback",
			FailRate: p.sandboxFail, UnknownRate: p.sandboxLost, Store: store}
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
		out.callbacks["stripe"] = &payment.Stripe{Provider: "stripe", Secrets: splitSecrets(p.stripeSecrets)}
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
		pem, err := os.ReadFile(p.alipayKey)
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
	secrets, err := pairs("--payment-provider-secrets", p.providerSecrets)
	if err != nil {
		return nil, err
	}
	urls, err := pairs("--payment-providers", p.providers)
	if err != nil {
		return nil, err
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
	if out.engine.Merchants, err = pairs("--payment-merchants", p.merchants); err != nil {
		return nil, err
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
		pem, err := os.ReadFile(strings.TrimSpace(file))
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

// pairs parses a comma-separated list of NAME=VALUE.
func pairs(flag, s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%s: %q is not NAME=VALUE", flag, part)
		}
		out[k] = v
	}
	return out, nil
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
		case req.Currency == nil || !lapse.ValidCurrency(*req.Currency):
			err = lapse.FieldError("currency", "is required: an ISO 4217 code of three capital letters")
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
