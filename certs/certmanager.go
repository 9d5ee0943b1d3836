// Package certs gives the pvrescue webhook its serving certificate: either through cert-manager (the
// objects built by Objects, identical to manifests/certificates.yaml) or, on clusters without
// cert-manager, through Bootstrap, which keeps a CA and a serving certificate in Secrets itself.
package certs

import (
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Default names of the webhook's TLS objects, shared by the manifests, the bootstrap command and tests.
const (
	DefaultNamespace     = contract.Namespace
	DefaultService       = contract.Service
	DefaultSecret        = contract.ServingSecret
	DefaultWebhookConfig = contract.WebhookConfiguration

	// DefaultSelfSignedIssuer signs only the CA certificate.
	DefaultSelfSignedIssuer = "pvrescue-selfsigned"
	// DefaultCA names the CA Certificate, its Secret and the CA Issuer built on it.
	DefaultCA = "pvrescue-ca"

	// AnnotationInjectCAFrom is cert-manager's cainjector annotation ("namespace/certificate").
	AnnotationInjectCAFrom = contract.AnnotationInjectCAFrom
)

// Names of the cert-manager objects; the zero value of a field means its default.
type Names struct {
	Namespace        string
	Service          string
	Secret           string
	SelfSignedIssuer string
	CA               string
}

// DefaultNames returns the names used by manifests/.
func DefaultNames() Names {
	return Names{
		Namespace:        DefaultNamespace,
		Service:          DefaultService,
		Secret:           DefaultSecret,
		SelfSignedIssuer: DefaultSelfSignedIssuer,
		CA:               DefaultCA,
	}
}

// DNSNames are the names the apiserver may use for the webhook Service.
func DNSNames(service, namespace string) []string {
	return []string{
		fmt.Sprintf("%s.%s.svc", service, namespace),
		fmt.Sprintf("%s.%s.svc.cluster.local", service, namespace),
	}
}

// InjectCAFrom is the value of the cainjector annotation on the webhook configuration: the serving
// Certificate, whose Secret's ca.crt is the CA (so the bundle survives serving-cert renewals).
func (n Names) InjectCAFrom() string { return n.Namespace + "/" + n.Secret }

// CertManagerObjects are the four cert-manager objects of the webhook's certificate chain, in the
// order they must exist.
type CertManagerObjects struct {
	SelfSignedIssuer *cmapi.Issuer
	CACertificate    *cmapi.Certificate
	CAIssuer         *cmapi.Issuer
	Serving          *cmapi.Certificate
}

// List returns the objects in creation order.
func (o CertManagerObjects) List() []any {
	return []any{o.SelfSignedIssuer, o.CACertificate, o.CAIssuer, o.Serving}
}

const (
	caDuration      = 10 * 365 * 24 * time.Hour // 87600h
	servingDuration = 90 * 24 * time.Hour       // 2160h
	renewBefore     = 30 * 24 * time.Hour       // 720h
)

// Objects builds the self-signed Issuer → CA Certificate → CA Issuer → serving Certificate chain.
// The serving certificate is renewed often and with a new key; the CA rarely, because renewing it
// changes the caBundle.
func Objects(n Names) CertManagerObjects {
	issuerRef := func(name string) cmmeta.IssuerReference {
		return cmmeta.IssuerReference{Group: "cert-manager.io", Kind: cmapi.IssuerKind, Name: name}
	}
	tm := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: cmapi.SchemeGroupVersion.String(), Kind: kind}
	}
	om := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: n.Namespace} }
	ecdsa := func(rotation cmapi.PrivateKeyRotationPolicy) *cmapi.CertificatePrivateKey {
		return &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: rotation}
	}
	return CertManagerObjects{
		SelfSignedIssuer: &cmapi.Issuer{
			TypeMeta:   tm(cmapi.IssuerKind),
			ObjectMeta: om(n.SelfSignedIssuer),
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
		},
		CACertificate: &cmapi.Certificate{
			TypeMeta:   tm(cmapi.CertificateKind),
			ObjectMeta: om(n.CA),
			Spec: cmapi.CertificateSpec{
				IsCA:        true,
				CommonName:  n.CA,
				SecretName:  n.CA,
				Duration:    &metav1.Duration{Duration: caDuration},
				RenewBefore: &metav1.Duration{Duration: renewBefore},
				PrivateKey:  ecdsa(""),
				IssuerRef:   issuerRef(n.SelfSignedIssuer),
			},
		},
		CAIssuer: &cmapi.Issuer{
			TypeMeta:   tm(cmapi.IssuerKind),
			ObjectMeta: om(n.CA),
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: n.CA}}},
		},
		Serving: &cmapi.Certificate{
			TypeMeta:   tm(cmapi.CertificateKind),
			ObjectMeta: om(n.Secret),
			Spec: cmapi.CertificateSpec{
				SecretName:  n.Secret,
				DNSNames:    DNSNames(n.Service, n.Namespace),
				Duration:    &metav1.Duration{Duration: servingDuration},
				RenewBefore: &metav1.Duration{Duration: renewBefore},
				// A new key on every renewal: a leaked key stops being useful at the next rotation.
				PrivateKey: ecdsa(cmapi.RotationPolicyAlways),
				Usages:     []cmapi.KeyUsage{cmapi.UsageServerAuth, cmapi.UsageDigitalSignature, cmapi.UsageKeyEncipherment},
				IssuerRef:  issuerRef(n.CA),
			},
		},
	}
}
