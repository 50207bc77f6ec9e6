package embedded

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// Benchmark sizes are smaller than etcd3's (150k pods): pre-creating those
// with fsync on a shared 2-core CI machine takes longer than the benchmark.
// Override nothing here; compare per-op numbers, not totals.
var benchDims = struct{ namespaces, podsPerNamespace, nodes int }{50, 100, 500}

func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*example.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod: %T", obj)
	}
	return labels.Set(pod.Labels), fields.Set{
		"metadata.name":      pod.Name,
		"metadata.namespace": pod.Namespace,
		"spec.nodeName":      pod.Spec.NodeName,
	}, nil
}

// benchStore builds the pods store the way the apiserver will: through
// StorageDecorator, with or without the watch cache, indexing spec.nodeName
// like the upstream cacher benchmarks.
func benchStore(b *testing.B, opts Options) (context.Context, storage.Interface, *Backend) {
	b.Helper()
	backend := openTestBackend(b, opts)
	keyFunc := func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/pods/", obj) }
	return context.Background(), decoratedPodStore(b, backend, keyFunc, podAttrs), backend
}

// precreate seeds pods from many goroutines so group commit amortizes the
// fsyncs; the upstream helper creates them one at a time.
func precreate(ctx context.Context, b *testing.B, s storage.Interface, data storagetesting.BenchmarkData) {
	b.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	work := make(chan *example.Pod)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pod := range work {
				err := s.Create(ctx, fmt.Sprintf("/pods/%s/%s", pod.Namespace, pod.Name), pod.DeepCopy(), &example.Pod{}, 0)
				if err != nil && !storage.IsExist(err) {
					failed.Store(err)
				}
			}
		}()
	}
	for _, pod := range data.Pods {
		work <- pod
	}
	close(work)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}

var cacheModes = []struct {
	name  string
	cache bool
}{{"WatchCache=false", false}, {"WatchCache=true", true}}

func BenchmarkStoreWriteThroughput(b *testing.B) {
	for _, mode := range cacheModes {
		b.Run(mode.name, func(b *testing.B) {
			// fsync on: this is what a write costs in production.
			ctx, s, _ := benchStore(b, Options{DisableWatchCache: !mode.cache})
			data := storagetesting.PrepareBenchmarkData(benchDims.namespaces, benchDims.podsPerNamespace, benchDims.nodes)
			precreate(ctx, b, s, data)
			b.ResetTimer()
			storagetesting.RunBenchmarkWriteThroughput(ctx, b, s, data, mode.cache, nil)
		})
	}
}

func BenchmarkStoreList(b *testing.B) {
	for _, mode := range cacheModes {
		b.Run(mode.name, func(b *testing.B) {
			ctx, s, _ := benchStore(b, Options{DisableWatchCache: !mode.cache, NoSync: true})
			data := storagetesting.PrepareBenchmarkData(benchDims.namespaces, benchDims.podsPerNamespace, benchDims.nodes)
			precreate(ctx, b, s, data)
			storagetesting.RunBenchmarkStoreList(ctx, b, s, data, mode.cache)
		})
	}
}

func BenchmarkStoreStats(b *testing.B) {
	ctx, s, _ := benchStore(b, Options{NoSync: true})
	data := storagetesting.PrepareBenchmarkData(benchDims.namespaces, benchDims.podsPerNamespace, benchDims.nodes)
	precreate(ctx, b, s, data)
	storagetesting.RunBenchmarkStoreStats(ctx, b, s)
}

// BenchmarkWatchFanout measures what decides the watch cache question for
// kruntimes: one field-selected watch per node (like daemons watching Runs by
// status.assignedPod) while updates land on random nodes. ns/op is the cost
// of one update delivered to its one interested watcher.
func BenchmarkWatchFanout(b *testing.B) {
	for _, mode := range cacheModes {
		for _, watchers := range []int{10, 100} {
			b.Run(fmt.Sprintf("%s/Watchers=%d", mode.name, watchers), func(b *testing.B) {
				ctx, s, backend := benchStore(b, Options{DisableWatchCache: !mode.cache, NoSync: true})
				for i := range watchers {
					pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pod-%d", i)}, Spec: example.PodSpec{NodeName: fmt.Sprintf("node-%d", i)}}
					require.NoError(b, s.Create(ctx, fmt.Sprintf("/pods/ns/pod-%d", i), pod, &example.Pod{}, 0))
				}
				rv := fmt.Sprint(backend.CurrentRevision())
				var received atomic.Int64
				for i := range watchers {
					pred := storage.SelectionPredicate{
						Label:       labels.Everything(),
						Field:       fields.OneTermEqualSelector("spec.nodeName", fmt.Sprintf("node-%d", i)),
						GetAttrs:    podAttrs,
						IndexFields: []string{"spec.nodeName"},
					}
					w, err := s.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Predicate: pred, Recursive: true})
					require.NoError(b, err)
					b.Cleanup(w.Stop)
					go func() {
						for e := range w.ResultChan() {
							if e.Type == watch.Modified {
								received.Add(1)
							}
						}
					}()
				}
				b.ResetTimer()
				var next atomic.Int64
				var wg sync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
							i := n % int64(watchers)
							err := s.GuaranteedUpdate(ctx, fmt.Sprintf("/pods/ns/pod-%d", i), &example.Pod{}, false, nil,
								func(obj runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
									pod := obj.(*example.Pod)
									pod.Annotations = map[string]string{"n": fmt.Sprint(n)}
									return pod, nil, nil
								}, nil)
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				require.NoError(b, wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
					return received.Load() >= int64(b.N), nil
				}))
			})
		}
	}
}

// BenchmarkCreateFsync contrasts one writer (every create waits for its own
// fsync) with many (creates share fsyncs through group commit).
func BenchmarkCreateFsync(b *testing.B) {
	for _, writers := range []int{1, 25} {
		b.Run(fmt.Sprintf("Writers=%d", writers), func(b *testing.B) {
			benchmarkConcurrentCreates(b, podStore(b, openTestBackend(b, Options{})), writers)
		})
	}
}

// benchmarkConcurrentCreates creates b.N pods from writers goroutines and
// reports writes/s.
func benchmarkConcurrentCreates(b *testing.B, s storage.Interface, writers int) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				name := fmt.Sprintf("pod-%d", n)
				pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
				if err := s.Create(ctx, "/pods/ns/"+name, pod, &example.Pod{}, 0); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// benchmarkPacedCreates issues creates at a fixed rate, open loop (a slow
// write does not delay the next arrival), and reports the latency each saw:
// the storage's own share of a write's latency at that load.
func benchmarkPacedCreates(b *testing.B, s storage.Interface, perSecond int) {
	ctx := context.Background()
	interval := time.Second / time.Duration(perSecond)
	latencies := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // pacing the arrivals, not synchronizing
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("paced-%d", i)
			pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
			t0 := time.Now()
			if err := s.Create(ctx, "/pods/ns/"+name, pod, &example.Pod{}, 0); err != nil {
				b.Error(err)
			}
			latencies[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
	b.ReportMetric(latencies[(b.N-1)*50/100].Seconds()*1000, "p50-write-ms")
	b.ReportMetric(latencies[(b.N-1)*99/100].Seconds()*1000, "p99-write-ms")
}

// listPageSizes are BenchmarkListPage's namespace sizes: one small one by
// default, so that running every benchmark once stays quick;
// -args -list-page-sizes=10000,100000 for the table in docs/storage.md.
var listPageSizes = flag.String("list-page-sizes", "10000", "Comma-separated namespace sizes for BenchmarkListPage.")

// BenchmarkListPage measures one page of 500 in a namespace of n pods, the
// first page and a continued one, through the watch cache and from the
// store: the cache collects every key after the page's start before it
// applies the limit (O(n), no decoding), the store seeks and decodes the
// page (O(limit)).
func BenchmarkListPage(b *testing.B) {
	for _, size := range strings.Split(*listPageSizes, ",") {
		n, err := strconv.Atoi(size)
		require.NoError(b, err, "-list-page-sizes")
		for _, mode := range cacheModes {
			b.Run(fmt.Sprintf("pods=%d/%s", n, mode.name), func(b *testing.B) {
				ctx, s, _ := benchStore(b, Options{DisableWatchCache: !mode.cache, NoSync: true})
				data := storagetesting.PrepareBenchmarkData(1, n, 100)
				precreate(ctx, b, s, data)
				ns := data.Pods[0].Namespace
				page := func(continueToken string) string {
					list := &example.PodList{}
					opts := storage.ListOptions{Recursive: true, Predicate: storage.SelectionPredicate{
						Label: labels.Everything(), Field: fields.Everything(), Limit: 500, Continue: continueToken,
						GetAttrs: podAttrs}}
					require.NoError(b, s.GetList(ctx, "/pods/"+ns, opts, list))
					require.Len(b, list.Items, 500)
					return list.Continue
				}
				token := page("")
				b.Run("first", func(b *testing.B) {
					for b.Loop() {
						page("")
					}
				})
				b.Run("continue", func(b *testing.B) {
					for b.Loop() {
						page(token)
					}
				})
			})
		}
	}
}
