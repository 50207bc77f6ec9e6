package options

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/invocation"
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
		name           string
		opts           EndpointOptions
		aggregatedBase string
		wantInvalid    string
		wantConfigErr  string
		want           runregistry.Endpoint
	}{
		{name: "the default is aggregated at kube-apiserver's default", opts: *NewEndpointOptions(),
			want: runregistry.Endpoint{Base: invocation.DefaultAggregatedBase}},
		{name: "aggregated follows --invoke-endpoint-base", opts: *NewEndpointOptions(), aggregatedBase: "https://127.0.0.1:6443/",
			want: runregistry.Endpoint{Base: "https://127.0.0.1:6443"}},
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
			got, err := tc.opts.Config(tc.aggregatedBase)
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
