package integration

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/client-go/rest"

	kruntimestestserver "kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// testServer is a kruntimes-apiserver running in this process.
type testServer struct {
	config  *rest.Config
	client  versioned.Interface
	dataDir string
	stop    func()
}

// startServer runs a standalone kruntimes-apiserver in this process; see
// testserver.Start.
func startServer(t testing.TB, dataDir string, extraArgs ...string) *testServer {
	t.Helper()
	s := kruntimestestserver.Start(t, dataDir, extraArgs...)
	return &testServer{config: s.Config, client: s.Client, dataDir: s.DataDir, stop: s.Stop}
}

// raw sends one HTTP request to the server with the admin credentials and
// returns the status code and body.
func (s *testServer) raw(t testing.TB, method, path, contentType string, body []byte, header http.Header) (int, []byte) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(s.config)
	require.NoError(t, err)
	req, err := http.NewRequest(method, s.config.Host+path, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, data
}

// startEtcd3Server runs the server on the etcd3 backend, against an etcd
// embedded in the test process.
func startEtcd3Server(t testing.TB, noFsync bool) *testServer {
	t.Helper()
	cfg := testserver.NewTestConfig(t)
	// The test config skips fsync; benchmarks compare durable writes.
	cfg.UnsafeNoFsync = noFsync
	etcd := testserver.RunEtcd(t, cfg)
	return startServer(t, "", "--storage-backend=etcd3", "--etcd-servers="+strings.Join(etcd.Endpoints(), ","))
}

// forEachBackend runs test against a fresh server on every storage backend.
func forEachBackend(t *testing.T, test func(t *testing.T, s *testServer)) {
	for name, start := range map[string]func(*testing.T) *testServer{
		"embedded": func(t *testing.T) *testServer { return startServer(t, "") },
		"etcd3":    func(t *testing.T) *testServer { return startEtcd3Server(t, true) },
	} {
		t.Run(name, func(t *testing.T) { test(t, start(t)) })
	}
}
