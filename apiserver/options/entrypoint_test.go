package options

import (
	"io"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apiserver/entrypoint"
)

func TestDelegationCachesAreSetExplicitly(t *testing.T) {
	o := NewServerOptions(io.Discard, io.Discard)
	assert.Equal(t, entrypoint.TokenReviewCacheTTL, o.RecommendedOptions.Authentication.CacheTTL)
	assert.Equal(t, entrypoint.AuthorizationCacheTTL, o.RecommendedOptions.Authorization.AllowCacheTTL)
	assert.Equal(t, entrypoint.AuthorizationCacheTTL, o.RecommendedOptions.Authorization.DenyCacheTTL)
}

func TestAuthorizationCacheTTLsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--authorization-webhook-cache-authorized-ttl=30s", "--authorization-webhook-cache-unauthorized-ttl=30s"}},
		{args: []string{"--authorization-webhook-cache-authorized-ttl=0s"}},
		{args: []string{"--authorization-webhook-cache-authorized-ttl=31s"}, wantErr: "--authorization-webhook-cache-authorized-ttl must be at most 30s"},
		{args: []string{"--authorization-webhook-cache-unauthorized-ttl=5m"}, wantErr: "--authorization-webhook-cache-unauthorized-ttl must be at most 30s"},
	} {
		o := NewServerOptions(io.Discard, io.Discard)
		fs := pflag.NewFlagSet("kruntimes-apiserver", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(tc.args))
		require.NoError(t, o.Complete())
		errs := validateDelegationCaches(o.RecommendedOptions)
		if tc.wantErr == "" {
			assert.Empty(t, errs, "%v", tc.args)
			continue
		}
		require.Len(t, errs, 1, "%v", tc.args)
		assert.ErrorContains(t, errs[0], tc.wantErr)
	}
	// Standalone has no delegated authorization to bound.
	o := NewServerOptions(io.Discard, io.Discard)
	o.Standalone.Enabled = true
	require.NoError(t, o.Complete())
	assert.Empty(t, validateDelegationCaches(o.RecommendedOptions))
}

func TestDirectEntryPointOffNeedsKubeAPIServer(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--direct-entry-point=false"}},
		{args: []string{"--standalone"}},
		{args: []string{"--standalone", "--direct-entry-point=false"}, wantErr: "--standalone has no kube-apiserver"},
	} {
		o := NewServerOptions(io.Discard, io.Discard)
		fs := pflag.NewFlagSet("kruntimes-apiserver", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(tc.args))
		require.NoError(t, o.Complete())
		err := o.Validate(nil)
		if tc.wantErr == "" {
			if err != nil {
				assert.NotContains(t, err.Error(), "--direct-entry-point", "%v", tc.args)
			}
			continue
		}
		assert.ErrorContains(t, err, tc.wantErr, "%v", tc.args)
	}
}
