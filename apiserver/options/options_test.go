package options

import (
	"io"
	"testing"
	"time"

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

func TestLeaderElectionAndShutdownFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o *ServerOptions)
	}{
		{name: "the hosted controllers' Lease timings are flags", args: []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"},
			check: func(t *testing.T, o *ServerOptions) {
				le := o.Controllers.Manager.LeaderElection
				assert.True(t, le.Enabled)
				assert.Equal(t, []time.Duration{4 * time.Second, 3 * time.Second, time.Second}, []time.Duration{le.LeaseDuration, le.RenewDeadline, le.RetryPeriod})
			}},
		{name: "a renew deadline past the lease duration is refused at startup", args: []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=5s"},
			wantErr: "leader election needs --leader-elect-lease-duration (4s) > --leader-elect-renew-deadline (5s)"},
		{name: "election off needs no timings", args: []string{"--leader-elect=false", "--leader-elect-retry-period=0s"}},
		{name: "the shutdown delay is a flag, and Retry-After after it the default", args: []string{"--shutdown-delay-duration=5s"},
			check: func(t *testing.T, o *ServerOptions) {
				assert.Equal(t, 5*time.Second, o.Shutdown.DelayDuration)
				assert.True(t, o.Shutdown.SendRetryAfter)
			}},
		{name: "a negative shutdown delay is refused", args: []string{"--shutdown-delay-duration=-1s"}, wantErr: "--shutdown-delay-duration must not be negative"},
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
				return
			}
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}
