package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/invocation"
)

func TestIssue(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.Issue(Leaf{CommonName: "kube-apiserver", Organizations: []string{"system:masters"},
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, time.Hour)
	require.NoError(t, err)
	_, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err, "the pair matches")
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"})
	assert.NoError(t, err, "an IP SAN verifies against the CA")
	assert.Equal(t, []string{"system:masters"}, cert.Subject.Organization)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, cert.ExtKeyUsage)

	keyOfCA, err := ca.KeyPEM()
	require.NoError(t, err)
	loaded, err := LoadCA(ca.CertPEM, keyOfCA)
	require.NoError(t, err)
	assert.True(t, loaded.Cert.Equal(ca.Cert), "a CA written and read back is the same CA")

	_, err = LoadCA(certPEM, keyPEM)
	assert.ErrorContains(t, err, "not a CA", "a leaf is refused as a CA")
}

// TestInvokeHopTLS dials ServerTLS with ClientTLS over loopback: only the
// apiserver's client certificate, and only a serving certificate for the
// dialed Runtime's name, complete the handshake.
func TestInvokeHopTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA(InvokeCACommonName, time.Hour)
	require.NoError(t, err)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	caFile := write("ca.crt", ca.CertPEM)
	servingCert, servingKey, err := ca.IssueServing("ns", "python", time.Hour)
	require.NoError(t, err)
	clientCert, clientKey, err := ca.IssueClient(time.Hour)
	require.NoError(t, err)
	// A client pair of another CommonName, from the same CA: a runtimed's
	// own serving pair is no apiserver either.
	otherCert, otherKey, err := ca.Issue(Leaf{CommonName: "someone-else", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
	require.NoError(t, err)

	serverTLS, err := ServerTLS(t.Context(), write("serving.crt", servingCert), write("serving.key", servingKey), caFile, invocation.ClientCommonName)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTLS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.(*tls.Conn).Handshake()
				_, _ = conn.Write([]byte("ok"))
			}()
		}
	}()

	dials := 0
	dial := func(certPEM, keyPEM []byte, serverName string) error {
		dials++
		name := fmt.Sprintf("client-%d", dials)
		cfg, err := ClientTLS(t.Context(), write(name+".crt", certPEM), write(name+".key", keyPEM), caFile)
		require.NoError(t, err)
		cfg = cfg.Clone()
		cfg.ServerName = serverName
		conn, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		buf := make([]byte, 2)
		_, err = conn.Read(buf) // TLS 1.3: the server's verdict on the client certificate arrives with the first read
		return err
	}
	assert.NoError(t, dial(clientCert, clientKey, invocation.ServerName("ns", "python")), "the apiserver reaches the Runtime's runtimed")
	assert.Error(t, dial(clientCert, clientKey, invocation.ServerName("ns", "bash")), "a serving certificate of another Runtime does not pass")
	assert.Error(t, dial(otherCert, otherKey, invocation.ServerName("ns", "python")), "a client certificate of another CommonName is refused")
	metricsCert, metricsKey, err := ca.IssueMetricsClient(time.Hour)
	require.NoError(t, err)
	assert.Error(t, dial(metricsCert, metricsKey, invocation.ServerName("ns", "python")), "a scraper cannot invoke")
}
