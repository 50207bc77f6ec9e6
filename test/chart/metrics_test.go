package chart

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kruntimes.io/kruntimes/apis/invocation"
)

// TestRuntimedMetricsScrape: serviceMonitor.enabled renders a PodMonitor
// of every runtimed's metrics port over mutual TLS, with a client pair the
// chart issues from the runtimed CA for the CommonName runtimed's /metrics
// accepts, verifying runtimed under the name all their certificates share.
func TestRuntimedMetricsScrape(t *testing.T) {
	requireHelm(t)
	s := render(t, "--set", "serviceMonitor.enabled=true")
	monitor := s.object("PodMonitor", "kruntimes-runtimed")
	require.NotNil(t, monitor, "a PodMonitor of the runtimeds")
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "podMetricsEndpoints")
	require.Len(t, endpoints, 1)
	endpoint := endpoints[0].(map[string]any)
	assert.Equal(t, "metrics", endpoint["port"])
	assert.Equal(t, "https", endpoint["scheme"])
	serverName, _, _ := unstructured.NestedString(endpoint, "tlsConfig", "serverName")
	assert.Equal(t, invocation.MetricsServerName, serverName)
	secretName, _, _ := unstructured.NestedString(endpoint, "tlsConfig", "cert", "secret", "name")

	pairSecret := s.object("Secret", secretName)
	require.NotNil(t, pairSecret, "the PodMonitor's client pair %s is rendered", secretName)
	caSecret := s.object("Secret", "kruntimes-runtimed-ca")
	require.NotNil(t, caSecret)
	ca := certOf(t, caSecret, "tls.crt")
	client := certOf(t, pairSecret, "tls.crt")
	assert.Equal(t, invocation.MetricsClientCommonName, client.Subject.CommonName)
	assert.Contains(t, client.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	require.NoError(t, client.CheckSignatureFrom(ca), "signed by the runtimed CA")
	assert.True(t, certOf(t, pairSecret, "ca.crt").Equal(ca), "the scraper verifies runtimed with the runtimed CA")

	s = render(t, "--set", "serviceMonitor.enabled=true", "--set", "tls.type=cert-manager")
	certificate := s.object("Certificate", "kruntimes-runtimed-metrics-client")
	require.NotNil(t, certificate, "cert-manager issues the scraper's pair")
	cn, _, _ := unstructured.NestedString(certificate.Object, "spec", "commonName")
	assert.Equal(t, invocation.MetricsClientCommonName, cn)
}

func certOf(t *testing.T, secret *unstructured.Unstructured, key string) *x509.Certificate {
	t.Helper()
	encoded, _, _ := unstructured.NestedString(secret.Object, "data", key)
	der, err := base64.StdEncoding.DecodeString(encoded)
	require.NoError(t, err)
	block, _ := pem.Decode(der)
	require.NotNil(t, block, "%s of Secret %s is PEM", key, secret.GetName())
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}
