package options

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCompletePutsStateUnderTheRepository(t *testing.T) {
	root := t.TempDir()
	o := NewOptions(io.Discard)
	o.RepoRoot = root
	require.NoError(t, o.Complete())
	assert.Equal(t, filepath.Join(root, ".local", "cluster"), o.StateDir)
	assert.Equal(t, filepath.Join(root, ".local", "kubeconfig"), o.Kubeconfig)
	assert.Equal(t, filepath.Join(".local", "kubeconfig"), o.rel(o.Kubeconfig), "paths are printed as typed from the repository")
}

func TestValidateSaysWhatIsWrong(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		podIPs  string
		mutate  func(*Options)
		wantErr string
	}{
		{name: "two replicas on etcd3 are valid", podIPs: "127.100.0.0", mutate: func(o *Options) { o.Replicas, o.Storage = 2, "etcd3" }},
		{name: "two replicas on the embedded storage are refused", podIPs: "127.100.0.0", mutate: func(o *Options) { o.Replicas = 2 },
			wantErr: "--kruntimes-apiserver-replicas=2 needs --kruntimes-storage=etcd3"},
		{name: "no replica is refused", podIPs: "127.100.0.0", mutate: func(o *Options) { o.Replicas = 0 }, wantErr: "must be at least 1"},
		{name: "the defaults are valid", podIPs: "127.100.0.0"},
		{name: "Pod IPs off loopback are refused", podIPs: "10.0.0.0", wantErr: "is not a 127.x.0.0 address"},
		{name: "an IPv6 base is refused", podIPs: "::1", wantErr: "is not a 127.x.0.0 address"},
		{name: "runtimed through aggregation is valid", podIPs: "127.100.0.0", mutate: func(o *Options) { o.RuntimedAPI = "aggregated" }},
		{name: "an unknown way for runtimed is refused", podIPs: "127.100.0.0", mutate: func(o *Options) { o.RuntimedAPI = "proxy" },
			wantErr: "--runtimed-api must be direct or aggregated"},
		{name: "an argument is refused", args: []string{"up"}, podIPs: "127.100.0.0", wantErr: "takes no arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions(io.Discard)
			o.PodIPBase = tc.podIPs
			if tc.mutate != nil {
				tc.mutate(o)
			}
			err := o.Validate(tc.args)
			if tc.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.wantErr)
			}
		})
	}
}
