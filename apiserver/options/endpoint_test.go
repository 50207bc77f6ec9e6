package options

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/proto/pki"
	runregistry "kruntimes.io/kruntimes/registry/run"
)

func TestEndpointOptions(t *testing.T) {
	ca, err := pki.NewCA("test endpoint CA", time.Hour)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))

	for _, tc := range []struct {
		name          string
		opts          EndpointOptions
		wantInvalid   string
		wantConfigErr string
		want          runregistry.Endpoint
	}{
		{name: "the default is aggregated at kube-apiserver's default", opts: *NewEndpointOptions(),
			want: runregistry.Endpoint{Base: invocation.DefaultAggregatedBase}},
		{name: "aggregated follows --invoke-endpoint-base", opts: EndpointOptions{Mode: EndpointAggregated, AggregatedBase: "https://127.0.0.1:6443/"},
			want: runregistry.Endpoint{Base: "https://127.0.0.1:6443"}},
		{name: "an empty --invoke-endpoint-base is kube-apiserver's default, as before", opts: EndpointOptions{Mode: EndpointAggregated},
			want: runregistry.Endpoint{Base: invocation.DefaultAggregatedBase}},
		{name: "aggregated with a path is refused", opts: EndpointOptions{Mode: EndpointAggregated, AggregatedBase: "https://127.0.0.1:6443/api"},
			wantInvalid: "--invoke-endpoint-base: must be https://host[:port] with no path"},
		{name: "direct carries the Service and its CA", opts: EndpointOptions{Mode: EndpointDirect, DirectBase: invocation.DefaultDirectBase, DirectCAFile: caFile},
			want: runregistry.Endpoint{Base: invocation.DefaultDirectBase, CABundle: ca.CertPEM}},
		{name: "direct without a CA is refused", opts: EndpointOptions{Mode: EndpointDirect, DirectBase: invocation.DefaultDirectBase},
			wantInvalid: "needs --invoke-direct-endpoint-ca-file"},
		{name: "direct with a path is refused", opts: EndpointOptions{Mode: EndpointDirect, DirectBase: "https://svc/x", DirectCAFile: caFile},
			wantInvalid: "must be https://host[:port] with no path"},
		{name: "direct over http is refused", opts: EndpointOptions{Mode: EndpointDirect, DirectBase: "http://svc", DirectCAFile: caFile},
			wantInvalid: "must be https://host[:port]"},
		{name: "an unknown mode is refused", opts: EndpointOptions{Mode: "gateway"}, wantInvalid: `--invoke-endpoint must be "aggregated" or "direct"`},
		{name: "a CA file without a certificate is refused", opts: EndpointOptions{Mode: EndpointDirect, DirectBase: invocation.DefaultDirectBase, DirectCAFile: notPEM},
			wantConfigErr: "holds no PEM certificate"},
		{name: "a missing CA file is refused", opts: EndpointOptions{Mode: EndpointDirect, DirectBase: invocation.DefaultDirectBase, DirectCAFile: filepath.Join(t.TempDir(), "none")},
			wantConfigErr: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.opts.Validate()
			if tc.wantInvalid != "" {
				require.Len(t, errs, 1)
				assert.ErrorContains(t, errs[0], tc.wantInvalid)
				return
			}
			require.Empty(t, errs)
			got, err := tc.opts.Config()
			if tc.wantConfigErr != "" {
				assert.ErrorContains(t, err, tc.wantConfigErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if got.CABundle != nil {
				block, _ := pem.Decode(got.CABundle)
				_, err := x509.ParseCertificate(block.Bytes)
				assert.NoError(t, err, "caBundle holds the CA certificate")
			}
		})
	}
}

func TestEndpointURL(t *testing.T) {
	assert.Equal(t, "https://h:1/apis/kruntimes.io/v1alpha1/namespaces/a%2Fb/runs/f/invoke?uid=u%26x",
		invocation.EndpointURL("https://h:1/", "a/b", "f", "u&x"))
}

// TestEndpointOptionsDoNotReachRuntimePods: the hosted controllers' config,
// the only input of a Runtime's Pod template besides the Runtime itself, is
// the same whatever status.endpoint advertises, so changing the endpoint
// rolls no Runtime Pod.
func TestEndpointOptionsDoNotReachRuntimePods(t *testing.T) {
	ca, err := pki.NewCA("test endpoint CA", time.Hour)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	controllersConfig := func(args ...string) (runregistry.Endpoint, manager.Config) {
		o := NewServerOptions(io.Discard, io.Discard)
		fs := pflag.NewFlagSet("kruntimes-apiserver", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(args))
		require.NoError(t, o.Complete())
		require.NoError(t, o.Validate(nil))
		endpoint, err := o.Invoke.Endpoint.Config()
		require.NoError(t, err)
		cfg, err := o.Controllers.Config(nil, nil)
		require.NoError(t, err)
		return endpoint, cfg
	}
	defaultEndpoint, want := controllersConfig()
	for name, args := range map[string][]string{
		"another aggregated base": {"--invoke-endpoint-base=https://api.example.com:6443"},
		"the direct entry point":  {"--invoke-endpoint=direct", "--invoke-direct-endpoint-base=https://kruntimes.example", "--invoke-direct-endpoint-ca-file=" + caFile},
	} {
		t.Run(name, func(t *testing.T) {
			endpoint, got := controllersConfig(args...)
			require.NotEqual(t, defaultEndpoint, endpoint, "the flags change status.endpoint")
			assert.Equal(t, want, got, "and nothing the runtime controller puts in a Pod template")
		})
	}
}
