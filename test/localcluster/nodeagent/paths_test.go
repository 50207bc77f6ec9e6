package nodeagent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
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

// TestContainerArgsExpandAfterTranslating: a $(VAR) value is a host path
// already; one under a state directory in /tmp must not be rewritten into
// the Pod's /tmp emptyDir (the chart mounts one at /tmp).
func TestContainerArgsExpandAfterTranslating(t *testing.T) {
	paths := newPathTranslator(map[string]string{"/tmp": "/tmp/state/pods/ab/vol/tmp"})
	env := map[string]string{"KUBECONFIG": "/tmp/state/pods/ab/kubeconfig", "POD_IP": "127.60.0.2"}
	got := containerArgs(corev1.Container{Args: []string{
		"--kubeconfig=$(KUBECONFIG)", "--bind-address=$(POD_IP)", "--cert-dir=/tmp/certs", "$$(KUBECONFIG)",
	}}, env, paths)
	assert.Equal(t, []string{
		"--kubeconfig=/tmp/state/pods/ab/kubeconfig", "--bind-address=127.60.0.2", "--cert-dir=/tmp/state/pods/ab/vol/tmp/certs", "$(KUBECONFIG)",
	}, got)
}
