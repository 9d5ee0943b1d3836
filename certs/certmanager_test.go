package certs

import (
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/pvrescue/pvrescue/manifests"
)

// The Go objects and manifests/certificates.yaml must describe the same chain: decode the YAML into
// cert-manager's types and compare semantically (durations, quantities, field defaults).
func TestObjectsMatchManifests(t *testing.T) {
	objs := Objects(DefaultNames())
	for _, want := range []*cmapi.Issuer{objs.SelfSignedIssuer, objs.CAIssuer} {
		var got cmapi.Issuer
		if err := manifests.Find("certificates.yaml", cmapi.SchemeGroupVersion.WithKind(cmapi.IssuerKind), want.Name, &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(want, &got) {
			t.Errorf("Issuer %s differs from manifests (-go +yaml):\n%s", want.Name, cmp.Diff(want, &got))
		}
	}
	for _, want := range []*cmapi.Certificate{objs.CACertificate, objs.Serving} {
		var got cmapi.Certificate
		if err := manifests.Find("certificates.yaml", cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind), want.Name, &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(want, &got) {
			t.Errorf("Certificate %s differs from manifests (-go +yaml):\n%s", want.Name, cmp.Diff(want, &got))
		}
	}
	docs, err := manifests.Documents("certificates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != len(objs.List()) {
		t.Errorf("certificates.yaml has %d objects, Objects builds %d", len(docs), len(objs.List()))
	}
}

func TestChainShape(t *testing.T) {
	o := Objects(DefaultNames())
	if !o.CACertificate.Spec.IsCA || o.CACertificate.Spec.IssuerRef.Name != o.SelfSignedIssuer.Name {
		t.Errorf("CA certificate must be a CA signed by the self-signed issuer")
	}
	if o.CAIssuer.Spec.CA == nil || o.CAIssuer.Spec.CA.SecretName != o.CACertificate.Spec.SecretName {
		t.Errorf("CA issuer must use the CA certificate's secret")
	}
	if o.Serving.Spec.IsCA || o.Serving.Spec.IssuerRef.Name != o.CAIssuer.Name {
		t.Errorf("serving certificate must be a leaf signed by the CA issuer")
	}
	if got, want := o.Serving.Spec.DNSNames[0], "pvrescue-webhook.pvrescue-system.svc"; got != want {
		t.Errorf("serving DNS name %q, want %q", got, want)
	}
}

func TestInjectAnnotationMatchesManifest(t *testing.T) {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := manifests.Find("mutatingwebhookconfiguration.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"), DefaultWebhookConfig, &mwc); err != nil {
		t.Fatal(err)
	}
	if got, want := mwc.Annotations[AnnotationInjectCAFrom], DefaultNames().InjectCAFrom(); got != want {
		t.Errorf("%s = %q, want %q", AnnotationInjectCAFrom, got, want)
	}
}
