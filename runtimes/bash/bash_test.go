package bash

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHandlerPath(t *testing.T) {
	tests := []struct {
		name    string
		handler string
		want    string
		wantErr bool
	}{
		{name: "relative script resolves under the working dir", handler: "fn/handler.sh", want: "/w/fn/handler.sh"},
		{name: "unclean path is cleaned", handler: "./fn/../handler.sh", want: "/w/handler.sh"},
		{name: "absolute path is rejected", handler: "/etc/passwd", wantErr: true},
		{name: "escaping path is rejected", handler: "../x.sh", wantErr: true},
		{name: "parent itself is rejected", handler: "..", wantErr: true},
		{name: "empty handler is rejected", handler: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HandlerPath("/w", tc.handler)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestJSONOutput(t *testing.T) {
	tests := []struct {
		name   string
		stdout string
		want   string
	}{
		{name: "JSON object passes through without its newline", stdout: "{\"a\":1}\n", want: `{"a":1}`},
		{name: "JSON number passes through", stdout: "42", want: `42`},
		{name: "plain text becomes a JSON string", stdout: "hello world\n", want: `"hello world"`},
		{name: "multi-line text keeps inner newlines", stdout: "a\nb\n", want: `"a\nb"`},
		{name: "empty stdout is null", stdout: "", want: `null`},
		{name: "whitespace-only stdout is null", stdout: " \n", want: `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, string(jsonOutput([]byte(tc.stdout))))
		})
	}
}
