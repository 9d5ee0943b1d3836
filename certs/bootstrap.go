package certs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ErrWebhookConfigNotFound is wrapped when the MutatingWebhookConfiguration to patch does not exist.
var ErrWebhookConfigNotFound = errors.New("mutating webhook configuration not found")

// Options of `certs bootstrap`.
type Options struct {
	Namespace     string
	Secret        string // serving certificate: tls.crt, tls.key, ca.crt (what the webhook mounts)
	CASecret      string // CA key pair; kept apart so the webhook pod never holds the CA key
	Service       string
	WebhookConfig string
	// RenewBefore: a serving certificate closer than this to expiry is replaced.
	RenewBefore time.Duration
	// Validity of a new serving certificate.
	Validity time.Duration
	// CAValidity of a new CA. The CA is replaced once it would expire before a serving certificate
	// issued now, and replacing it changes the caBundle, so it is long.
	CAValidity time.Duration
	// Interval > 0 keeps running, checking every Interval; 0 runs once.
	Interval time.Duration
}

// NewOptions returns the defaults, matching manifests/.
func NewOptions() *Options {
	return &Options{
		Namespace:     DefaultNamespace,
		Secret:        DefaultSecret,
		CASecret:      DefaultCA,
		Service:       DefaultService,
		WebhookConfig: DefaultWebhookConfig,
		RenewBefore:   30 * 24 * time.Hour,
		Validity:      365 * 24 * time.Hour,
		CAValidity:    10 * 365 * 24 * time.Hour,
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the webhook Service and Secrets")
	fs.StringVar(&o.Secret, "secret", o.Secret, "Secret receiving the serving certificate (tls.crt, tls.key, ca.crt)")
	fs.StringVar(&o.CASecret, "ca-secret", o.CASecret, "Secret holding the CA key pair (never mounted by the webhook)")
	fs.StringVar(&o.Service, "service", o.Service, "webhook Service; the certificate names <service>.<namespace>.svc")
	fs.StringVar(&o.WebhookConfig, "webhook-config", o.WebhookConfig, "MutatingWebhookConfiguration whose caBundle is patched")
	fs.DurationVar(&o.RenewBefore, "renew-before", o.RenewBefore, "replace the serving certificate when it expires within this duration")
	fs.DurationVar(&o.Validity, "validity", o.Validity, "validity of a new serving certificate")
	fs.DurationVar(&o.CAValidity, "ca-validity", o.CAValidity, "validity of a new CA")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "if > 0, keep running and re-check every interval")
}

// Validate reports every bad option at once.
func (o *Options) Validate() error {
	var errs []error
	for flag, v := range map[string]string{"namespace": o.Namespace, "secret": o.Secret, "ca-secret": o.CASecret, "service": o.Service, "webhook-config": o.WebhookConfig} {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s must not be empty", flag))
		}
	}
	if o.Secret != "" && o.Secret == o.CASecret {
		errs = append(errs, fmt.Errorf("--secret and --ca-secret must differ (the webhook must not mount the CA key)"))
	}
	if o.Validity <= 0 || o.RenewBefore <= 0 || o.RenewBefore >= o.Validity {
		errs = append(errs, fmt.Errorf("need 0 < --renew-before (%s) < --validity (%s)", o.RenewBefore, o.Validity))
	}
	if o.CAValidity <= o.Validity+o.RenewBefore {
		errs = append(errs, fmt.Errorf("--ca-validity (%s) must exceed --validity + --renew-before (%s)", o.CAValidity, o.Validity+o.RenewBefore))
	}
	if o.Interval < 0 || (o.Interval > 0 && o.Interval >= o.RenewBefore) {
		errs = append(errs, fmt.Errorf("--interval (%s) must be 0 or shorter than --renew-before", o.Interval))
	}
	return errors.Join(errs...)
}

// Result says what one Bootstrap pass changed.
type Result struct {
	CAIssued      bool
	ServingIssued bool
	BundlePatched bool
	// NotAfter of the serving certificate now in the Secret.
	NotAfter time.Time
}

// Bootstrapper keeps the webhook's certificates. Now and Rand are its clock and entropy.
type Bootstrapper struct {
	Client kubernetes.Interface
	Now    func() time.Time
	Rand   io.Reader
}

// NewBootstrapper returns a Bootstrapper on the real clock and crypto/rand.
func NewBootstrapper(c kubernetes.Interface) *Bootstrapper {
	return &Bootstrapper{Client: c, Now: time.Now, Rand: rand.Reader}
}

// Run bootstraps once, or every o.Interval until ctx ends (errors are logged and retried then).
func (b *Bootstrapper) Run(ctx context.Context, o *Options) error {
	log := logr.FromContextOrDiscard(ctx).WithName("certs")
	res, err := b.Bootstrap(ctx, o)
	if o.Interval == 0 {
		return err
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		if err != nil {
			log.Error(err, "certificate bootstrap failed; retrying at the next interval")
		} else {
			log.V(1).Info("certificates checked", "caIssued", res.CAIssued, "servingIssued", res.ServingIssued, "bundlePatched", res.BundlePatched, "notAfter", res.NotAfter)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			res, err = b.Bootstrap(ctx, o)
		}
	}
}

// Bootstrap makes sure the CA Secret, the serving Secret and the caBundle are valid and consistent,
// writing only what is missing, invalid or due for renewal. Running it twice changes nothing.
func (b *Bootstrapper) Bootstrap(ctx context.Context, o *Options) (Result, error) {
	log := logr.FromContextOrDiscard(ctx).WithName("certs")
	var res Result
	if err := o.Validate(); err != nil {
		return res, err
	}
	now := b.Now()
	secrets := b.Client.CoreV1().Secrets(o.Namespace)

	caSecret, err := getSecret(ctx, secrets, o.CASecret)
	if err != nil {
		return res, err
	}
	// A serving certificate issued now must never outlive its CA.
	ca, caErr := parseSecretPair(caSecret)
	if caErr == nil {
		caErr = checkCA(ca, now, o.Validity+o.RenewBefore)
	}
	if caErr != nil {
		log.Info("issuing a new CA", "secret", o.CASecret, "reason", caErr.Error())
		if ca, err = newCA(b.Rand, now, o.CASecret, o.CAValidity); err != nil {
			return res, err
		}
		if err := putSecret(ctx, secrets, caSecret, o.CASecret, map[string][]byte{KeyCert: ca.certPEM, KeyKey: ca.keyPEM, KeyCA: ca.certPEM}); err != nil {
			return res, err
		}
		res.CAIssued = true
	}

	dnsNames := DNSNames(o.Service, o.Namespace)
	servingSecret, err := getSecret(ctx, secrets, o.Secret)
	if err != nil {
		return res, err
	}
	serving, sErr := parseSecretPair(servingSecret)
	if sErr == nil {
		sErr = checkServing(serving, ca.certPEM, servingSecret.Data[KeyCA], ca, now, dnsNames, o.RenewBefore)
	}
	if sErr != nil {
		log.Info("issuing a new serving certificate", "secret", o.Secret, "reason", sErr.Error())
		if serving, err = newServing(b.Rand, now, ca, dnsNames, o.Validity); err != nil {
			return res, err
		}
		if err := putSecret(ctx, secrets, servingSecret, o.Secret, map[string][]byte{KeyCert: serving.certPEM, KeyKey: serving.keyPEM, KeyCA: ca.certPEM}); err != nil {
			return res, err
		}
		res.ServingIssued = true
	}
	res.NotAfter = serving.cert.NotAfter

	patched, err := b.patchBundle(ctx, o.WebhookConfig, ca.certPEM)
	if err != nil {
		return res, err
	}
	res.BundlePatched = patched
	return res, nil
}

// getSecret returns the Secret or nil when it does not exist.
func getSecret(ctx context.Context, c typedcorev1.SecretInterface, name string) (*corev1.Secret, error) {
	s, err := c.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	return s, nil
}

func parseSecretPair(s *corev1.Secret) (*keyPair, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: secret does not exist", ErrBadCertificate)
	}
	return parsePair(s.Data[KeyCert], s.Data[KeyKey])
}

// putSecret creates the Secret, or updates the existing one (optimistic concurrency on its
// resourceVersion: a concurrent writer makes this pass fail instead of being overwritten).
func putSecret(ctx context.Context, c typedcorev1.SecretInterface, existing *corev1.Secret, name string, data map[string][]byte) error {
	if existing == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "pvrescue-certs-bootstrap"}},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
		if _, err := c.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create secret %s: %w", name, err)
		}
		return nil
	}
	s := existing.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range data {
		s.Data[k] = v
	}
	if _, err := c.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update secret %s: %w", name, err)
	}
	return nil
}

// patchBundle sets caBundle on every webhook of the configuration that lacks it, with one JSON patch
// guarded by a test of each webhook's name, so a concurrent reorder cannot misplace the bundle.
func (b *Bootstrapper) patchBundle(ctx context.Context, name string, caPEM []byte) (bool, error) {
	mwcs := b.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	mwc, err := mwcs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%w: %s", ErrWebhookConfigNotFound, name)
	}
	if err != nil {
		return false, fmt.Errorf("get mutatingwebhookconfiguration %s: %w", name, err)
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	for i, w := range mwc.Webhooks {
		if bytes.Equal(w.ClientConfig.CABundle, caPEM) {
			continue
		}
		ops = append(ops,
			op{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: w.Name},
			op{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: caPEM})
	}
	if len(ops) == 0 {
		return false, nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, fmt.Errorf("encode caBundle patch: %w", err)
	}
	if _, err := mwcs.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("patch caBundle of %s: %w", name, err)
	}
	return true, nil
}
