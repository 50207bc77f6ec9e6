package e2e

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestKrtCpThroughAggregation: krt cp, the real binary through
// kube-apiserver's aggregation, copies a file into a sandbox and back
// byte for byte, from stdin and to stdout, and a missing file is exit 1
// with the server's message and the local destination untouched.
func TestKrtCpThroughAggregation(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "krt-cp")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	createRun(ctx, t, client, ns, functionRun("box", "python", "", "", "kruntimes.sandbox"))
	waitForRun(ctx, t, client, ns, "box", functionTimeout, "Ready", inPhase(lifecycle.Ready))

	krt := func(stdin []byte, args ...string) (stdout, stderr string, code int) {
		cmd := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), append([]string{"--kubeconfig=" + f.Kubeconfig, "-n", ns, "cp"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errOut
		err := cmd.Run()
		if exit, ok := err.(*exec.ExitError); ok {
			return out.String(), errOut.String(), exit.ExitCode()
		}
		require.NoError(t, err)
		return out.String(), errOut.String(), 0
	}

	dir := t.TempDir()
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	local := filepath.Join(dir, "in.bin")
	require.NoError(t, os.WriteFile(local, data, 0o644))
	_, stderr, code := krt(nil, local, "box:deep/dir/in.bin")
	require.Equal(t, 0, code, stderr)
	back := filepath.Join(dir, "back.bin")
	_, stderr, code = krt(nil, "box:deep/dir/in.bin", back)
	require.Equal(t, 0, code, stderr)
	got, err := os.ReadFile(back)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the file came back as it went (%d bytes of %d)", len(got), len(data))

	_, stderr, code = krt([]byte("from stdin\n"), "-", "box:note.txt")
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code := krt(nil, "box:note.txt", "-")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "from stdin\n", stdout)

	require.NoError(t, os.WriteFile(back, []byte("keep me"), 0o644))
	_, stderr, code = krt(nil, "box:no/such.file", back)
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, `no file "no/such.file"`, "the server's 404 message reaches the user")
	kept, err := os.ReadFile(back)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(kept), "a failed copy leaves the local file as it was")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), "."), "no temporary file left: %s", e.Name())
	}

	_, _, code = krt(nil, local, filepath.Join(dir, "x"))
	assert.Equal(t, 2, code, "two local sides are a usage error")
}
