package embedded

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/apitesting"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
)

func podStore(t testing.TB, b *Backend) *store {
	t.Helper()
	s, err := b.newStore(StoreConfig{
		Codec:          apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion),
		ResourcePrefix: "/pods/",
		GroupResource:  schema.GroupResource{Resource: "pods"},
		NewFunc:        func() runtime.Object { return &example.Pod{} },
		NewListFunc:    func() runtime.Object { return &example.PodList{} },
	})
	require.NoError(t, err)
	return s
}

func createPod(ctx context.Context, t testing.TB, s storage.Interface, ns, name string, phase example.PodPhase) *example.Pod {
	t.Helper()
	out := &example.Pod{}
	in := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: example.PodStatus{Phase: phase}}
	require.NoError(t, s.Create(ctx, fmt.Sprintf("/pods/%s/%s", ns, name), in, out, 0))
	return out
}

func setPhase(ctx context.Context, t testing.TB, s storage.Interface, ns, name string, phase example.PodPhase) *example.Pod {
	t.Helper()
	out := &example.Pod{}
	require.NoError(t, s.GuaranteedUpdate(ctx, fmt.Sprintf("/pods/%s/%s", ns, name), out, false, nil,
		func(obj runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			pod := obj.(*example.Pod)
			pod.Status.Phase = phase
			return pod, nil, nil
		}, nil))
	return out
}

// nextEvent waits for one event, failing the test after a deadline.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		require.True(t, ok, "watch closed unexpectedly")
		return e
	case <-time.After(wait30s):
		t.Fatal("timed out waiting for a watch event")
		return watch.Event{}
	}
}

const wait30s = 30 * time.Second

func TestReopenKeepsDataAndWatchHistory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Open(dir, Options{CompactionInterval: -1})
	require.NoError(t, err)
	s := podStore(t, b)
	created := createPod(ctx, t, s, "ns", "a", "Pending")
	running := setPhase(ctx, t, s, "ns", "a", "Running")
	createPod(ctx, t, s, "ns", "b", "Pending")
	before := b.CurrentRevision()
	require.NoError(t, b.Close())

	b, err = Open(dir, Options{CompactionInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	s = podStore(t, b)
	assert.Equal(t, before, b.CurrentRevision(), "revision survives a restart")

	got := &example.Pod{}
	require.NoError(t, s.Get(ctx, "/pods/ns/a", storage.GetOptions{}, got))
	assert.Equal(t, running.ResourceVersion, got.ResourceVersion)
	assert.Equal(t, example.PodPhase("Running"), got.Status.Phase)

	// A watcher that saw only the creation before the restart resumes
	// without a gap: the update, then the second pod.
	w, err := s.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: created.ResourceVersion, Predicate: storage.Everything, Recursive: true})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	e := nextEvent(t, w)
	assert.Equal(t, watch.Modified, e.Type)
	assert.Equal(t, running.ResourceVersion, e.Object.(*example.Pod).ResourceVersion)
	e = nextEvent(t, w)
	assert.Equal(t, watch.Added, e.Type)
	assert.Equal(t, "b", e.Object.(*example.Pod).Name)

	// New writes continue the revision sequence and reach the watcher live.
	third := createPod(ctx, t, s, "ns", "c", "Pending")
	assert.Equal(t, fmt.Sprint(before+1), third.ResourceVersion)
	e = nextEvent(t, w)
	assert.Equal(t, "c", e.Object.(*example.Pod).Name)

	// A list at a revision from before the restart is still served.
	list := &example.PodList{}
	require.NoError(t, s.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: created.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Predicate: storage.Everything, Recursive: true}, list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, example.PodPhase("Pending"), list.Items[0].Status.Phase)
}

func TestOpenRefusesDamagedFile(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{
			name: "truncated file is refused",
			damage: func(t *testing.T, path string) {
				info, err := os.Stat(path)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(path, info.Size()/2))
			},
		},
		{
			name: "garbage file is refused",
			damage: func(t *testing.T, path string) {
				garbage := make([]byte, 64*1024)
				for i := range garbage {
					garbage[i] = byte(i * 7)
				}
				require.NoError(t, os.WriteFile(path, garbage, 0o600))
			},
		},
		{
			name: "bbolt file of another program is refused",
			damage: func(t *testing.T, path string) {
				require.NoError(t, os.Remove(path))
				db, err := bolt.Open(path, 0o600, nil)
				require.NoError(t, err)
				require.NoError(t, db.Update(func(tx *bolt.Tx) error {
					_, err := tx.CreateBucket([]byte("other"))
					return err
				}))
				require.NoError(t, db.Close())
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			b, err := Open(dir, Options{CompactionInterval: -1, NoSync: true})
			require.NoError(t, err)
			s := podStore(t, b)
			for i := range 200 {
				createPod(ctx, t, s, "ns", fmt.Sprintf("pod-%d", i), "Pending")
			}
			require.NoError(t, b.Close())
			path := filepath.Join(dir, DataFileName)
			tc.damage(t, path)

			b, err = Open(dir, Options{CompactionInterval: -1})
			if b != nil {
				_ = b.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), path, "the error names the file")
		})
	}
}

func TestSecondOpenFailsFast(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{CompactionInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	_, err = Open(dir, Options{OpenTimeout: 100 * time.Millisecond})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, DataFileName))
	assert.Contains(t, err.Error(), "locked by another process")
}

func TestWriteAfterCloseFails(t *testing.T) {
	b, err := Open(t.TempDir(), Options{CompactionInterval: -1})
	require.NoError(t, err)
	s := podStore(t, b)
	require.NoError(t, b.Close())
	err = s.Create(context.Background(), "/pods/ns/a", &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}, &example.Pod{}, 0)
	require.Error(t, err, "a write must never report success once the file is closed")
	assert.True(t, storage.IsInternalError(err), "got %v", err)
	assert.ErrorIs(t, s.ReadinessCheck(), storage.ErrStorageNotReady)
	assert.Error(t, b.HealthChecker().Check(&http.Request{}))
}

func TestCompactedRevisionIsGone(t *testing.T) {
	ctx := context.Background()
	b := openTestBackend(t, Options{NoSync: true})
	s := podStore(t, b)
	first := createPod(ctx, t, s, "ns", "a", "Pending")
	setPhase(ctx, t, s, "ns", "a", "Running")
	createPod(ctx, t, s, "ns", "b", "Pending")
	require.NoError(t, b.Compact(ctx, b.CurrentRevision()))
	assert.Equal(t, int64(b.CurrentRevision()), s.CompactRevision())

	t.Run("watch from a compacted revision gets 410", func(t *testing.T) {
		w, err := s.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: first.ResourceVersion, Predicate: storage.Everything, Recursive: true})
		require.NoError(t, err, "like etcd3, Watch itself succeeds and reports the error as an event")
		t.Cleanup(w.Stop)
		e := nextEvent(t, w)
		require.Equal(t, watch.Error, e.Type)
		status := e.Object.(*metav1.Status)
		assert.Equal(t, int32(http.StatusGone), status.Code)
		assert.Equal(t, metav1.StatusReasonExpired, status.Reason)
	})
	t.Run("exact list at a compacted revision gets 410", func(t *testing.T) {
		err := s.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: first.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Predicate: storage.Everything, Recursive: true}, &example.PodList{})
		require.Error(t, err)
		assert.True(t, apierrors.IsResourceExpired(err), "got %v", err)
	})
	t.Run("state at the compacted revision is still readable", func(t *testing.T) {
		list := &example.PodList{}
		require.NoError(t, s.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(b.CurrentRevision()), ResourceVersionMatch: metav1.ResourceVersionMatchExact, Predicate: storage.Everything, Recursive: true}, list))
		assert.Len(t, list.Items, 2)
	})
}

func phaseSelector(phase string) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label: labels.Everything(),
		Field: fields.OneTermEqualSelector("status.phase", phase),
		GetAttrs: func(obj runtime.Object) (labels.Set, fields.Set, error) {
			pod := obj.(*example.Pod)
			return labels.Set(pod.Labels), fields.Set{"status.phase": string(pod.Status.Phase)}, nil
		},
	}
}

func TestFieldSelectorWatchAcrossSelectorBoundary(t *testing.T) {
	ctx := context.Background()
	b := openTestBackend(t, Options{NoSync: true})
	s := podStore(t, b)
	start := createPod(ctx, t, s, "ns", "a", "Pending")
	w, err := s.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: start.ResourceVersion, Predicate: phaseSelector("Running"), Recursive: true})
	require.NoError(t, err)
	t.Cleanup(w.Stop)

	setPhase(ctx, t, s, "ns", "a", "Running")
	setPhase(ctx, t, s, "ns", "a", "Succeeded")

	tests := []struct {
		name  string
		typ   watch.EventType
		phase example.PodPhase
	}{
		{name: "moving into the selector is ADDED", typ: watch.Added, phase: "Running"},
		{name: "moving out of the selector is DELETED with the old object", typ: watch.Deleted, phase: "Running"},
	}
	for _, tc := range tests {
		e := nextEvent(t, w)
		assert.Equal(t, tc.typ, e.Type, tc.name)
		assert.Equal(t, tc.phase, e.Object.(*example.Pod).Status.Phase, tc.name)
	}
}

func TestConcurrentWritersGetDistinctRevisions(t *testing.T) {
	ctx := context.Background()
	// fsync on: this is the path group commit exists for.
	b := openTestBackend(t, Options{})
	s := podStore(t, b)
	const writers = 64
	var wg sync.WaitGroup
	revs := make([]string, writers)
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := &example.Pod{}
			errs[i] = s.Create(ctx, fmt.Sprintf("/pods/ns/p%d", i), &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}}, out, 0)
			revs[i] = out.ResourceVersion
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range writers {
		require.NoError(t, errs[i])
		assert.False(t, seen[revs[i]], "revision %s assigned twice", revs[i])
		seen[revs[i]] = true
	}
	stats, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(writers), stats.ObjectCount)
}

func TestRESTOptionsGetter(t *testing.T) {
	for _, disableCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableWatchCache=%v", disableCache), func(t *testing.T) {
			b := openTestBackend(t, Options{NoSync: true, DisableWatchCache: disableCache})
			config := storagebackend.NewDefaultConfig("/registry", apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion))
			gr := schema.GroupResource{Group: "kruntimes.io", Resource: "runs"}
			opts, err := b.RESTOptionsGetter(*config).GetRESTOptions(gr, nil)
			require.NoError(t, err)
			assert.Equal(t, "kruntimes.io/runs", opts.ResourcePrefix)
			assert.Equal(t, gr, opts.StorageConfig.GroupResource)
			assert.True(t, opts.EnableGarbageCollection)

			prefix := "/" + opts.ResourcePrefix
			st, destroy, err := opts.Decorator(opts.StorageConfig, prefix,
				func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(prefix+"/", obj) },
				func() runtime.Object { return &example.Pod{} }, func() runtime.Object { return &example.PodList{} },
				suitePodAttrs, nil, nil)
			require.NoError(t, err)
			t.Cleanup(destroy)
			ctx := context.Background()
			require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
				return st.ReadinessCheck() == nil, nil
			}))
			out := &example.Pod{}
			require.NoError(t, st.Create(ctx, "/kruntimes.io/runs/ns/a", &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}, out, 0))
			got := &example.Pod{}
			require.NoError(t, st.Get(ctx, "/kruntimes.io/runs/ns/a", storage.GetOptions{}, got))
			assert.Equal(t, out.ResourceVersion, got.ResourceVersion)
			// The config's prefix is part of the stored key, as with etcd3.
			rec, _, err := b.current("/registry/kruntimes.io/runs/ns/a")
			require.NoError(t, err)
			assert.NotNil(t, rec)
		})
	}
}

func TestOpenInitialisesFileLeftEmptyByACrash(t *testing.T) {
	dir := t.TempDir()
	db, err := bolt.Open(filepath.Join(dir, DataFileName), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	b, err := Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err, "a bbolt file without any bucket never held data")
	t.Cleanup(func() { _ = b.Close() })
	createPod(context.Background(), t, podStore(t, b), "ns", "a", "Pending")
}
