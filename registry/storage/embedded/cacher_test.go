package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/apitesting"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// The suite again, through StorageDecorator with the watch cache on: what
// the apiserver runs in production. Mirrors pkg/storage/cacher/cacher_test.go,
// minus what needs the cacher's unexported state or an etcd client:
// RunTestList with watchCacheEnabled=true asserts the cache's list calls
// through an etcd KubernetesRecorder (the store-level TestList covers the
// store; with watchCacheEnabled=false its cases that differ under a cache
// fail by design), compacting the cache's own history (compactWatch), and
// RunTestConsistentList: it asserts that a resourceVersion=0 list from the
// cache has not yet seen an unrelated write. That holds for etcd, which
// reports other keys' revisions only in periodic progress notifications;
// this store sends the cache a bookmark as soon as the global revision moves
// (TestCachedReadAtRevisionOfAnotherResource), so the cache is fresher than
// the runner allows. The store-level TestConsistentList covers the store.

type cachedSetup struct {
	clusterScoped    bool
	progressInterval time.Duration
}

func cachedTestSetup(t *testing.T, opts ...func(*cachedSetup)) (context.Context, storage.Interface, *Backend) {
	t.Helper()
	o := cachedSetup{progressInterval: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	b := openTestBackend(t, Options{NoSync: true, ProgressNotifyInterval: o.progressInterval})
	keyFunc := func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/pods/", obj) }
	if o.clusterScoped {
		keyFunc = func(obj runtime.Object) (string, error) { return storage.NoNamespaceKeyFunc("/pods/", obj) }
	}
	return context.Background(), decoratedPodStore(t, b, keyFunc, suitePodAttrs), b
}

// decoratedPodStore builds b's pods store the way the apiserver does:
// through StorageDecorator (so with the watch cache unless b's options turn
// it off), indexing spec.nodeName like the upstream cacher tests, and waits
// until it is ready.
func decoratedPodStore(tb testing.TB, b *Backend, keyFunc func(runtime.Object) (string, error), attrs storage.AttrFunc) storage.Interface {
	tb.Helper()
	config := storagebackend.NewDefaultConfig("", apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)).ForResource(schema.GroupResource{Resource: "pods"})
	s, destroy, err := b.StorageDecorator()(config, "/pods/", keyFunc,
		func() runtime.Object { return &example.Pod{} },
		func() runtime.Object { return &example.PodList{} },
		attrs,
		storage.IndexerFuncs{"spec.nodeName": func(obj runtime.Object) string { return obj.(*example.Pod).Spec.NodeName }},
		&cache.Indexers{
			"f:spec.nodeName":      func(obj interface{}) ([]string, error) { return []string{obj.(*example.Pod).Spec.NodeName}, nil },
			"f:metadata.namespace": func(obj interface{}) ([]string, error) { return []string{obj.(*example.Pod).Namespace}, nil },
		})
	require.NoError(tb, err)
	tb.Cleanup(destroy)
	require.NoError(tb, wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return s.ReadinessCheck() == nil, nil
	}), "watch cache never became ready")
	return s
}

func clusterScoped(o *cachedSetup) { o.clusterScoped = true }

// suitePodAttrs are the selectable fields the suite filters on (as
// cacher_test.go's GetPodAttrs).
func suitePodAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*example.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), fields.Set{
		"spec.nodeName":      pod.Spec.NodeName,
		"spec.restartPolicy": string(pod.Spec.RestartPolicy),
		"status.phase":       string(pod.Status.Phase),
		"metadata.name":      pod.Name,
		"metadata.namespace": pod.Namespace,
	}, nil
}

// createWaitsForCache makes a Create visible to the cache before returning,
// as cacher_test.go's createWrapper does: the watch-semantics runners start
// watches at the created revision right away.
type createWaitsForCache struct{ storage.Interface }

func (c *createWaitsForCache) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	if err := c.Interface.Create(ctx, key, obj, out, ttl); err != nil {
		return err
	}
	rv, err := resourceVersionOf(out)
	if err != nil {
		return err
	}
	return c.Interface.Get(ctx, key, storage.GetOptions{ResourceVersion: rv}, &example.Pod{})
}

func resourceVersionOf(obj runtime.Object) (string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("%T has no metadata", obj)
	}
	return o.GetResourceVersion(), nil
}

func TestCached(t *testing.T) {
	type runner func(ctx context.Context, t *testing.T, s storage.Interface, b *Backend)
	tests := []struct {
		name string
		opts []func(*cachedSetup)
		run  runner
	}{
		{name: "Create", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestCreate(ctx, t, s, func(context.Context, *testing.T, string) {})
		}},
		{name: "CreateWithTTL", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestCreateWithTTL(ctx, t, s)
		}},
		{name: "CreateWithKeyExist", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestCreateWithKeyExist(ctx, t, s)
		}},
		{name: "Get", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestGet(ctx, t, s)
		}},
		{name: "UnconditionalDelete", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestUnconditionalDelete(ctx, t, s)
		}},
		{name: "ConditionalDelete", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestConditionalDelete(ctx, t, s)
		}},
		{name: "DeleteWithSuggestion", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestDeleteWithSuggestion(ctx, t, s)
		}},
		{name: "DeleteWithSuggestionAndConflict", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestDeleteWithSuggestionAndConflict(ctx, t, s)
		}},
		{name: "DeleteWithSuggestionOfDeletedObject", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(ctx, t, s)
		}},
		{name: "ValidateDeletionWithSuggestion", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestValidateDeletionWithSuggestion(ctx, t, s)
		}},
		{name: "ValidateDeletionWithOnlySuggestionValid", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(ctx, t, s)
		}},
		{name: "DeleteWithConflict", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestDeleteWithConflict(ctx, t, s)
		}},
		{name: "PreconditionalDeleteWithSuggestion", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestPreconditionalDeleteWithSuggestion(ctx, t, s)
		}},
		{name: "PreconditionalDeleteWithOnlySuggestionPass", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(ctx, t, s)
		}},
		{name: "ListPaging", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestListPaging(ctx, t, s)
		}},
		{name: "GetListNonRecursive", run: func(ctx context.Context, t *testing.T, s storage.Interface, b *Backend) {
			storagetesting.RunTestGetListNonRecursive(ctx, t, increaseRVFunc(b), s)
		}},
		{name: "GetListRecursivePrefix", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			// Its resourceVersion=0 reads may be served by a cache that has
			// not seen the last create yet; wait for it like upstream's
			// createWrapper.
			storagetesting.RunTestGetListRecursivePrefix(ctx, t, &createWaitsForCache{s})
		}},
		{name: "NamespaceScopedList", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestNamespaceScopedList(ctx, t, s)
		}},
		{name: "GuaranteedUpdateWithTTL", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestGuaranteedUpdateWithTTL(ctx, t, s)
		}},
		{name: "GuaranteedUpdateWithConflict", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestGuaranteedUpdateWithConflict(ctx, t, s)
		}},
		{name: "GuaranteedUpdateWithSuggestionAndConflict", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(ctx, t, s)
		}},
		{name: "KeySchema", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestKeySchema(ctx, t, s)
		}},
		{name: "Watch", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestWatch(ctx, t, s)
		}},
		{name: "WatchFromZero", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			// Compacting the watch cache's own history needs its internals,
			// like cacher_test.go's compactWatch: the runner skips that half.
			storagetesting.RunTestWatchFromZero(ctx, t, s, nil)
		}},
		{name: "DeleteTriggerWatch", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestDeleteTriggerWatch(ctx, t, s)
		}},
		{name: "WatchFromNonZero", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestWatchFromNonZero(ctx, t, s)
		}},
		{name: "DelayedWatchDelivery", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestDelayedWatchDelivery(ctx, t, s)
		}},
		{name: "WatcherTimeout", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestWatcherTimeout(ctx, t, s)
		}},
		{name: "WatchDeleteEventObjectHaveLatestRV", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(ctx, t, s)
		}},
		{name: "WatchInitializationSignal", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestWatchInitializationSignal(ctx, t, s)
		}},
		{name: "ClusterScopedWatch", opts: []func(*cachedSetup){clusterScoped}, run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestClusterScopedWatch(ctx, t, s)
		}},
		{name: "NamespaceScopedWatch", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestNamespaceScopedWatch(ctx, t, s)
		}},
		{name: "WatchDispatchBookmarkEvents", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestWatchDispatchBookmarkEvents(ctx, t, s, true)
		}},
		{name: "OptionalWatchBookmarksWithCorrectResourceVersion", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunTestOptionalWatchBookmarksWithCorrectResourceVersion(ctx, t, s)
		}},
		{name: "SendInitialEventsBackwardCompatibility", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunSendInitialEventsBackwardCompatibility(ctx, t, s)
		}},
		{name: "WatchSemantics", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunWatchSemantics(ctx, t, &createWaitsForCache{s})
		}},
		{name: "WatchSemanticInitialEventsExtended", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunWatchSemanticInitialEventsExtended(ctx, t, &createWaitsForCache{s})
		}},
		{name: "WatchListMatchSingle", run: func(ctx context.Context, t *testing.T, s storage.Interface, _ *Backend) {
			storagetesting.RunWatchListMatchSingle(ctx, t, &createWaitsForCache{s})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, s, b := cachedTestSetup(t, tc.opts...)
			tc.run(ctx, t, s, b)
		})
	}
}

// TestCachedWatchResumesAcrossRestart pins why the decorator routes old
// revisions around the watch cache: a fresh cache only knows events since it
// started, the file knows the whole retention window.
func TestCachedWatchResumesAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err)
	s := podStore(t, b)
	first := createPod(ctx, t, s, "ns", "a", "Pending")
	setPhase(ctx, t, s, "ns", "a", "Running")
	require.NoError(t, b.Close())

	b, err = Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	config := storagebackend.NewDefaultConfig("", apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)).ForResource(schema.GroupResource{Resource: "pods"})
	cached, destroy, err := b.StorageDecorator()(config, "/pods/",
		func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/pods/", obj) },
		func() runtime.Object { return &example.Pod{} }, func() runtime.Object { return &example.PodList{} },
		suitePodAttrs, nil, nil)
	require.NoError(t, err)
	t.Cleanup(destroy)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return cached.ReadinessCheck() == nil, nil
	}))

	w, err := cached.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: first.ResourceVersion, Predicate: storage.Everything, Recursive: true})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	e := nextEvent(t, w)
	require.Equal(t, watch.Modified, e.Type, "got %#v", e.Object)
	require.Equal(t, example.PodPhase("Running"), e.Object.(*example.Pod).Status.Phase)
}

// TestCachedReadAtRevisionOfAnotherResource pins the bookmark the store
// sends the watch cache when other resources move the global revision: a
// read at such a revision must not wait for a periodic bookmark.
func TestCachedReadAtRevisionOfAnotherResource(t *testing.T) {
	// Periodic bookmarks far apart: only the on-change bookmark can help.
	ctx, s, b := cachedTestSetup(t, func(o *cachedSetup) { o.progressInterval = time.Hour })
	createPod(ctx, t, s, "ns", "a", "Pending")
	otherRev, err := putRaw(ctx, b, "/other-resource/x", []byte("x"))
	require.NoError(t, err)

	list := &example.PodList{}
	require.NoError(t, s.GetList(ctx, "/pods/", storage.ListOptions{
		ResourceVersion:      fmt.Sprint(otherRev),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		Predicate:            storage.Everything,
		Recursive:            true,
	}, list))
	require.Len(t, list.Items, 1)
	require.Equal(t, fmt.Sprint(otherRev), list.ResourceVersion)
}

// TestWatchListServedByCache: a watch-list (what client-go informers open)
// is served by the watch cache, not by a store watcher of its own that
// decodes every event; the cache allows it only because progress.go tells
// the feature checker that this store answers progress requests.
func TestWatchListServedByCache(t *testing.T) {
	ctx, s, _ := cachedTestSetup(t)
	require.True(t, etcdfeature.DefaultFeatureSupportChecker.Supports(storage.RequestWatchProgress))
	createPod(ctx, t, s, "ns", "a", "Running")

	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	w, err := s.Watch(ctx, "/pods/", storage.ListOptions{Recursive: true, SendInitialEvents: ptr.To(true), Predicate: pred})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	_, fromStore := w.(*watchChan)
	assert.False(t, fromStore, "the watch-list went to the store")

	ev := nextEvent(t, w)
	require.Equal(t, watch.Added, ev.Type)
	assert.Equal(t, "a", ev.Object.(*example.Pod).Name)
	ev = nextEvent(t, w)
	require.Equal(t, watch.Bookmark, ev.Type)
	meta, err := apimeta.Accessor(ev.Object)
	require.NoError(t, err)
	assert.Equal(t, "true", meta.GetAnnotations()[metav1.InitialEventsAnnotationKey], "the initial events end with their bookmark")
}
