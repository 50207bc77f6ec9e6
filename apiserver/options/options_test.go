package options

import (
	"io"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEtcdFlagsAreCheckedOnlyWithTheEtcdBackend(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "the embedded backend needs no --etcd-servers", args: []string{"--standalone"}},
		{name: "the etcd3 backend needs --etcd-servers", args: []string{"--standalone", "--storage-backend=etcd3"}, wantErr: "--etcd-servers must be specified"},
		{name: "the etcd3 backend with --etcd-servers is valid", args: []string{"--standalone", "--storage-backend=etcd3", "--etcd-servers=http://127.0.0.1:2379"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewServerOptions(io.Discard, io.Discard)
			fs := pflag.NewFlagSet("kruntimes-apiserver", pflag.ContinueOnError)
			o.AddFlags(fs)
			require.NoError(t, fs.Parse(tc.args))
			require.NoError(t, o.Complete())
			err := o.Validate(nil)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, err, o.Validate(nil), "Validate changes nothing, so a second call finds the same")
		})
	}
}
