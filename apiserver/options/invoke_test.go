package options

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInvokeClientFilesGoTogether(t *testing.T) {
	cases := []struct {
		name          string
		cert, key, ca string
		wantRefused   bool
	}{
		{name: "none turns runs/invoke off"},
		{name: "all three are valid", cert: "tls.crt", key: "tls.key", ca: "ca.crt"},
		{name: "a certificate alone is refused", cert: "tls.crt", wantRefused: true},
		{name: "a CA alone is refused", ca: "ca.crt", wantRefused: true},
		{name: "a pair without the CA is refused", cert: "tls.crt", key: "tls.key", wantRefused: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewInvokeOptions()
			o.ClientCertFile, o.ClientKeyFile, o.CAFile = tc.cert, tc.key, tc.ca
			errs := o.Validate()
			if tc.wantRefused {
				if assert.Len(t, errs, 1) {
					assert.ErrorContains(t, errs[0], "go together")
				}
			} else {
				assert.Empty(t, errs)
			}
		})
	}
}

func TestInvokeWaitForReady(t *testing.T) {
	cases := []struct {
		flag        string
		want        time.Duration
		wantRefused bool
	}{
		{flag: "", want: DefaultWaitForReady},
		{flag: "0", want: 0},
		{flag: "30s", want: 30 * time.Second},
		{flag: "31s", wantRefused: true},
		{flag: "-1s", wantRefused: true},
	}
	for _, tc := range cases {
		t.Run("--invoke-wait-for-ready="+tc.flag, func(t *testing.T) {
			o := NewInvokeOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if tc.flag != "" {
				require.NoError(t, fs.Parse([]string{"--invoke-wait-for-ready=" + tc.flag}))
			}
			errs := o.Validate()
			if tc.wantRefused {
				if assert.Len(t, errs, 1) {
					assert.ErrorContains(t, errs[0], "--invoke-wait-for-ready must be between 0 and 30s")
				}
				return
			}
			assert.Empty(t, errs)
			assert.Equal(t, tc.want, o.WaitForReady)
		})
	}
}
