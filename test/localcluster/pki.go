package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/keyutil"

	"kruntimes.io/kruntimes/proto/pki"
)

// certValidity is long enough for a development cluster that lives for
// weeks; its CAs outlive their leaves.
const (
	certValidity = 365 * 24 * time.Hour
	caValidity   = 10 * certValidity
)

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
	clusterCA, err := pki.NewCA("kruntimes-local-ca", caValidity)
	if err != nil {
		return p, err
	}
	frontProxyCA, err := pki.NewCA("kruntimes-local-front-proxy-ca", caValidity)
	if err != nil {
		return p, err
	}
	if err := os.WriteFile(p.clusterCA(), clusterCA.CertPEM, 0o644); err != nil {
		return p, err
	}
	if err := os.WriteFile(p.frontProxyCA(), frontProxyCA.CertPEM, 0o644); err != nil {
		return p, err
	}
	// The cluster CA key stays so later steps can sign serving certificates.
	caKey, err := clusterCA.KeyPEM()
	if err != nil {
		return p, err
	}
	if err := os.WriteFile(p.path("ca.key"), caKey, 0o600); err != nil {
		return p, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serving := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	leaves := []struct {
		ca   *pki.CA
		name string
		leaf pki.Leaf
	}{
		{clusterCA, pairAPIServer, pki.Leaf{CommonName: "kube-apiserver", Usages: serving, IPs: loopback,
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}}},
		{clusterCA, pairAdmin, pki.Leaf{CommonName: "kubernetes-admin", Organizations: []string{"system:masters"}, Usages: client}},
		{clusterCA, pairControllerMgr, pki.Leaf{CommonName: "system:kube-controller-manager", Usages: client}},
		{clusterCA, pairScheduler, pki.Leaf{CommonName: "system:kube-scheduler", Usages: client}},
		{clusterCA, pairKubeletClient, pki.Leaf{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"kubeadm:cluster-admins"}, Usages: client}},
		{clusterCA, nodePair(nodeName, "client"), pki.Leaf{CommonName: "system:node:" + nodeName, Organizations: []string{"system:nodes"}, Usages: client}},
		{clusterCA, nodePair(nodeName, "serving"), pki.Leaf{CommonName: "system:node:" + nodeName, Usages: serving, IPs: loopback, DNSNames: []string{"localhost", nodeName}}},
		{frontProxyCA, pairFrontProxyClient, pki.Leaf{CommonName: frontProxyClientCN, Usages: client}},
	}
	for _, l := range leaves {
		if err := issueFiles(l.ca, p.cert(l.name), p.key(l.name), l.leaf); err != nil {
			return p, fmt.Errorf("issuing %s: %w", l.name, err)
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return p, err
	}
	if err := os.WriteFile(p.saKey(), pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: saKeyDER}), 0o600); err != nil {
		return p, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return p, err
	}
	// Written last: its presence marks a complete PKI directory.
	return p, os.WriteFile(p.saPubKey(), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// issueFiles writes a leaf pair signed by ca to certPath and keyPath.
func issueFiles(ca *pki.CA, certPath, keyPath string, leaf pki.Leaf) error {
	cert, key, err := ca.Issue(leaf, certValidity)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		return err
	}
	return os.WriteFile(certPath, cert, 0o644)
}

func tlsWithRoots(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
