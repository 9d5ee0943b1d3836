//go:build integration

package certs

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Against a real apiserver: two runs keep the same CA and certificate, the caBundle is patched (and
// accepted by the apiserver's validation), and a run inside renewBefore renews from the same CA.
func TestBootstrapAgainstAPIServer(t *testing.T) {
	_, cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := logr.NewContext(context.Background(), testr.New(t))
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := "/mutate-v1-pod"
	none := admissionregistrationv1.SideEffectClassNone
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfig},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pod.pvrescue.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: DefaultNamespace, Name: DefaultService, Path: &path},
			},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	b := &Bootstrapper{Client: cs, Now: func() time.Time { return now }, Rand: rand.Reader}
	o := NewOptions()
	get := func(name string) *corev1.Secret {
		s, err := cs.CoreV1().Secrets(DefaultNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	bundle := func() []byte {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, DefaultWebhookConfig, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return m.Webhooks[0].ClientConfig.CABundle
	}

	res, err := b.Bootstrap(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CAIssued || !res.ServingIssued || !res.BundlePatched {
		t.Fatalf("first run: %+v", res)
	}
	ca1, serving1 := get(DefaultCA), get(DefaultSecret)
	if string(bundle()) != string(ca1.Data[KeyCert]) {
		t.Fatalf("caBundle is not the CA certificate")
	}
	first := verifyServing(t, serving1, bundle(), now)

	res, err = b.Bootstrap(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.CAIssued || res.ServingIssued || res.BundlePatched {
		t.Fatalf("second run changed something: %+v", res)
	}
	if get(DefaultCA).ResourceVersion != ca1.ResourceVersion || get(DefaultSecret).ResourceVersion != serving1.ResourceVersion {
		t.Fatalf("second run wrote a Secret")
	}

	now = first.NotAfter.Add(-o.RenewBefore / 2)
	res, err = b.Bootstrap(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ServingIssued || res.CAIssued || res.BundlePatched {
		t.Fatalf("near expiry: want only the serving certificate renewed, got %+v", res)
	}
	renewed := verifyServing(t, get(DefaultSecret), bundle(), now)
	if renewed.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("serving certificate not renewed")
	}
	if string(get(DefaultCA).Data[KeyCert]) != string(ca1.Data[KeyCert]) {
		t.Fatalf("CA changed on a serving renewal")
	}
	t.Logf("serving certificate renewed: notAfter %s -> %s, same CA", first.NotAfter.Format(time.RFC3339), renewed.NotAfter.Format(time.RFC3339))
}
