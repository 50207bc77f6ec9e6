package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestDiskFull fills the embedded storage's file system: the write that does
// not fit fails with a 5xx, readyz turns not ready while writes fail, the
// server keeps serving reads, it is ready and takes writes again once space
// is freed, and every write acknowledged before is still there after a
// restart.
func TestDiskFull(t *testing.T) {
	dataDir := t.TempDir()
	// A size-limited tmpfs is the only honest full disk; mounting it needs
	// root (which CI has). Elsewhere the test cannot run at all, and under
	// KRUNTIMES_E2E_REQUIRE=1 (make test) that is a failure, not a skip.
	if err := syscall.Mount("tmpfs", dataDir, "tmpfs", 0, "size=4m"); err != nil {
		msg := fmt.Sprintf("cannot mount a 4 MiB tmpfs at %s (needs root): %v", dataDir, err)
		if os.Getenv("KRUNTIMES_E2E_REQUIRE") == "1" {
			t.Fatalf("%s; KRUNTIMES_E2E_REQUIRE=1 requires this test to run", msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dataDir, syscall.MNT_DETACH) })
	// Ballast to free later: more than the readiness probe's megabyte.
	ballast := filepath.Join(dataDir, "ballast")
	require.NoError(t, os.WriteFile(ballast, make([]byte, 2<<20), 0o600))

	p := startServerProcess(t, dataDir)
	ctx := context.Background()
	runs := p.client.KruntimesV1alpha1().Runs(namespace)
	var acked []string
	var writeErr error
	for i := 0; i < 10000 && writeErr == nil; i++ {
		run := taskRun(fmt.Sprintf("fill-%d", i))
		run.Spec.Source.Inline = strings.Repeat("x", 64<<10)
		if _, writeErr = runs.Create(ctx, run, metav1.CreateOptions{}); writeErr == nil {
			acked = append(acked, run.Name)
		}
	}
	require.Error(t, writeErr, "a 2 MiB file system never filled up")
	status, ok := writeErr.(apierrors.APIStatus)
	require.True(t, ok, "want an API error, got %v", writeErr)
	assert.GreaterOrEqual(t, int(status.Status().Code), 500, "a full disk is the server's problem: %v", writeErr)
	t.Logf("after %d Runs: %v", len(acked), writeErr)
	require.NotEmpty(t, acked)

	readyz := func() (string, error) {
		body, err := p.client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
		return string(body), err
	}
	body, err := readyz()
	require.Error(t, err, "readyz is not ready while writes fail:\n%s", body)
	assert.Contains(t, body, "[-]embedded-storage-writable failed")
	assert.Contains(t, body, "[+]embedded-storage ok", "the file is still readable")

	// Still serving reads.
	_, err = runs.Get(ctx, acked[len(acked)-1], metav1.GetOptions{})
	require.NoError(t, err)

	// Freeing space makes it ready again without a write from outside
	// (not being ready keeps writes away), then writes succeed.
	require.NoError(t, os.Remove(ballast))
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		body, err = readyz()
		return err == nil, nil
	})
	require.NoError(t, err, "ready again once space is freed; last readyz:\n%s", body)
	after := taskRun("after-free")
	_, err = runs.Create(ctx, after, metav1.CreateOptions{})
	require.NoError(t, err, "writes succeed again")
	acked = append(acked, after.Name)

	p.kill()
	p = startServerProcess(t, dataDir)
	list, err := p.client.KruntimesV1alpha1().Runs(namespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	stored := map[string]bool{}
	for _, r := range list.Items {
		stored[r.Name] = true
	}
	for _, name := range acked {
		assert.True(t, stored[name], "acknowledged %s is lost", name)
	}
}
