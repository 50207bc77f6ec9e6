package options

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/proto/pki"
	"kruntimes.io/kruntimes/runtimed/health"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimed/workspace"
)

func TestDefaultsComeFromTheDownwardAPI(t *testing.T) {
	t.Setenv(runtimepod.EnvPodName, "runtime-bash-abc")
	t.Setenv(runtimepod.EnvPodNamespace, "ns")
	t.Setenv(runtimepod.EnvPodUID, "uid")
	t.Setenv(runtimepod.EnvPodIP, "10.0.0.7")
	o := NewOptions()
	assert.Equal(t, "runtime-bash-abc", o.Pod.Name)
	assert.Equal(t, "10.0.0.7:8080", o.HealthAddress, "health binds where the Pod IP is")
	assert.Equal(t, runtimepod.RuntimeSocket, o.Runtime.Socket)
	assert.NoError(t, o.Validate())

	t.Setenv(runtimepod.EnvPodIP, "")
	assert.Equal(t, "127.0.0.1:8080", NewOptions().HealthAddress, "without a Pod IP, loopback only")
}

func TestControllerFlagsParse(t *testing.T) {
	t.Setenv(runtimepod.EnvPodName, "p")
	t.Setenv(runtimepod.EnvPodNamespace, "ns")
	t.Setenv(runtimepod.EnvPodUID, "uid")
	o := NewOptions()
	fs := pflag.NewFlagSet("runtimed", pflag.ContinueOnError)
	o.AddFlags(fs)
	// Exactly what the runtime controller passes.
	require.NoError(t, fs.Parse([]string{"--runtime-socket=unix:///run/kruntimes/runtime.sock", "--workspace-dir=/workspace", "--capacity=3"}))
	assert.Equal(t, 3, o.Pod.Capacity)
	assert.NoError(t, o.Validate())
	// Deployed Pods deduplicate with the defaults.
	assert.Equal(t, DedupOptions{Window: 10 * time.Minute, MaxEntries: 1000, MaxBytes: 4 << 20, MaxPodBytes: 64 << 20}, o.Invoke.Dedup)
}

func TestRemovedEndpointFlagsAreAcceptedAndIgnored(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("runtimed", pflag.ContinueOnError)
	o.AddFlags(fs)
	var warnings strings.Builder
	fs.SetOutput(&warnings)
	// What a Runtime Pod template of an older runtime controller passes.
	require.NoError(t, fs.Parse([]string{"--endpoint-base=https://example.test", "--endpoint-ca-file=/etc/ca.crt"}))
	for _, name := range []string{"endpoint-base", "endpoint-ca-file"} {
		assert.Contains(t, warnings.String(), "Flag --"+name+" has been deprecated, it has no effect")
		assert.True(t, fs.Lookup(name).Hidden, "--%s is not in --help", name)
	}
	assert.Equal(t, NewOptions(), o, "nothing of them reaches runtimed")
}

func TestDedupFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("runtimed", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--invoke-dedup-window=0", "--invoke-dedup-max-entries=5", "--invoke-dedup-max-bytes=1024", "--invoke-dedup-max-pod-bytes=4096"}))
	assert.Equal(t, DedupOptions{Window: 0, MaxEntries: 5, MaxBytes: 1024, MaxPodBytes: 4096}, o.Invoke.Dedup, "a window of 0 turns deduplication off")
}

func TestValidateSaysWhatIsWrong(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"a TCP socket is refused", func(o *Options) { o.Runtime.Socket = "tcp://127.0.0.1:9000" }, "never listens on the network"},
		{"a relative workspace is refused", func(o *Options) { o.Runtime.WorkspaceDir = "workspace" }, "--workspace-dir must be an absolute path"},
		{"capacity 0 is refused", func(o *Options) { o.Pod.Capacity = 0 }, "--capacity must be between 1"},
		{"a missing Pod UID names the env var", func(o *Options) { o.Pod.UID = "" }, "$POD_UID"},
		{"a bad health address is refused", func(o *Options) { o.HealthAddress = "8080" }, "--health-address"},
		{"a negative GOMAXPROCS is refused", func(o *Options) { o.MaxProcs = -1 }, "--gomaxprocs must not be negative"},
		{"a negative dedup window is refused", func(o *Options) { o.Invoke.Dedup.Window = -time.Second }, "--invoke-dedup-window must not be negative"},
		{"no concurrent streams is refused", func(o *Options) { o.Invoke.MaxConcurrentStreams = 0 }, "--invoke-max-concurrent-streams must be at least 1"},
		{"no dedup entries is refused", func(o *Options) { o.Invoke.Dedup.MaxEntries = 0 }, "--invoke-dedup-max-entries must be at least 1"},
		{"no dedup bytes is refused", func(o *Options) { o.Invoke.Dedup.MaxBytes = 0 }, "--invoke-dedup-max-bytes must be at least 1"},
		{"no dedup bytes per Pod is refused", func(o *Options) { o.Invoke.Dedup.MaxPodBytes = 0 }, "--invoke-dedup-max-pod-bytes must be at least 1"},
		{"an invoke certificate without its key and CA is refused", func(o *Options) { o.Invoke.CertFile = "tls.crt" }, "go together"},
		{"an invoke key and CA without the certificate are refused", func(o *Options) { o.Invoke.KeyFile, o.Invoke.ClientCAFile = "tls.key", "ca.crt" }, "go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{Runtime: RuntimeServerOptions{Socket: runtimepod.RuntimeSocket, WorkspaceDir: "/workspace"},
				Pod: PodOptions{Name: "p", Namespace: "ns", UID: "uid", Capacity: 1}, HealthAddress: "127.0.0.1:8080"}
			tc.mutate(o)
			err := o.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestKruntimesAPIServer(t *testing.T) {
	t.Setenv(runtimepod.EnvPodName, "p")
	t.Setenv(runtimepod.EnvPodNamespace, "ns")
	t.Setenv(runtimepod.EnvPodUID, "uid")
	parse := func(args ...string) *Options {
		o := NewOptions()
		fs := pflag.NewFlagSet("runtimed", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(args))
		return o
	}

	t.Setenv(runtimepod.EnvKruntimesAPICA, "")
	err := parse("--kruntimes-api-server=https://kruntimes-apiserver.kruntimes-system.svc").Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs $"+runtimepod.EnvKruntimesAPICA)

	t.Setenv(runtimepod.EnvKruntimesAPICA, "-----BEGIN CERTIFICATE-----")
	err = parse("--kruntimes-api-server=http://kruntimes-apiserver.kruntimes-system.svc/apis").Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--kruntimes-api-server must be https://host[:port] with no path")

	o := parse("--kruntimes-api-server=https://kruntimes-apiserver.kruntimes-system.svc:443")
	require.NoError(t, o.Validate())
	kube := &rest.Config{Host: "https://10.96.0.1", BearerTokenFile: "/var/run/secrets/token", QPS: 200,
		TLSClientConfig: rest.TLSClientConfig{CAFile: "/var/run/secrets/ca.crt", ServerName: "kubernetes"}}
	c := o.Client.kruntimesConfig(kube)
	assert.Equal(t, "https://kruntimes-apiserver.kruntimes-system.svc:443", c.Host)
	assert.Equal(t, "/var/run/secrets/token", c.BearerTokenFile, "the same Pod-bound token")
	assert.Equal(t, float32(200), c.QPS)
	assert.Empty(t, c.CAFile, "the cluster's CA does not verify kruntimes-apiserver")
	assert.Equal(t, []byte("-----BEGIN CERTIFICATE-----"), c.CAData)
	assert.Empty(t, c.ServerName)
	assert.Equal(t, "https://10.96.0.1", kube.Host, "the Kubernetes API config is left alone")

	assert.Same(t, kube, parse().Client.kruntimesConfig(kube), "without the flag, through the Kubernetes API")
}

func TestConfigBuildsWhatRunNeeds(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// Never dialed: Config builds clients without calling the API.
	require.NoError(t, clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: "https://127.0.0.1:1"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: "t"}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "c",
	}, kubeconfig))
	ca, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
	require.NoError(t, err)
	cert, key, err := ca.IssueServing("ns", "bash", time.Hour)
	require.NoError(t, err)
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	for file, data := range map[string][]byte{certFile: cert, keyFile: key, caFile: ca.CertPEM} {
		require.NoError(t, os.WriteFile(file, data, 0o600))
	}
	options := func() *Options {
		o := NewOptions()
		o.Pod = PodOptions{Name: "p", Namespace: "ns", UID: "uid", RuntimeName: "bash", Capacity: 2}
		o.Client.Kubeconfig = kubeconfig
		o.HealthAddress, o.Invoke.Address, o.Invoke.MetricsAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		return o
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	t.Run("without invoke certificates the invoke server is off", func(t *testing.T) {
		o := options()
		require.NoError(t, o.Validate())
		c, err := o.Config(ctx)
		require.NoError(t, err)
		t.Cleanup(c.close)
		assert.Nil(t, c.Invoke)
		assert.Equal(t, runtimepod.Pod{Name: "p", Namespace: "ns", UID: "uid"}, c.Pod)
		assert.Equal(t, 2, c.Capacity)
		assert.Equal(t, workspace.Root(runtimepod.WorkspacePath), c.Workspace)
		assert.Equal(t, o.Shutdown, c.Shutdown)
		assert.Contains(t, c.HealthListener.Addr().String(), "127.0.0.1:", "the health port is bound")
	})
	t.Run("with them it listens and deduplicates as told", func(t *testing.T) {
		o := options()
		o.Invoke.CertFile, o.Invoke.KeyFile, o.Invoke.ClientCAFile = certFile, keyFile, caFile
		o.Invoke.Dedup.Window = time.Minute
		require.NoError(t, o.Validate())
		c, err := o.Config(ctx)
		require.NoError(t, err)
		t.Cleanup(c.close)
		require.NotNil(t, c.Invoke)
		assert.NotNil(t, c.Invoke.TLS)
		assert.Contains(t, c.Invoke.Listener.Addr().String(), "127.0.0.1:")
		assert.Equal(t, invoke.DedupConfig{Window: time.Minute, MaxEntries: 1000, MaxBytes: 4 << 20, MaxPodBytes: 64 << 20}, c.Invoke.Dedup)
		assert.Equal(t, uint32(128), c.Invoke.MaxConcurrentStreams, "the invoke server caps the streams of a connection")
		assert.Contains(t, c.Invoke.MetricsListener.Addr().String(), "127.0.0.1:", "the metrics port is bound")
	})
	t.Run("with them /metrics asks a scraper's certificate, and the health port has none", func(t *testing.T) {
		o := options()
		o.Invoke.CertFile, o.Invoke.KeyFile, o.Invoke.ClientCAFile = certFile, keyFile, caFile
		c, err := o.Config(ctx)
		require.NoError(t, err)
		t.Cleanup(c.close)
		go func() {
			_ = health.Serve(ctx, tls.NewListener(c.Invoke.MetricsListener, c.Invoke.MetricsTLS), health.MetricsHandler())
		}()
		go func() { _ = health.Serve(ctx, c.HealthListener, health.Handler(nil, nil, c.Invoke == nil)) }()

		scraperCert, scraperKey, err := ca.IssueMetricsClient(time.Hour)
		require.NoError(t, err)
		apiserverCert, apiserverKey, err := ca.IssueClient(time.Hour)
		require.NoError(t, err)
		// scrape GETs /metrics with a client pair; with http2 it offers
		// HTTP/2 first, as Prometheus does.
		scrape := func(certPEM, keyPEM []byte, http2 bool) (int, error) {
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(ca.CertPEM)
			cfg := &tls.Config{RootCAs: roots, ServerName: invocation.MetricsServerName, MinVersion: tls.VersionTLS13}
			if certPEM != nil {
				pair, err := tls.X509KeyPair(certPEM, keyPEM)
				require.NoError(t, err)
				cfg.Certificates = []tls.Certificate{pair}
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: http2}}
			defer client.CloseIdleConnections()
			resp, err := client.Get("https://" + c.Invoke.MetricsListener.Addr().String() + "/metrics")
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}
		get := func(certPEM, keyPEM []byte) (int, error) { return scrape(certPEM, keyPEM, false) }
		code, err := get(scraperCert, scraperKey)
		require.NoError(t, err, "a scraper's certificate, verified under the name every runtimed serves /metrics as")
		assert.Equal(t, http.StatusOK, code)
		code, err = scrape(scraperCert, scraperKey, true)
		require.NoError(t, err, "a scraper that offers HTTP/2 is answered")
		assert.Equal(t, http.StatusOK, code)
		_, err = get(apiserverCert, apiserverKey)
		assert.Error(t, err, "the apiserver's invoke certificate is no scraper's")
		_, err = get(nil, nil)
		assert.Error(t, err, "no certificate, no metrics")

		resp, err := http.Get("http://" + c.HealthListener.Addr().String() + "/metrics")
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the plain health port serves no metrics")
	})
	t.Run("a taken health port says which flag to change", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = taken.Close() })
		o := options()
		o.HealthAddress = taken.Addr().String()
		_, err = o.Config(ctx)
		assert.ErrorContains(t, err, "pick another --health-address")
	})
}
