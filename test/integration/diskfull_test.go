package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDiskFull fills the embedded storage's file system: the write that does
// not fit fails with a 5xx, the server keeps serving, and every write
// acknowledged before it is still there after a restart.
func TestDiskFull(t *testing.T) {
	dataDir := t.TempDir()
	// A size-limited tmpfs is the only honest full disk; mounting it needs
	// root (which CI has). Elsewhere the test cannot run at all, and under
	// KRUNTIMES_E2E_REQUIRE=1 (make test) that is a failure, not a skip.
	if err := syscall.Mount("tmpfs", dataDir, "tmpfs", 0, "size=2m"); err != nil {
		msg := fmt.Sprintf("cannot mount a 2 MiB tmpfs at %s (needs root): %v", dataDir, err)
		if os.Getenv("KRUNTIMES_E2E_REQUIRE") == "1" {
			t.Fatalf("%s; KRUNTIMES_E2E_REQUIRE=1 requires this test to run", msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dataDir, syscall.MNT_DETACH) })

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

	// Still serving reads.
	_, err := runs.Get(ctx, acked[len(acked)-1], metav1.GetOptions{})
	require.NoError(t, err)

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
