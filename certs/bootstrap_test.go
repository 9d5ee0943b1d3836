package certs

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func webhookConfig() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfig},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "pod.pvrescue.io"}, {Name: "other.pvrescue.io"}},
	}
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
	now time.Time
	b   *Bootstrapper
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	f := &fixture{t: t, ctx: logrContext(t), now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	f.cs = fake.NewClientset(objs...)
	f.b = &Bootstrapper{Client: f.cs, Now: func() time.Time { return f.now }, Rand: rand.Reader}
	return f
}

func (f *fixture) secret(name string) *corev1.Secret {
	f.t.Helper()
	s, err := f.cs.CoreV1().Secrets(DefaultNamespace).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatalf("get secret %s: %v", name, err)
	}
	return s
}

func (f *fixture) bundles() [][]byte {
	f.t.Helper()
	mwc, err := f.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(f.ctx, DefaultWebhookConfig, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out [][]byte
	for _, w := range mwc.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %q", data)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifyServing checks what the apiserver will check: the serving cert chains to the bundle for the
// Service's DNS name.
func verifyServing(t *testing.T, s *corev1.Secret, bundle []byte, at time.Time) *x509.Certificate {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatalf("caBundle holds no certificate")
	}
	c := parseCert(t, s.Data[KeyCert])
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "pvrescue-webhook.pvrescue-system.svc", CurrentTime: at}); err != nil {
		t.Fatalf("serving certificate does not verify against the caBundle: %v", err)
	}
	return c
}

func TestBootstrapCreatesThenIsIdempotent(t *testing.T) {
	f := newFixture(t, webhookConfig())
	o := NewOptions()

	res, err := f.b.Bootstrap(f.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CAIssued || !res.ServingIssued || !res.BundlePatched {
		t.Fatalf("first run should create everything, got %+v", res)
	}
	ca, serving := f.secret(DefaultCA), f.secret(DefaultSecret)
	if serving.Type != corev1.SecretTypeTLS || len(serving.Data[KeyKey]) == 0 {
		t.Fatalf("serving secret malformed: type %s keys %d", serving.Type, len(serving.Data))
	}
	if _, ok := serving.Data["ca.key"]; ok || strings.Contains(string(serving.Data[KeyKey]), string(ca.Data[KeyKey])) {
		t.Fatalf("the serving secret must not hold the CA key")
	}
	for i, b := range f.bundles() {
		if string(b) != string(ca.Data[KeyCert]) {
			t.Fatalf("webhook %d: caBundle is not the CA certificate", i)
		}
		verifyServing(t, serving, b, f.now)
	}

	res, err = f.b.Bootstrap(f.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.CAIssued || res.ServingIssued || res.BundlePatched {
		t.Fatalf("second run must change nothing, got %+v", res)
	}
	if string(f.secret(DefaultSecret).Data[KeyCert]) != string(serving.Data[KeyCert]) || string(f.secret(DefaultCA).Data[KeyCert]) != string(ca.Data[KeyCert]) {
		t.Fatalf("second run rewrote a certificate")
	}
}

func TestBootstrapRenewsServingBeforeExpiryKeepingCA(t *testing.T) {
	f := newFixture(t, webhookConfig())
	o := NewOptions()
	if _, err := f.b.Bootstrap(f.ctx, o); err != nil {
		t.Fatal(err)
	}
	old := parseCert(t, f.secret(DefaultSecret).Data[KeyCert])
	caBefore := f.secret(DefaultCA).Data[KeyCert]

	// One day before renewBefore is reached: nothing to do.
	f.now = old.NotAfter.Add(-o.RenewBefore - 24*time.Hour)
	if res, err := f.b.Bootstrap(f.ctx, o); err != nil || res.ServingIssued {
		t.Fatalf("renewed too early: %+v, %v", res, err)
	}
	// Inside renewBefore: a new serving certificate from the same CA, bundle untouched.
	f.now = old.NotAfter.Add(-o.RenewBefore + time.Hour)
	res, err := f.b.Bootstrap(f.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ServingIssued || res.CAIssued || res.BundlePatched {
		t.Fatalf("want only the serving certificate renewed, got %+v", res)
	}
	renewed := verifyServing(t, f.secret(DefaultSecret), f.bundles()[0], f.now)
	if renewed.SerialNumber.Cmp(old.SerialNumber) == 0 || !renewed.NotAfter.After(old.NotAfter) {
		t.Fatalf("serving certificate not renewed: serial %s, notAfter %s", renewed.SerialNumber, renewed.NotAfter)
	}
	if string(f.secret(DefaultCA).Data[KeyCert]) != string(caBefore) {
		t.Fatalf("renewing the serving certificate replaced the CA")
	}
}

func TestBootstrapReplacesExpiringCAAndPatchesBundle(t *testing.T) {
	f := newFixture(t, webhookConfig())
	o := NewOptions()
	if _, err := f.b.Bootstrap(f.ctx, o); err != nil {
		t.Fatal(err)
	}
	caOld := parseCert(t, f.secret(DefaultCA).Data[KeyCert])
	f.now = caOld.NotAfter.Add(-o.Validity)
	res, err := f.b.Bootstrap(f.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CAIssued || !res.ServingIssued || !res.BundlePatched {
		t.Fatalf("want CA, serving cert and bundle renewed, got %+v", res)
	}
	verifyServing(t, f.secret(DefaultSecret), f.bundles()[1], f.now)
}

func TestBootstrapRepairsCorruptSecretAndForeignBundle(t *testing.T) {
	mwc := webhookConfig()
	mwc.Webhooks[0].ClientConfig.CABundle = []byte("stale")
	f := newFixture(t, mwc, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultSecret, Namespace: DefaultNamespace, Labels: map[string]string{"keep": "me"}},
		Data:       map[string][]byte{KeyCert: []byte("garbage"), KeyKey: []byte("garbage")},
	})
	res, err := f.b.Bootstrap(f.ctx, NewOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !res.ServingIssued || !res.BundlePatched {
		t.Fatalf("got %+v", res)
	}
	s := f.secret(DefaultSecret)
	if s.Labels["keep"] != "me" {
		t.Errorf("update dropped the existing labels")
	}
	verifyServing(t, s, f.bundles()[0], f.now)
}

func TestBootstrapMissingWebhookConfig(t *testing.T) {
	f := newFixture(t)
	_, err := f.b.Bootstrap(f.ctx, NewOptions())
	if !errors.Is(err, ErrWebhookConfigNotFound) {
		t.Fatalf("want ErrWebhookConfigNotFound, got %v", err)
	}
	// The Secrets are still written, so the webhook can start before its configuration exists.
	f.secret(DefaultSecret)
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Options)
		want   string
	}{
		{"defaults", func(*Options) {}, ""},
		{"empty secret", func(o *Options) { o.Secret = "" }, "--secret"},
		{"same secrets", func(o *Options) { o.CASecret = o.Secret }, "must differ"},
		{"renewBefore >= validity", func(o *Options) { o.RenewBefore = o.Validity }, "--renew-before"},
		{"short CA", func(o *Options) { o.CAValidity = o.Validity }, "--ca-validity"},
		{"interval too long", func(o *Options) { o.Interval = o.RenewBefore }, "--interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			tt.modify(o)
			err := o.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want error mentioning %q, got %v", tt.want, err)
			}
		})
	}
}

func logrContext(t *testing.T) context.Context {
	return logr.NewContext(context.Background(), testr.New(t))
}
