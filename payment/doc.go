// Package payment verifies payment providers' callbacks by their real
// schemes and talks to providers through lapse.PaymentProvider ports.
//
// Each callback type (HMAC, Stripe, WeChatPay, Alipay) implements
// lapse.PaymentCallback: Verify checks a callback and returns the
// lapse.PaymentNotice it carries, without side effects; Ack answers the
// provider in the form it expects. Sandbox is a built-in provider, for the
// demo and the tests, with its own keys and a simulated gateway whose state
// is in a lapse.SandboxStore: in memory (MemorySandboxStore), or in the
// database, where every process on it shares one gateway.
package payment
