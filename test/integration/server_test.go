package integration

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apiserver/options"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// testServer is a kruntimes-apiserver running in this process.
type testServer struct {
	config  *rest.Config
	client  versioned.Interface
	dataDir string
	stop    func()
}

// startServer runs a standalone kruntimes-apiserver on a free loopback port
// with its embedded storage in dataDir (a fresh directory when empty) and
// stops it when the test ends. It returns once the server is ready.
func startServer(t testing.TB, dataDir string, extraArgs ...string) *testServer {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	workDir := t.TempDir()
	kubeconfig := filepath.Join(workDir, "kubeconfig")

	o := options.NewServerOptions(os.Stdout, os.Stderr)
	fs := pflag.NewFlagSet("kruntimes-apiserver", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(append([]string{
		"--standalone",
		"--standalone-kubeconfig=" + kubeconfig,
		"--storage-path=" + dataDir,
		"--cert-dir=" + filepath.Join(workDir, "certs"),
		"--bind-address=127.0.0.1",
	}, extraArgs...)))
	listener, _, err := genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	require.NoError(t, err)
	o.RecommendedOptions.SecureServing.Listener = listener
	require.NoError(t, o.ComponentGlobalsRegistry.Set())
	require.NoError(t, o.Complete())
	require.NoError(t, o.Validate(nil))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "server stopped with an error")
		case <-time.After(30 * time.Second):
			t.Errorf("server did not stop within 30s")
		}
	}
	t.Cleanup(stop)

	var config *rest.Config
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, err
		default:
		}
		var ready bool
		config, ready, err = readyServer(kubeconfig)
		return ready, err
	})
	require.NoError(t, err, "server did not become ready")
	config.QPS, config.Burst = 1000, 1000
	client, err := versioned.NewForConfig(config)
	require.NoError(t, err)
	return &testServer{config: config, client: client, dataDir: dataDir, stop: stop}
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

// readyServer reports whether the server whose standalone kubeconfig is
// written to path answers /readyz, and returns its client config once the
// kubeconfig exists.
func readyServer(path string) (*rest.Config, bool, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, false, nil
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, false, err
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, false, err
	}
	resp, err := httpClient.Get(config.Host + "/readyz")
	if err != nil {
		return config, false, nil
	}
	resp.Body.Close()
	return config, resp.StatusCode == http.StatusOK, nil
}
