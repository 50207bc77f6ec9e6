package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// certValidity is long enough for a development cluster that lives for weeks.
const certValidity = 365 * 24 * time.Hour

// authority is a CA that signs leaf certificates for the local cluster.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// leafSpec describes one leaf certificate.
type leafSpec struct {
	commonName    string
	organizations []string
	dnsNames      []string
	ips           []net.IP
	usages        []x509.ExtKeyUsage
}

// pkiFiles are the paths of every certificate and key the cluster uses.
type pkiFiles struct {
	dir string
}

func (p pkiFiles) path(name string) string { return filepath.Join(p.dir, name) }

// CA files.
func (p pkiFiles) clusterCA() string    { return p.path("ca.crt") }
func (p pkiFiles) frontProxyCA() string { return p.path("front-proxy-ca.crt") }

// serving and client pairs: name.crt + name.key.
func (p pkiFiles) cert(name string) string { return p.path(name + ".crt") }
func (p pkiFiles) key(name string) string  { return p.path(name + ".key") }

// Service-account signing key pair.
func (p pkiFiles) saKey() string    { return p.path("sa.key") }
func (p pkiFiles) saPubKey() string { return p.path("sa.pub") }

// Names of the leaf pairs, also the file stems.
const (
	pairAPIServer        = "apiserver"
	pairAdmin            = "admin"
	pairControllerMgr    = "controller-manager"
	pairScheduler        = "scheduler"
	pairKubeletClient    = "apiserver-kubelet-client"
	pairFrontProxyClient = "front-proxy-client"
	// frontProxyClientCN is the CN kube-apiserver presents to aggregated servers.
	frontProxyClientCN = "front-proxy-client"
)

// nodePair is the file stem of a node agent's client or serving pair.
func nodePair(node, use string) string { return "node-" + node + "-" + use }

// ensurePKI creates the CAs, leaf certificates and service-account keys under
// dir unless they already exist, so that kubeconfigs and issued tokens stay
// valid across restarts of the same cluster.
func ensurePKI(dir, nodeName string) (pkiFiles, error) {
	p := pkiFiles{dir: dir}
	if _, err := os.Stat(p.saPubKey()); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	clusterCA, err := newAuthority("kruntimes-local-ca")
	if err != nil {
		return p, err
	}
	frontProxyCA, err := newAuthority("kruntimes-local-front-proxy-ca")
	if err != nil {
		return p, err
	}
	if err := writeCert(p.clusterCA(), clusterCA.cert); err != nil {
		return p, err
	}
	if err := writeCert(p.frontProxyCA(), frontProxyCA.cert); err != nil {
		return p, err
	}
	// The cluster CA key stays so later steps can sign serving certificates.
	if err := writeKey(p.path("ca.key"), clusterCA.key.(*ecdsa.PrivateKey)); err != nil {
		return p, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serving := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	leaves := []struct {
		ca   *authority
		name string
		spec leafSpec
	}{
		{clusterCA, pairAPIServer, leafSpec{commonName: "kube-apiserver", usages: serving, ips: loopback,
			dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}}},
		{clusterCA, pairAdmin, leafSpec{commonName: "kubernetes-admin", organizations: []string{"system:masters"}, usages: client}},
		{clusterCA, pairControllerMgr, leafSpec{commonName: "system:kube-controller-manager", usages: client}},
		{clusterCA, pairScheduler, leafSpec{commonName: "system:kube-scheduler", usages: client}},
		{clusterCA, pairKubeletClient, leafSpec{commonName: "kube-apiserver-kubelet-client", organizations: []string{"kubeadm:cluster-admins"}, usages: client}},
		{clusterCA, nodePair(nodeName, "client"), leafSpec{commonName: "system:node:" + nodeName, organizations: []string{"system:nodes"}, usages: client}},
		{clusterCA, nodePair(nodeName, "serving"), leafSpec{commonName: "system:node:" + nodeName, usages: serving, ips: loopback, dnsNames: []string{"localhost", nodeName}}},
		{frontProxyCA, pairFrontProxyClient, leafSpec{commonName: frontProxyClientCN, usages: client}},
	}
	for _, l := range leaves {
		if err := l.ca.issue(p.cert(l.name), p.key(l.name), l.spec); err != nil {
			return p, fmt.Errorf("issuing %s: %w", l.name, err)
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	if err := writeKey(p.saKey(), saKey); err != nil {
		return p, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return p, err
	}
	// Written last: its presence marks a complete PKI directory.
	return p, os.WriteFile(p.saPubKey(), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func newAuthority(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
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
	return &authority{cert: cert, key: key}, nil
}

func (a *authority) issue(certPath, keyPath string, spec leafSpec) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  spec.usages,
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writeCert(certPath, cert)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

func writeCert(path string, cert *x509.Certificate) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func parseAuthority(certPEM, keyPEM []byte) (*authority, error) {
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

func tlsWithRoots(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
