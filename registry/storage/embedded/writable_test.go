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
	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/example"
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

// TestFailedCommitThatReachedTheFile: a commit whose fsync failed after its
// meta page reached the file is visible at revisions the server never
// published; the backend must stop rather than let the next batch reuse
// them.
func TestFailedCommitThatReachedTheFile(t *testing.T) {
	ctx := context.Background()
	eio := &os.PathError{Op: "fdatasync", Path: "data.db", Err: syscall.EIO}
	failedBatch := func(b *Backend, base uint64) *writeOp {
		op := &writeOp{key: []byte("/pods/ns/lost"), done: make(chan struct{})}
		b.commitFailed([]*writeOp{op}, base, eio)
		<-op.done
		return op
	}

	t.Run("a failure that left nothing behind keeps the backend writable", func(t *testing.T) {
		var halts []error
		b := openTestBackend(t, Options{NoSync: true, OnHalt: func(err error) { halts = append(halts, err) }})
		s := podStore(t, b)
		createPod(ctx, t, s, "ns", "before", "Pending")

		op := failedBatch(b, b.rev.Load())
		assert.ErrorIs(t, op.err, syscall.EIO)
		assert.ErrorContains(t, op.err, "free disk space")
		assert.Empty(t, halts)
		createPod(ctx, t, s, "ns", "after", "Pending")
		assert.NoError(t, b.CheckWritable(), "the next commit clears the failure")
	})

	t.Run("a failure visible in the file stops every later write", func(t *testing.T) {
		var halts []error
		b := openTestBackend(t, Options{NoSync: true, OnHalt: func(err error) { halts = append(halts, err) }})
		s := podStore(t, b)
		createPod(ctx, t, s, "ns", "before", "Pending")
		base := b.rev.Load()
		// What a transaction leaves when its meta page was written and its
		// fsync then failed: the file is one revision ahead of the server.
		require.NoError(t, b.db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(metaRev, encodeUint(base+1))
		}))

		op := failedBatch(b, base)
		assert.ErrorIs(t, op.err, syscall.EIO)
		assert.ErrorContains(t, op.err, "restart kruntimes-apiserver")
		require.Len(t, halts, 1, "OnHalt is told once")

		err := s.Create(ctx, "/pods/ns/after", &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "after"}}, &example.Pod{}, 0)
		assert.ErrorContains(t, err, "restart kruntimes-apiserver", "no write reuses the revision the file already holds")
		assert.Equal(t, base, b.rev.Load(), "nothing more was published")
		assert.ErrorContains(t, b.CheckWritable(), "restart kruntimes-apiserver", "not ready until restarted: a probe that finds room does not clear it")
		failedBatch(b, base)
		assert.Len(t, halts, 1, "OnHalt is told once")
	})
}
