package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"
)

// Keys of the Secrets, the same as cert-manager writes, so a bootstrapped CA Secret can later back a
// cert-manager CA Issuer unchanged.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// ErrBadCertificate is wrapped when a Secret holds a certificate that cannot be used as it is.
var ErrBadCertificate = errors.New("unusable certificate")

// keyPair is a parsed certificate with its key and their PEM forms.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// backdate absorbs clock skew between this process and the apiserver.
const backdate = 5 * time.Minute

// newCA makes a self-signed CA valid from now for validity.
func newCA(r io.Reader, now time.Time, commonName string, validity time.Duration) (*keyPair, error) {
	return issue(r, "CA", &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil)
}

// newServing makes a server certificate for dnsNames signed by ca.
func newServing(r io.Reader, now time.Time, ca *keyPair, dnsNames []string, validity time.Duration) (*keyPair, error) {
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	return issue(r, "serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		DNSNames:    dnsNames,
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
}

// issue signs tmpl, with a new P-256 key and serial, by parent (nil: self-signed).
func issue(r io.Reader, what string, tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), r)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if tmpl.SerialNumber, err = rand.Int(r, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	signer, signerCert := crypto.Signer(key), tmpl
	if parent != nil {
		signer, signerCert = parent.key, parent.cert
	}
	if der, err = x509.CreateCertificate(r, tmpl, signerCert, key.Public(), signer); err != nil {
		return nil, fmt.Errorf("sign %s certificate: %w", what, err)
	}
	return parsePair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// parsePair parses a PEM certificate and key and checks that they belong together.
func parsePair(certPEM, keyPEM []byte) (*keyPair, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: private key cannot sign", ErrBadCertificate)
	}
	return &keyPair{cert: cert, key: signer, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// checkCA accepts a CA pair that stays valid for at least minRemaining.
func checkCA(p *keyPair, now time.Time, minRemaining time.Duration) error {
	switch {
	case !p.cert.IsCA:
		return fmt.Errorf("%w: not a CA", ErrBadCertificate)
	case now.Before(p.cert.NotBefore):
		return fmt.Errorf("%w: CA not valid before %s", ErrBadCertificate, p.cert.NotBefore)
	case p.cert.NotAfter.Sub(now) < minRemaining:
		return fmt.Errorf("%w: CA expires %s, renewing", ErrBadCertificate, p.cert.NotAfter.Format(time.RFC3339))
	}
	return nil
}

// checkServing accepts a serving pair signed by ca, naming every dnsName, not due for renewal.
func checkServing(p *keyPair, caPEM, storedCA []byte, ca *keyPair, now time.Time, dnsNames []string, renewBefore time.Duration) error {
	if !bytes.Equal(caPEM, storedCA) {
		return fmt.Errorf("%w: %s is not the current CA", ErrBadCertificate, KeyCA)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for _, name := range dnsNames {
		if _, err := p.cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("%w: %w", ErrBadCertificate, err)
		}
	}
	if p.cert.NotAfter.Sub(now) < renewBefore {
		return fmt.Errorf("%w: expires %s, within renewBefore %s", ErrBadCertificate, p.cert.NotAfter.Format(time.RFC3339), renewBefore)
	}
	return nil
}
