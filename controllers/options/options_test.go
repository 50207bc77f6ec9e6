package options

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/proto/pki"
)

func TestHealthHandler(t *testing.T) {
	cases := []struct {
		name     string
		path     string
		wantCode int
		wantBody string
	}{
		{"/healthz answers ok", "/healthz", http.StatusOK, "ok"},
		{"/healthz/ping is the one check", "/healthz/ping", http.StatusOK, "ok"},
		{"/metrics serves the registry", "/metrics", http.StatusOK, ""},
		{"anything else is not found", "/debug/pprof/", http.StatusNotFound, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			healthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			assert.Equal(t, tc.wantCode, rec.Code)
			assert.Contains(t, rec.Body.String(), tc.wantBody)
		})
	}
}

// TestServeHealthStopsWithItsContext serves on a free port, probes it and
// checks the port is released once ctx ends.
func TestServeHealthStopsWithItsContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	address := l.Addr().String()
	require.NoError(t, l.Close())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, serveHealth(ctx, address))
	resp, err := http.Get(fmt.Sprintf("http://%s/healthz", address))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok", string(body))

	cancel()
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l, err := net.Listen("tcp", address)
		if err != nil {
			return false, nil
		}
		return true, l.Close()
	})
	require.NoError(t, err, "the health port was not released after ctx ended")
}

func TestFlagsFillTheManagerConfig(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("kruntimes-controllers", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{
		"--leader-elect=false", "--scheduler-workers=8", "--recovery-heartbeat-grace-period=5s",
	}))
	require.NoError(t, o.Validate(nil))
	cfg, err := o.Controllers.Config(nil, nil)
	require.NoError(t, err)
	want := manager.NewConfig()
	want.LeaderElection.Enabled = false
	want.SchedulerWorkers = 8
	want.HeartbeatGracePeriod = 5 * time.Second
	assert.Equal(t, want, cfg)
}

func TestRemovedEndpointFlagIsAcceptedAndIgnored(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("kruntimes-controllers", pflag.ContinueOnError)
	o.AddFlags(fs)
	var warnings strings.Builder
	fs.SetOutput(&warnings)
	// What a kruntimes-controllers Deployment of the previous release passes.
	require.NoError(t, fs.Parse([]string{"--invoke-endpoint-base=https://api.example.com"}))
	require.NoError(t, o.Validate(nil))
	assert.Contains(t, warnings.String(), "Flag --invoke-endpoint-base has been deprecated, it has no effect")
	assert.True(t, fs.Lookup("invoke-endpoint-base").Hidden, "not in --help")
	cfg, err := o.Controllers.Config(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, manager.NewConfig(), cfg, "nothing of it reaches the controllers, so no Runtime Pod rolls for it")
}

func TestValidateSaysWhatIsWrong(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		mutate func(*Options)
		want   string
	}{
		{"an argument is refused", []string{"extra"}, func(*Options) {}, "takes no arguments"},
		{"a negative grace period is refused", nil, func(o *Options) { o.Controllers.Manager.HeartbeatGracePeriod = -time.Second }, "--recovery-heartbeat-grace-period must be at least 1s"},
		{"a grace period under a second is refused", nil, func(o *Options) { o.Controllers.Manager.HeartbeatGracePeriod = 500 * time.Millisecond }, "--recovery-heartbeat-grace-period must be at least 1s, got 500ms"},
		{"a CA key without its CA is refused", nil, func(o *Options) { o.Controllers.RuntimedCAKeyFile = "ca.key" }, "--runtimed-ca-key-file needs --runtimed-ca-file"},
		{"a renew deadline past the lease duration is refused", nil, func(o *Options) { o.Controllers.Manager.LeaderElection.RenewDeadline = time.Minute },
			"leader election needs --leader-elect-lease-duration (15s) > --leader-elect-renew-deadline (1m0s) > --leader-elect-retry-period (2s) > 0"},
		{"a Lease without a name is refused", nil, func(o *Options) { o.Controllers.Manager.LeaderElection.Name = "" }, "leader election needs the namespace and name of its Lease"},
		{"runtimed's direct server without its CA is refused", nil, func(o *Options) {
			o.Controllers.RuntimedKruntimesAPIServer = "https://kruntimes-apiserver.kruntimes-system.svc"
		},
			"--runtimed-kruntimes-api-server and --runtimed-kruntimes-api-ca-file go together"},
		{"runtimed's direct server over http is refused", nil, func(o *Options) {
			o.Controllers.RuntimedKruntimesAPIServer, o.Controllers.RuntimedKruntimesAPICAFile = "http://kruntimes-apiserver.kruntimes-system.svc", "ca.crt"
		}, "--runtimed-kruntimes-api-server must be https://host[:port] with no path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			assert.ErrorContains(t, o.Validate(tc.args), tc.want)
		})
	}
}

func TestRuntimedTLSFollowsTheCAFiles(t *testing.T) {
	ca, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
	require.NoError(t, err)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)
	dir := t.TempDir()
	caFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))

	cases := []struct {
		name        string
		caFile, key string
		wantTLS     bool
		wantIssuer  bool
	}{
		{name: "no CA: Runtime Pods get no invoke TLS"},
		{name: "a CA alone: Pods mount Secrets provided by others", caFile: caFile, wantTLS: true},
		{name: "a CA and its key: the runtime controller issues the Secrets", caFile: caFile, key: keyFile, wantTLS: true, wantIssuer: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewControllersOptions()
			o.RuntimedCAFile, o.RuntimedCAKeyFile = tc.caFile, tc.key
			cfg, err := o.Config(nil, nil)
			require.NoError(t, err)
			if !tc.wantTLS {
				assert.Nil(t, cfg.RuntimedTLS)
				return
			}
			require.NotNil(t, cfg.RuntimedTLS)
			assert.Equal(t, tc.wantIssuer, cfg.RuntimedTLS.Issuer != nil)
		})
	}

	o := NewControllersOptions()
	o.RuntimedCAFile, o.RuntimedCAKeyFile = caFile, filepath.Join(dir, "missing.key")
	_, err = o.Config(nil, nil)
	assert.ErrorContains(t, err, "read --runtimed-ca-key-file")
}

func TestRuntimedKruntimesAPIReadsItsCA(t *testing.T) {
	ca, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	caFile, notPEM := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))

	o := NewControllersOptions()
	cfg, err := o.Config(nil, nil)
	require.NoError(t, err)
	assert.Nil(t, cfg.RuntimedKruntimesAPI, "without the flags runtimed goes through the Kubernetes API")

	o.RuntimedKruntimesAPIServer, o.RuntimedKruntimesAPICAFile = "https://kruntimes-apiserver.kruntimes-system.svc", caFile
	cfg, err = o.Config(nil, nil)
	require.NoError(t, err)
	require.NotNil(t, cfg.RuntimedKruntimesAPI)
	assert.Equal(t, "https://kruntimes-apiserver.kruntimes-system.svc", cfg.RuntimedKruntimesAPI.Server)
	assert.Equal(t, ca.CertPEM, cfg.RuntimedKruntimesAPI.CA)

	o.RuntimedKruntimesAPICAFile = notPEM
	_, err = o.Config(nil, nil)
	assert.ErrorContains(t, err, "--runtimed-kruntimes-api-ca-file "+notPEM+" holds no PEM certificate")
}
