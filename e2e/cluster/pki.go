package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the throwaway certificate authority of one test cluster and the files made from it.
type PKI struct {
	Dir string

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// Paths of the PKI files, relative to PKI.Dir.
const (
	CACert          = "ca.crt"
	APIServerCert   = "apiserver.crt"
	APIServerKey    = "apiserver.key"
	AdminCert       = "admin.crt"
	AdminKey        = "admin.key"
	KubeletCert     = "kubelet.crt"
	KubeletKey      = "kubelet.key"
	ServiceAcctKey  = "sa.key"
	ServiceAcctPub  = "sa.pub"
	caValidity      = 24 * time.Hour
	leafValidity    = 24 * time.Hour
	serviceAcctBits = 2048
)

// NewPKI makes a CA, serving and client certificates and the service-account signing key in dir.
// ips and names are the apiserver's subject alternative names; nodeName gets the kubelet's
// client certificate (system:node:<name>, group system:nodes, as the Node authorizer expects).
func NewPKI(dir string, ips []net.IP, names []string, nodeName string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pvrescue-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	p.caCert, _ = x509.ParseCertificate(der)
	p.caKey = key
	if err := writePEM(filepath.Join(dir, CACert), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if err := p.leaf(APIServerCert, APIServerKey, pkix.Name{CommonName: "kube-apiserver"}, ips, names, true); err != nil {
		return nil, err
	}
	if err := p.leaf(AdminCert, AdminKey, pkix.Name{CommonName: "e2e-admin", Organization: []string{"system:masters"}}, nil, nil, false); err != nil {
		return nil, err
	}
	if err := p.leaf(KubeletCert, KubeletKey, pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}, nil, nil, false); err != nil {
		return nil, err
	}
	sa, err := rsa.GenerateKey(rand.Reader, serviceAcctBits)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, ServiceAcctKey), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, writePEM(filepath.Join(dir, ServiceAcctPub), "PUBLIC KEY", pub)
}

// Path returns the absolute path of a PKI file.
func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

func (p *PKI) leaf(certName, keyName string, subj pkix.Name, ips []net.IP, names []string, server bool) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subj,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  ips,
		DNSNames:     names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("create %s: %w", certName, err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(p.Path(certName), "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(p.Path(keyName), "EC PRIVATE KEY", kb)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
