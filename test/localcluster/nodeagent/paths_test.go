package nodeagent

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPathTranslator(t *testing.T) {
	tr := newPathTranslator(map[string]string{
		"/workspace":     "/home/u/workspace/pods/ab/vol/workspace",
		"/run/kruntimes": "/home/u/pods/ab/vol/kruntimes-run",
		"/run":           "/home/u/pods/ab/vol/run",
	})
	cases := []struct{ name, in, want string }{
		{"a unix socket URL", "unix:///run/kruntimes/runtime.sock", "unix:///home/u/pods/ab/vol/kruntimes-run/runtime.sock"},
		{"the longest mountPath wins", "/run/other", "/home/u/pods/ab/vol/run/other"},
		{"a flag value", "--workspace=/workspace", "--workspace=/home/u/workspace/pods/ab/vol/workspace"},
		{"the mountPath itself", "/workspace", "/home/u/workspace/pods/ab/vol/workspace"},
		{"a longer name is not a mountPath", "/workspaces/x", "/workspaces/x"},
		{"a mountPath inside another path is left alone", "/home/u/workspace/x", "/home/u/workspace/x"},
		{"unrelated text", "--language=bash", "--language=bash"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tr.translate(tc.in))
		})
	}
	assert.Equal(t, "/workspace", newPathTranslator(nil).translate("/workspace"), "no mounts, no change")
}
