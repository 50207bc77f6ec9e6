package embedded

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics/testutil"
)

// The check's states, driven through writeHealth; a real full disk is
// test/integration's TestDiskFull.
func TestCheckWritable(t *testing.T) {
	ctx := context.Background()
	b := openTestBackend(t, Options{NoSync: true})
	s := podStore(t, b)
	require.NoError(t, b.CheckWritable(), "a new backend is writable")

	enospc := &os.PathError{Op: "write", Path: b.Path(), Err: syscall.ENOSPC}
	failCommit := func() {
		b.writeHealth.set(enospc)
		// A probe just ran: the next check may not probe.
		b.writeHealth.mu.Lock()
		b.writeHealth.lastProbe = time.Now()
		b.writeHealth.mu.Unlock()
	}

	t.Run("a failed commit makes the check fail with its error", func(t *testing.T) {
		failCommit()
		err := b.CheckWritable()
		require.Error(t, err)
		assert.True(t, errors.Is(err, syscall.ENOSPC), "%v", err)
		assert.Contains(t, err.Error(), "free disk space")
	})
	t.Run("a commit that succeeds clears the failure", func(t *testing.T) {
		failCommit()
		createPod(ctx, t, s, "ns", "after-failure", "Pending")
		assert.NoError(t, b.CheckWritable())
	})
	t.Run("a probe that finds room clears the failure and leaves no file", func(t *testing.T) {
		failCommit()
		b.writeHealth.mu.Lock()
		b.writeHealth.lastProbe = time.Time{}
		b.writeHealth.mu.Unlock()
		assert.NoError(t, b.CheckWritable())
		_, err := os.Stat(filepath.Join(filepath.Dir(b.Path()), writeProbeFileName))
		assert.True(t, os.IsNotExist(err), "probe file removed: %v", err)
	})
}

func TestDataFileSizeMetric(t *testing.T) {
	b := openTestBackend(t, Options{NoSync: true})
	createPod(context.Background(), t, podStore(t, b), "ns", "a", "Pending")
	info, err := os.Stat(b.Path())
	require.NoError(t, err)
	size, err := testutil.GetGaugeMetricValue(dataFileSize)
	require.NoError(t, err)
	assert.Equal(t, float64(info.Size()), size)
}
