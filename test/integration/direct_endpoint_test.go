package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/proto/pki"
)

// TestDirectEndpointInStatus: with --invoke-endpoint=direct, a Ready
// function's status.endpoint is this server's Service URL whatever the
// status writer sent, and its caBundle verifies the server's real serving
// certificate under the Service name.
func TestDirectEndpointInStatus(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("kruntimes-apiserver serving CA", time.Hour)
	require.NoError(t, err)
	service := "kruntimes-apiserver.kruntimes-system.svc"
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{
		CommonName: service,
		DNSNames:   []string{service},
		IPs:        []net.IP{net.ParseIP("127.0.0.1")},
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, time.Hour)
	require.NoError(t, err)
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	// The chain, so the standalone kubeconfig (which trusts this file) verifies it.
	require.NoError(t, os.WriteFile(certFile, append(append([]byte{}, certPEM...), ca.CertPEM...), 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))

	s := startServer(t, "",
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile,
		"--invoke-endpoint=direct",
		"--invoke-direct-endpoint-base=https://"+service,
		"--invoke-direct-endpoint-ca-file="+caFile)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs := s.client.KruntimesV1alpha1().Runs(namespace)
	run, err := runs.Create(ctx, functionRun("fn"), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, step := range steps(scheduled, running, ready) {
		step(&run.Status)
		run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	run.Status.Endpoint = &v1alpha1.RunEndpoint{
		Protocol: v1alpha1.RunEndpointProtocolHTTPS,
		URL:      "https://attacker.example/apis/kruntimes.io/v1alpha1/namespaces/default/runs/fn/invoke?uid=" + string(run.UID),
		CABundle: certPEM, // not the CA
	}
	run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)

	require.NotNil(t, run.Status.Endpoint)
	want := invocation.EndpointURL("https://"+service, namespace, "fn", string(run.UID))
	assert.Equal(t, want, run.Status.Endpoint.URL, "the server's direct URL, not the writer's")
	assert.Equal(t, ca.CertPEM, run.Status.Endpoint.CABundle)
	stored, err := runs.Get(ctx, "fn", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, run.Status.Endpoint, stored.Status.Endpoint)

	// The caBundle verifies the real server under the Service name.
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(run.Status.Endpoint.CABundle))
	u, err := url.Parse(s.config.Host)
	require.NoError(t, err)
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: pool, ServerName: service, MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "handshake with the server, trusting only status.endpoint.caBundle")
	assert.Equal(t, service, conn.ConnectionState().PeerCertificates[0].Subject.CommonName)
	require.NoError(t, conn.Close())
}
