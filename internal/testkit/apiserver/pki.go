//go:build linux

package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// pki is a throwaway certificate authority, the API server's serving
// certificate signed by it, and the service-account signing key, all written
// as PEM files into one directory.
type pki struct {
	caCert     []byte // PEM
	caFile     string
	certFile   string
	keyFile    string
	saKeyFile  string // private key; the API server derives the public one
	saPubFile  string
	validUntil time.Time
}

// newPKI writes the files of a pki into dir. The serving certificate is
// valid for addr, for serviceIP (the default/kubernetes Service's address)
// and for the usual in-cluster names.
func newPKI(dir string, addr, serviceIP netip.Addr) (*pki, error) {
	now := time.Now()
	p := &pki{
		caFile:     filepath.Join(dir, "ca.crt"),
		certFile:   filepath.Join(dir, "apiserver.crt"),
		keyFile:    filepath.Join(dir, "apiserver.key"),
		saKeyFile:  filepath.Join(dir, "sa.key"),
		saPubFile:  filepath.Join(dir, "sa.pub"),
		validUntil: now.Add(24 * time.Hour),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "svcproxy-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              p.validUntil,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	p.caCert = pemBlock("CERTIFICATE", caDER)
	if err := os.WriteFile(p.caFile, p.caCert, 0o644); err != nil {
		return nil, err
	}
	if err := p.writeServing(caCert, caKey, addr, serviceIP); err != nil {
		return nil, err
	}
	return p, p.writeServiceAccountKey()
}

// writeServing writes the API server's key and its certificate signed by the
// CA.
func (p *pki) writeServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, addr, serviceIP netip.Addr) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    ca.NotBefore,
		NotAfter:     p.validUntil,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{addr.AsSlice(), serviceIP.AsSlice()},
		DNSNames:     []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if err := os.WriteFile(p.certFile, pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return err
	}
	return writeKey(p.keyFile, key)
}

// writeServiceAccountKey writes the key pair that signs service-account
// tokens.
func (p *pki) writeServiceAccountKey() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("service-account public key: %w", err)
	}
	if err := os.WriteFile(p.saPubFile, pemBlock("PUBLIC KEY", pub), 0o644); err != nil {
		return err
	}
	return writeKey(p.saKeyFile, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshalling %s: %w", path, err)
	}
	return os.WriteFile(path, pemBlock("EC PRIVATE KEY", der), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
