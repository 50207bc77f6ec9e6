package options

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
