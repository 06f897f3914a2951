package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// TestAlipayFlags: the Alipay callback takes its seller from
// --alipay-seller-id, --alipay-seller-email or both, and needs one.
func TestAlipayFlags(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "alipay.pub")
	if err := os.WriteFile(file, []byte(base64.StdEncoding.EncodeToString(der)), 0o600); err != nil {
		t.Fatal(err)
	}
	build := func(args ...string) (*payments, error) {
		var o options
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		defineFlags(fs, serveSettings, &o)
		if err := fs.Parse(append([]string{"--alipay-app-id", "2021000000000001", "--alipay-public-key", file}, args...)); err != nil {
			t.Fatal(err)
		}
		return o.pf.build(context.Background(), "http://127.0.0.1:0", nil, slog.New(slog.DiscardHandler))
	}
	for _, c := range []struct {
		args      []string
		id, email string
	}{
		{[]string{"--alipay-seller-id", "2088101106499364"}, "2088101106499364", ""},
		{[]string{"--alipay-seller-email", "merchant@example.com"}, "", "merchant@example.com"},
		{[]string{"--alipay-seller-id", "2088101106499364", "--alipay-seller-email", "merchant@example.com"}, "2088101106499364", "merchant@example.com"},
	} {
		out, err := build(c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		a, ok := out.callbacks["alipay"].(*payment.Alipay)
		if !ok || a.AppID != "2021000000000001" || a.SellerID != c.id || a.SellerEmail != c.email || !a.PublicKey.Equal(&key.PublicKey) {
			t.Errorf("%v: %+v", c.args, out.callbacks["alipay"])
		}
	}
	if _, err := build(); err == nil || !strings.Contains(err.Error(), "--alipay-seller-email") {
		t.Errorf("without a seller: %v", err)
	}
}

// TestStripeAccountFlag: the Stripe callback pays only payments made on the
// account --payment-merchants names for stripe, and without one only the
// platform's own: a Connect endpoint hears every connected account.
func TestStripeAccountFlag(t *testing.T) {
	t.Parallel()
	build := func(args ...string) *payment.Stripe {
		t.Helper()
		var o options
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		defineFlags(fs, serveSettings, &o)
		if err := fs.Parse(append([]string{"--stripe-secrets", "whsec_0123456789abcdef"}, args...)); err != nil {
			t.Fatal(err)
		}
		out, err := o.pf.build(context.Background(), "http://127.0.0.1:0", nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		s, ok := out.callbacks["stripe"].(*payment.Stripe)
		if !ok {
			t.Fatalf("%v: no Stripe callback: %+v", args, out.callbacks)
		}
		return s
	}
	if s := build("--payment-merchants", "stripe=acct_1Nv0FGQ9RKHgCVdK"); s.Account != "acct_1Nv0FGQ9RKHgCVdK" {
		t.Errorf("with --payment-merchants stripe=acct_1Nv0FGQ9RKHgCVdK: Account %q", s.Account)
	}
	if s := build(); s.Account != "" {
		t.Errorf("without --payment-merchants: Account %q", s.Account)
	}
}

// TestProviderKeyFileNamedPipe: a provider's key file that is a named pipe
// is refused, as a config file is: reading it waited for a writer, and
// Ctrl-C and SIGTERM did not end lapse serve's start.
func TestProviderKeyFileNamedPipe(t *testing.T) {
	t.Parallel()
	pipe := filepath.Join(t.TempDir(), "key.pem")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal("make a named pipe:", err)
	}
	for _, args := range [][]string{
		{"--alipay-app-id", "2021000000000001", "--alipay-seller-id", "2088101106499364", "--alipay-public-key", pipe},
		{"--wechatpay-mchid", "1900000001", "--wechatpay-appid", "wx1", "--wechatpay-apiv3-key", strings.Repeat("k", 32),
			"--wechatpay-platform-keys", pipe},
	} {
		var o options
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		defineFlags(fs, serveSettings, &o)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := o.pf.build(context.Background(), "http://127.0.0.1:0", nil, slog.New(slog.DiscardHandler))
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s a named pipe: %v, want it refused", args[len(args)-2], err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s a named pipe: still reading after 10s", args[len(args)-2]) // the goroutine stays blocked
		}
	}
}
