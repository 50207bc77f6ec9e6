package runlog_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/registry/runlog"
	"kruntimes.io/kruntimes/registry/storage/embedded"
)

// storageCodec encodes as kruntimes-apiserver does by default (protobuf).
func storageCodec(tb testing.TB) runtime.Codec {
	info, ok := runtime.SerializerInfoForMediaType(apiserver.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	require.True(tb, ok)
	return apiserver.Codecs.CodecForVersions(info.Serializer, apiserver.Codecs.UniversalDeserializer(), v1alpha1.SchemeGroupVersion, nil)
}

// newEmbeddedStore is the store on a real embedded backend in a temporary
// directory.
func newEmbeddedStore(tb testing.TB, limits runlog.Limits) *runlog.Store {
	tb.Helper()
	backend, err := embedded.Open(tb.TempDir(), embedded.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = backend.Close() })
	store, err := runlog.NewStore(backend.RESTOptionsGetter(*storagebackend.NewDefaultConfig("/registry", storageCodec(tb))), limits)
	require.NoError(tb, err)
	tb.Cleanup(store.Destroy)
	return store
}

// etcdOptions is the etcd3 backend as kruntimes-apiserver's
// RESTOptionsGetter gives it, without a watch cache.
type etcdOptions struct{ config storagebackend.Config }

func (g etcdOptions) GetRESTOptions(gr schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{StorageConfig: g.config.ForResource(gr), Decorator: generic.UndecoratedStorage, ResourcePrefix: gr.Group + "/" + gr.Resource}, nil
}

// newEtcdStore is the store on a real etcd, which takes requests of at
// most maxRequestBytes (0: etcd's default, 1.5 MiB).
func newEtcdStore(tb testing.TB, limits runlog.Limits, maxRequestBytes uint) *runlog.Store {
	tb.Helper()
	cfg := testserver.NewTestConfig(tb)
	if maxRequestBytes > 0 {
		cfg.MaxRequestBytes = maxRequestBytes
	}
	etcd := testserver.RunEtcd(tb, cfg)
	config := storagebackend.NewDefaultConfig("/registry", storageCodec(tb))
	config.Transport.ServerList = etcd.Endpoints()
	store, err := runlog.NewStore(etcdOptions{config: *config}, limits)
	require.NoError(tb, err)
	tb.Cleanup(store.Destroy)
	return store
}

// forEachBackend runs test on a fresh store with limits on each backend.
func forEachBackend(t *testing.T, limits runlog.Limits, test func(t *testing.T, store *runlog.Store)) {
	t.Run("embedded", func(t *testing.T) { test(t, newEmbeddedStore(t, limits)) })
	t.Run("etcd3", func(t *testing.T) { test(t, newEtcdStore(t, limits, 0)) })
}

func logOf(size int) *kruntimes.RunLog {
	return &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{{Stream: kruntimes.RunLogStreamStdout, UnixNano: 1, Data: bytes.Repeat([]byte{0xff}, size)}}}
}

// dataOf is the bytes of output log keeps.
func dataOf(log *kruntimes.RunLog) int64 {
	var n int64
	for _, c := range log.Chunks {
		n += int64(len(c.Data))
	}
	return n
}

// sizeOf is what a one-chunk log of size bytes counts.
func sizeOf(size int) int64 { return int64(size) + runlog.ChunkOverhead }

func usage(t *testing.T, store *runlog.Store, namespace string) int64 {
	t.Helper()
	n, err := store.Usage(context.Background(), namespace)
	require.NoError(t, err)
	return n
}

func TestStore(t *testing.T) {
	forEachBackend(t, runlog.Limits{}, func(t *testing.T, store *runlog.Store) {
		ctx := context.Background()
		const uid, laterUID = types.UID("uid-1"), types.UID("uid-2")

		_, err := store.Save(ctx, "ns", "a", uid, 1, logOf(3))
		require.NoError(t, err)
		_, err = store.Save(ctx, "ns", "a", uid, 2, logOf(5))
		require.NoError(t, err)
		_, err = store.Save(ctx, "ns", "a", uid, 2, logOf(7))
		require.NoError(t, err, "a hand-over sent again replaces the record")
		assert.Equal(t, sizeOf(3)+sizeOf(7), usage(t, store, "ns"), "a replaced record gives its bytes back")
		got, err := store.Get(ctx, "ns", "a", uid, 2)
		require.NoError(t, err)
		require.NotNil(t, got)
		assert.Equal(t, int32(2), got.Attempt)
		assert.Equal(t, uid, got.RunUID)
		assert.Equal(t, bytes.Repeat([]byte{0xff}, 7), got.Chunks[0].Data)

		got, err = store.Get(ctx, "ns", "a", laterUID, 1)
		require.NoError(t, err)
		assert.Nil(t, got, "a record of an earlier Run of the name is never shown")
		got, err = store.Get(ctx, "ns", "b", uid, 1)
		require.NoError(t, err)
		assert.Nil(t, got, "no record, no log")

		require.NoError(t, store.Delete(ctx, "ns", "a", laterUID, 2))
		got, err = store.Get(ctx, "ns", "a", uid, 1)
		require.NoError(t, err)
		assert.NotNil(t, got, "deleting for a later Run of the name leaves this one's records")
		assert.Equal(t, sizeOf(3)+sizeOf(7), usage(t, store, "ns"))

		require.NoError(t, store.DeleteAttempt(ctx, "ns", "a", uid, 2))
		assert.Equal(t, sizeOf(3), usage(t, store, "ns"), "one attempt's delete gives its bytes back")
		got, err = store.Get(ctx, "ns", "a", uid, 1)
		require.NoError(t, err)
		assert.NotNil(t, got, "deleting one attempt leaves the others")
		require.NoError(t, store.Delete(ctx, "ns", "a", uid, 2))
		for _, attempt := range []int32{1, 2} {
			got, err = store.Get(ctx, "ns", "a", uid, attempt)
			require.NoError(t, err)
			assert.Nil(t, got, "attempt %d is deleted", attempt)
		}
		assert.Zero(t, usage(t, store, "ns"))
		require.NoError(t, store.Delete(ctx, "ns", "a", uid, 2), "deleting again is fine")
		assert.Zero(t, usage(t, store, "ns"))
	})
}

// TestStoreNamespaceLimit: a namespace keeps at most its limit of log
// bytes; a log over it is kept cut with DroppedBy, the logs already kept
// stay whole, and other namespaces are not touched.
func TestStoreNamespaceLimit(t *testing.T) {
	const limit = 10 << 10
	forEachBackend(t, runlog.Limits{NamespaceBytes: limit}, func(t *testing.T, store *runlog.Store) {
		ctx := context.Background()
		first, err := store.Save(ctx, "full", "a", "uid-a", 1, logOf(6<<10))
		require.NoError(t, err)
		assert.Empty(t, first.DroppedBy, "within the limit: kept whole")
		assert.Zero(t, first.DroppedBytes)

		second, err := store.Save(ctx, "full", "b", "uid-b", 1, logOf(6<<10))
		require.NoError(t, err)
		assert.Equal(t, kruntimes.RunLogDroppedByNamespaceLimit, second.DroppedBy)
		assert.Equal(t, limit-sizeOf(6<<10), runlog.Size(second), "cut to what was left")
		assert.Equal(t, int64(6<<10), dataOf(second)+second.DroppedBytes, "every byte not kept is counted in the marker")
		assert.Equal(t, int64(limit), usage(t, store, "full"))

		third, err := store.Save(ctx, "full", "c", "uid-c", 1, logOf(100))
		require.NoError(t, err)
		assert.Empty(t, third.Chunks, "at the limit: the marker alone")
		assert.Equal(t, int64(100), third.DroppedBytes)
		got, err := store.Get(ctx, "full", "c", "uid-c", 1)
		require.NoError(t, err)
		require.NotNil(t, got, "a log cut to nothing is kept as its marker")
		assert.Equal(t, int64(100), got.DroppedBytes)
		got, err = store.Get(ctx, "full", "a", "uid-a", 1)
		require.NoError(t, err)
		assert.Len(t, got.Chunks[0].Data, 6<<10, "the logs already kept stay whole")

		other, err := store.Save(ctx, "other", "a", "uid-o", 1, logOf(8<<10))
		require.NoError(t, err)
		assert.Empty(t, other.DroppedBy, "another namespace has its own limit")

		require.NoError(t, store.Delete(ctx, "full", "a", "uid-a", 1))
		assert.Equal(t, limit-sizeOf(6<<10), usage(t, store, "full"), "a delete gives the bytes back")
		again, err := store.Save(ctx, "full", "d", "uid-d", 1, logOf(5<<10))
		require.NoError(t, err)
		assert.Empty(t, again.DroppedBy, "room again after a delete")
		assert.LessOrEqual(t, usage(t, store, "full"), int64(limit))
	})
}

// TestStoreNamespaceLimitConcurrent: hand-overs racing for the last room
// of a namespace never keep more than its limit between them.
func TestStoreNamespaceLimitConcurrent(t *testing.T) {
	const limit = 64 << 10
	forEachBackend(t, runlog.Limits{NamespaceBytes: limit}, func(t *testing.T, store *runlog.Store) {
		ctx := context.Background()
		var wg sync.WaitGroup
		kept := make([]int64, 16)
		for i := range kept {
			wg.Go(func() {
				record, err := store.Save(ctx, "ns", fmt.Sprintf("run-%d", i), types.UID(fmt.Sprintf("uid-%d", i)), 1, logOf(8<<10))
				assert.NoError(t, err)
				if record != nil {
					kept[i] = runlog.Size(record)
				}
			})
		}
		wg.Wait()
		var total int64
		for _, n := range kept {
			total += n
		}
		assert.LessOrEqual(t, total, int64(limit))
		assert.Equal(t, total, usage(t, store, "ns"), "the count is the bytes kept")
	})
}

// TestStoreRecordLimitOnEtcd: etcd refuses a record above its request
// limit; the record bound cuts a log to fit instead of losing it.
func TestStoreRecordLimitOnEtcd(t *testing.T) {
	ctx := context.Background()
	const maxRequest = 512 << 10
	big := logOf(3 << 20)

	unbounded := newEtcdStore(t, runlog.Limits{}, maxRequest)
	_, err := unbounded.Save(ctx, "ns", "a", "uid-a", 1, big)
	require.Error(t, err, "without the bound etcd refuses the record, and the hand-over fails: never silently")
	assert.Zero(t, usage(t, unbounded, "ns"), "a record not kept is not counted")

	bounded := newEtcdStore(t, runlog.Limits{RecordBytes: maxRequest - 16<<10}, maxRequest)
	kept, err := bounded.Save(ctx, "ns", "a", "uid-a", 1, big)
	require.NoError(t, err)
	assert.Equal(t, kruntimes.RunLogDroppedByRecordLimit, kept.DroppedBy)
	assert.LessOrEqual(t, runlog.Size(kept), int64(maxRequest-16<<10))
	got, err := bounded.Get(ctx, "ns", "a", "uid-a", 1)
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, int64(3<<20), dataOf(got)+got.DroppedBytes, "kept and dropped add up to what was written")
	assert.Equal(t, kruntimes.RunLogDroppedByRecordLimit, got.DroppedBy)
}

// TestSweep: records whose Run is gone, was replaced, or moved past the
// kept attempts are deleted, the others stay, and the counts are made
// right again.
func TestSweep(t *testing.T) {
	forEachBackend(t, runlog.Limits{NamespaceBytes: 1 << 20}, func(t *testing.T, store *runlog.Store) {
		ctx := context.Background()
		save := func(ns, run string, uid types.UID, attempt int32, size int) {
			_, err := store.Save(ctx, ns, run, uid, attempt, logOf(size))
			require.NoError(t, err)
		}
		save("a", "kept", "uid-kept", 1, 100)
		save("a", "gone", "uid-gone", 1, 200)
		save("a", "replaced", "uid-old", 1, 300)
		save("a", "retried", "uid-retried", 1, 400)
		save("a", "retried", "uid-retried", 12, 500)
		save("b", "gone", "uid-b", 1, 600)
		// A crash between a count and its write.
		require.NoError(t, store.AddToCount(ctx, "a", 5000))
		runs := map[string]runlog.RunState{
			"a/kept":     {Found: true, UID: "uid-kept", Attempt: 1},
			"a/replaced": {Found: true, UID: "uid-new", Attempt: 1},
			"a/retried":  {Found: true, UID: "uid-retried", Attempt: 12},
		}
		var freshReads int
		lookup := func(_ context.Context, ns, name string, fresh bool) (runlog.RunState, error) {
			if fresh {
				freshReads++
			}
			return runs[ns+"/"+name], nil
		}
		result, err := store.Sweep(ctx, 10, lookup)
		require.NoError(t, err)
		assert.Equal(t, 4, result.Deleted)
		assert.Equal(t, sizeOf(200)+sizeOf(300)+sizeOf(400)+sizeOf(600), result.FreedBytes)
		assert.Equal(t, 4, freshReads, "a record is deleted only on a read past the cache")
		for _, r := range []struct {
			ns, run string
			uid     types.UID
			attempt int32
			kept    bool
		}{
			{"a", "kept", "uid-kept", 1, true}, {"a", "retried", "uid-retried", 12, true},
			{"a", "gone", "uid-gone", 1, false}, {"a", "replaced", "uid-old", 1, false},
			{"a", "retried", "uid-retried", 1, false}, {"b", "gone", "uid-b", 1, false},
		} {
			got, err := store.Get(ctx, r.ns, r.run, r.uid, r.attempt)
			require.NoError(t, err)
			assert.Equal(t, r.kept, got != nil, "%s/%s attempt %d", r.ns, r.run, r.attempt)
		}
		assert.Equal(t, sizeOf(100)+sizeOf(500), usage(t, store, "a"), "counted again: the crash's bytes are given back")
		assert.Zero(t, usage(t, store, "b"))
		hasCount := func(ns string) bool {
			has, err := store.HasCount(ctx, ns)
			require.NoError(t, err)
			return has
		}
		assert.True(t, hasCount("a"), "a namespace that keeps logs keeps its count")
		assert.False(t, hasCount("b"), "a namespace left with no log (deleted) leaves no count behind")

		result, err = store.Sweep(ctx, 10, lookup)
		require.NoError(t, err)
		assert.Zero(t, result.Deleted, "a second sweep finds nothing")
		assert.Equal(t, sizeOf(100)+sizeOf(500), usage(t, store, "a"))
	})
}

// TestSweepDropsTheCountOfANamespaceWithoutLogs: a namespace that keeps
// no log any more (deleted: its Runs and their logs went) leaves no count
// record behind, even one a crash left above zero; a namespace with logs
// keeps its count, and a hand-over after the sweep counts from zero.
func TestSweepDropsTheCountOfANamespaceWithoutLogs(t *testing.T) {
	forEachBackend(t, runlog.Limits{NamespaceBytes: 1 << 20}, func(t *testing.T, store *runlog.Store) {
		ctx := context.Background()
		_, err := store.Save(ctx, "deleted", "run", "uid-1", 1, logOf(100))
		require.NoError(t, err)
		_, err = store.Save(ctx, "live", "run", "uid-2", 1, logOf(200))
		require.NoError(t, err)
		// The Run's delete hook ran (the namespace's deletion deleted it):
		// the count is at zero, and stays stored.
		require.NoError(t, store.Delete(ctx, "deleted", "run", "uid-1", 1))
		// A crash between a count and its write, in a namespace with no
		// log at all.
		require.NoError(t, store.AddToCount(ctx, "crashed", 300))
		hasCount := func(ns string) bool {
			has, err := store.HasCount(ctx, ns)
			require.NoError(t, err)
			return has
		}
		require.True(t, hasCount("deleted"), "before the sweep")
		require.True(t, hasCount("crashed"), "before the sweep")

		lookup := func(_ context.Context, ns, name string, _ bool) (runlog.RunState, error) {
			if ns == "live" {
				return runlog.RunState{Found: true, UID: "uid-2", Attempt: 1}, nil
			}
			return runlog.RunState{}, nil
		}
		_, err = store.Sweep(ctx, 10, lookup)
		require.NoError(t, err)
		assert.False(t, hasCount("deleted"), "a deleted namespace's count is dropped")
		assert.False(t, hasCount("crashed"), "a count with no log behind it is dropped")
		assert.True(t, hasCount("live"))
		assert.Equal(t, sizeOf(200), usage(t, store, "live"))

		_, err = store.Save(ctx, "deleted", "run", "uid-3", 1, logOf(100))
		require.NoError(t, err)
		assert.Equal(t, sizeOf(100), usage(t, store, "deleted"), "a namespace of the same name counts from zero")
	})
}

// BenchmarkSave is the cost runtimed pays per attempt before it writes the
// outcome, on the embedded backend (fsynced writes), the count included.
func BenchmarkSave(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			store := newEmbeddedStore(b, runlog.Limits{NamespaceBytes: 1 << 40})
			log := logOf(size)
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				i++
				if _, err := store.Save(context.Background(), "ns", fmt.Sprintf("run-%d", i), "uid", 1, log); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
