package nodeagent

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestImageRepositoryName(t *testing.T) {
	tests := []struct {
		name, image, want string
	}{
		{"bare name", "runtimed", "runtimed"},
		{"registry, path and tag", "ghcr.io/kruntimes/runtimed:v1.2", "runtimed"},
		{"registry with port keeps the last element", "localhost:5000/kruntimes-runtime:dev", "kruntimes-runtime"},
		{"digest is dropped", "example.com/x/e2e-testserver@sha256:abcd", "e2e-testserver"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, imageRepositoryName(tc.image))
		})
	}
}

func TestResolveImage(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "runtimed"), []byte("#!/bin/sh\n"), 0o755))
	tests := []struct {
		name    string
		image   string
		want    string
		wantErr string
	}{
		{"known and built maps to bin/", "ghcr.io/k/runtimed:v1", filepath.Join(bin, "runtimed"), ""},
		{"known but not built is an error that says so", "krt:dev", "", "not built"},
		{"unknown image is refused with the list of runnable images", "nginx:1.27", "", "not one this local node can run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveImage(bin, tc.image)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"POD_IP": "127.100.0.2", "DIR": "/x"}
	tests := []struct {
		name, in, want string
	}{
		{"known variable is replaced", "--listen=$(POD_IP):8080", "--listen=127.100.0.2:8080"},
		{"unknown variable stays as written", "$(NOPE)/a", "$(NOPE)/a"},
		{"$$ escapes a dollar", "$$(POD_IP)", "$(POD_IP)"},
		{"several references", "$(DIR)/$(POD_IP)", "/x/127.100.0.2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, expand(tc.in, env))
		})
	}
}

func TestPodIPAllocator(t *testing.T) {
	a := newPodIPAllocator(net.IPv4(127, 100, 0, 0))
	first, err := a.allocate("")
	require.NoError(t, err)
	assert.Equal(t, "127.100.0.2", first)
	again, err := a.allocate(first)
	require.NoError(t, err)
	assert.NotEqual(t, first, again, "an address in use is never handed out twice")
	a.release(first)
	reused, err := a.allocate(first)
	require.NoError(t, err)
	assert.Equal(t, first, reused, "a released preferred address is reused (restart keeps the Pod IP)")
	outside, err := a.allocate("10.0.0.5")
	require.NoError(t, err)
	assert.NotEqual(t, "10.0.0.5", outside, "addresses outside the block are not honoured")
}

func TestSeekTailLines(t *testing.T) {
	tests := []struct {
		name    string
		content string
		n       int
		want    string
	}{
		{"last two lines", "a\nb\nc\n", 2, "b\nc\n"},
		{"more lines than exist returns all", "a\nb\n", 5, "a\nb\n"},
		{"zero lines returns nothing", "a\nb\n", 0, ""},
		{"unterminated last line counts", "a\nb\nc", 1, "c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o644))
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, seekTailLines(f, tc.n))
			got, err := io.ReadAll(f)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}

func TestContainerLogPath(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "0123456789abcdef"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "server"}}},
	}
	tests := []struct {
		name      string
		podLogDir string
		want      string
	}{
		{"without PodLogDir, logs live in the Pod's directory and go with it", "", "/pods/01234567/logs/server/2.log"},
		{"with PodLogDir, logs live apart, named like the kubelet's /var/log/pods", "/logs/pods", "/logs/pods/ns_web_0123456789abcdef/server/2.log"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			agent := &Agent{cfg: Config{PodDir: "/pods", PodLogDir: tc.podLogDir}}
			r := newPodRunner(agent, pod)
			assert.Equal(t, tc.want, r.containers[0].logPath(2))
		})
	}
}
