package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(data)
	require.NotNil(t, block, path)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

func TestEnsurePKI(t *testing.T) {
	dir := t.TempDir()
	p, err := ensurePKI(dir, "node-a")
	require.NoError(t, err)

	tests := []struct {
		name    string
		pair    string
		ca      string
		wantCN  string
		wantOrg []string
	}{
		{"admin is in system:masters", pairAdmin, p.clusterCA(), "kubernetes-admin", []string{"system:masters"}},
		{"node client is system:node:<name> in system:nodes", nodePair("node-a", "client"), p.clusterCA(), "system:node:node-a", []string{"system:nodes"}},
		{"front-proxy client is signed by the front-proxy CA", pairFrontProxyClient, p.frontProxyCA(), frontProxyClientCN, nil},
		{"kubelet client identifies kube-apiserver to the node agent", pairKubeletClient, p.clusterCA(), "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cert := readCert(t, p.cert(tc.pair))
			ca := readCert(t, tc.ca)
			assert.NoError(t, cert.CheckSignatureFrom(ca))
			assert.Equal(t, tc.wantCN, cert.Subject.CommonName)
			assert.Equal(t, tc.wantOrg, cert.Subject.Organization)
		})
	}
	serving := readCert(t, p.cert(pairAPIServer))
	assert.Contains(t, serving.DNSNames, "kubernetes.default.svc")
	require.NoError(t, serving.VerifyHostname("127.0.0.1"))

	before, err := os.ReadFile(p.clusterCA())
	require.NoError(t, err)
	_, err = ensurePKI(dir, "node-a")
	require.NoError(t, err)
	after, err := os.ReadFile(p.clusterCA())
	require.NoError(t, err)
	assert.Equal(t, before, after, "a second start keeps the CA, so kubeconfigs stay valid")

	ca, err := (&Cluster{pki: p}).loadClusterCA()
	require.NoError(t, err)
	assert.True(t, ca.Cert.IsCA)
}

func TestReadArtifacts(t *testing.T) {
	dir := t.TempDir()
	manifest := `apiVersion: v1
kind: Namespace
metadata:
  name: kruntimes-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kruntimes-apiserver
  namespace: kruntimes-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kruntimes-apiserver:system:auth-delegator
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
---
apiVersion: v1
kind: Service
metadata:
  name: kruntimes-apiserver
  namespace: kruntimes-system
`
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "all.yaml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("not yaml"), 0o644))

	objs, err := readArtifacts(dir)
	require.NoError(t, err)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	assert.Equal(t, []string{"Namespace", "ClusterRoleBinding"}, kinds, "the Deployment and Service are replaced by the local process and the ExternalName Service")

	objs, err = readArtifacts(filepath.Join(dir, "missing"))
	require.NoError(t, err)
	assert.Empty(t, objs, "no artifacts/ yet is not an error")
}

func TestStateDirLock(t *testing.T) {
	dir := t.TempDir()
	first := &Cluster{cfg: Config{StateDir: dir}}
	require.NoError(t, first.acquireLock())
	pid, running := RunningPID(dir)
	assert.True(t, running)
	assert.Equal(t, strconv.Itoa(os.Getpid()), pid)

	second := &Cluster{cfg: Config{StateDir: dir}}
	assert.ErrorIs(t, second.acquireLock(), ErrAlreadyRunning)

	first.Stop(t.Context())
	_, running = RunningPID(dir)
	assert.False(t, running, "Stop releases the state directory")
	require.NoError(t, second.acquireLock())
	second.Stop(t.Context())
}
