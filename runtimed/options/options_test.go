package options

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/runtimepod"
)

func TestDefaultsComeFromTheDownwardAPI(t *testing.T) {
	t.Setenv(runtimepod.EnvPodName, "runtime-bash-abc")
	t.Setenv(runtimepod.EnvPodNamespace, "ns")
	t.Setenv(runtimepod.EnvPodUID, "uid")
	t.Setenv(runtimepod.EnvPodIP, "10.0.0.7")
	o := NewOptions()
	assert.Equal(t, "runtime-bash-abc", o.PodName)
	assert.Equal(t, "10.0.0.7:8080", o.HealthAddress, "health binds where the Pod IP is")
	assert.Equal(t, runtimepod.RuntimeSocket, o.RuntimeSocket)
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
	assert.Equal(t, 3, o.Capacity)
	assert.NoError(t, o.Validate())
	// Deployed Pods deduplicate with the defaults.
	assert.Equal(t, 10*time.Minute, o.InvokeDedupWindow)
	assert.Equal(t, 1000, o.InvokeDedupMaxEntries)
	assert.Equal(t, int64(4<<20), o.InvokeDedupMaxBytes)
	assert.Equal(t, int64(64<<20), o.InvokeDedupMaxPodBytes)
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
	assert.Equal(t, time.Duration(0), o.InvokeDedupWindow, "0 turns deduplication off")
	assert.Equal(t, 5, o.InvokeDedupMaxEntries)
	assert.Equal(t, int64(1024), o.InvokeDedupMaxBytes)
	assert.Equal(t, int64(4096), o.InvokeDedupMaxPodBytes)
}

func TestValidateSaysWhatIsWrong(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"a TCP socket is refused", func(o *Options) { o.RuntimeSocket = "tcp://127.0.0.1:9000" }, "never listens on the network"},
		{"a relative workspace is refused", func(o *Options) { o.WorkspaceDir = "workspace" }, "--workspace-dir must be an absolute path"},
		{"capacity 0 is refused", func(o *Options) { o.Capacity = 0 }, "--capacity must be between 1"},
		{"a missing Pod UID names the env var", func(o *Options) { o.PodUID = "" }, "$POD_UID"},
		{"a bad health address is refused", func(o *Options) { o.HealthAddress = "8080" }, "--health-address"},
		{"a negative GOMAXPROCS is refused", func(o *Options) { o.MaxProcs = -1 }, "--gomaxprocs must not be negative"},
		{"a negative dedup window is refused", func(o *Options) { o.InvokeDedupWindow = -time.Second }, "--invoke-dedup-window must not be negative"},
		{"no dedup entries is refused", func(o *Options) { o.InvokeDedupMaxEntries = 0 }, "--invoke-dedup-max-entries must be at least 1"},
		{"no dedup bytes is refused", func(o *Options) { o.InvokeDedupMaxBytes = 0 }, "--invoke-dedup-max-bytes must be at least 1"},
		{"no dedup bytes per Pod is refused", func(o *Options) { o.InvokeDedupMaxPodBytes = 0 }, "--invoke-dedup-max-pod-bytes must be at least 1"},
		{"an invoke certificate without its key and CA is refused", func(o *Options) { o.InvokeCertFile = "tls.crt" }, "go together"},
		{"an invoke key and CA without the certificate are refused", func(o *Options) { o.InvokeKeyFile, o.InvokeClientCAFile = "tls.key", "ca.crt" }, "go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{RuntimeSocket: runtimepod.RuntimeSocket, WorkspaceDir: "/workspace", Capacity: 1,
				PodName: "p", PodNamespace: "ns", PodUID: "uid", HealthAddress: "127.0.0.1:8080"}
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
	c := o.kruntimesConfig(kube)
	assert.Equal(t, "https://kruntimes-apiserver.kruntimes-system.svc:443", c.Host)
	assert.Equal(t, "/var/run/secrets/token", c.BearerTokenFile, "the same Pod-bound token")
	assert.Equal(t, float32(200), c.QPS)
	assert.Empty(t, c.CAFile, "the cluster's CA does not verify kruntimes-apiserver")
	assert.Equal(t, []byte("-----BEGIN CERTIFICATE-----"), c.CAData)
	assert.Empty(t, c.ServerName)
	assert.Equal(t, "https://10.96.0.1", kube.Host, "the Kubernetes API config is left alone")

	assert.Same(t, kube, parse().kruntimesConfig(kube), "without the flag, through the Kubernetes API")
}
