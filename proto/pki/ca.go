package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/util/keyutil"

	"kruntimes.io/kruntimes/apis/invocation"
)

// CA signs leaf certificates: the kruntimes CA of the invoke hop signs
// runtimed serving certificates and the apiserver's client certificate;
// the local cluster's CAs sign its components' pairs.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert, PEM-encoded: the bundle both ends trust.
	CertPEM []byte
}

// InvokeCACommonName is the CommonName of the kruntimes CA of the invoke
// hop.
const InvokeCACommonName = "kruntimes-invoke-ca"

// NewCA makes a new CA named commonName, valid for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the CA certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse the CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("the CA certificate is not a CA")
	}
	parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse the CA key: %w", err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, errors.New("the CA key cannot sign")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// Leaf describes a leaf certificate.
type Leaf struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	// Usages are the extended key usages: server or client authentication.
	Usages []x509.ExtKeyUsage
}

// IssueServing makes the serving pair of the runtimed of a Runtime, for
// invocation.ServerName(namespace, runtime).
func (ca *CA) IssueServing(namespace, runtime string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	name := invocation.ServerName(namespace, runtime)
	return ca.Issue(Leaf{CommonName: name, DNSNames: []string{name, invocation.MetricsServerName}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, validity)
}

// IssueMetricsClient makes a scraper's client pair for runtimed's /metrics.
func (ca *CA) IssueMetricsClient(validity time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(Leaf{CommonName: invocation.MetricsClientCommonName, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, validity)
}

// IssueClient makes the apiserver's client pair for the invoke hop.
func (ca *CA) IssueClient(validity time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(Leaf{CommonName: invocation.ClientCommonName, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, validity)
}

// Issue makes a leaf pair signed by ca, valid for validity (from an hour
// ago, so that a clock a little behind accepts it).
func (ca *CA) Issue(leaf Leaf, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organizations},
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  leaf.Usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: keyDER}), nil
}

// KeyPEM is the CA's key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	return keyutil.MarshalPrivateKeyToPEM(ca.Key)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
