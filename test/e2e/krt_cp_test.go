package e2e

import (
	"archive/tar"
	"bytes"
	"io"
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
// with the server's message and the local destination untouched; with -r a
// directory's contents go in and come back (files, modes, links), and to
// stdout as a tar archive.
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

	// -r: a directory's contents, up as a tar made on the fly and down
	// as the sandbox's archive of it.
	tree := filepath.Join(dir, "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "src/pkg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "src/pkg/big.bin"), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	require.NoError(t, os.Symlink("src/pkg/big.bin", filepath.Join(tree, "link")))
	_, stderr, code = krt(nil, tree, "box:tree")
	assert.Equal(t, 1, code, "a directory without -r is refused")
	assert.Contains(t, stderr, "copy it with -r")
	_, stderr, code = krt(nil, "-r", tree, "box:tree")
	require.Equal(t, 0, code, stderr)
	copied := filepath.Join(dir, "copied")
	_, stderr, code = krt(nil, "-r", "box:tree", copied)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr, "nothing skipped")
	got, err = os.ReadFile(filepath.Join(copied, "src/pkg/big.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the tree's file came back as it went")
	fi, err := os.Stat(filepath.Join(copied, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "modes go both ways")
	target, err := os.Readlink(filepath.Join(copied, "link"))
	require.NoError(t, err)
	assert.Equal(t, "src/pkg/big.bin", target, "a link goes as a link")
	stdout, stderr, code = krt(nil, "-r", "box:tree/src", "-")
	require.Equal(t, 0, code, stderr)
	names := map[string]bool{}
	tr := tar.NewReader(strings.NewReader(stdout))
	for {
		hdr, err := tr.Next()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		names[hdr.Name] = true
	}
	assert.True(t, names["pkg/big.bin"], "with -, the archive goes to stdout: %v", names)
}
