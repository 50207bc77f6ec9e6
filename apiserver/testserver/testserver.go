// Package testserver runs a standalone kruntimes-apiserver inside a test
// process, on a free loopback port with its real embedded storage, and hands
// out admin clients for it: the real API for tests of the components that
// talk to it, instead of fake clientsets.
package testserver

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apiserver/options"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// Server is a kruntimes-apiserver running in this process.
type Server struct {
	// Config reaches the server as cluster admin.
	Config *rest.Config
	// Client is a clientset for Config.
	Client versioned.Interface
	// DataDir holds the embedded storage.
	DataDir string
	// Stop stops the server; the test's cleanup calls it too.
	Stop func()
}

// Start runs a standalone server with its embedded storage in dataDir (a
// fresh directory when empty), plus extraArgs, and stops it when the test
// ends. It returns once the server is ready.
func Start(t testing.TB, dataDir string, extraArgs ...string) *Server {
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
		config, ready, err = Ready(kubeconfig)
		return ready, err
	})
	require.NoError(t, err, "server did not become ready")
	config.QPS, config.Burst = 1000, 1000
	client, err := versioned.NewForConfig(config)
	require.NoError(t, err)
	return &Server{Config: config, Client: client, DataDir: dataDir, Stop: stop}
}

// Ready reports whether the server whose standalone kubeconfig is written to
// path answers /readyz, and returns its client config once the kubeconfig
// exists.
func Ready(path string) (*rest.Config, bool, error) {
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
