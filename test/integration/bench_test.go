package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// BenchmarkRunWrites measures, through the apiserver, a Run create followed
// by a status update (the first two writes of every Run's life) from 1, 16
// and 64 concurrent writers, on each backend with durable (fsynced) writes,
// and how long a watcher waits for the status update. Report, don't assert:
//
//	go test ./test/integration -run '^$' -bench BenchmarkRunWrites -benchtime 2000x
func BenchmarkRunWrites(b *testing.B) {
	backends := []struct {
		name  string
		start func(testing.TB) *testServer
	}{
		{"embedded", func(tb testing.TB) *testServer { return withProtobufClient(tb, startServer(tb, "")) }},
		{"etcd3", func(tb testing.TB) *testServer { return withProtobufClient(tb, startEtcd3Server(tb, false)) }},
	}
	for _, backend := range backends {
		b.Run(backend.name, func(b *testing.B) {
			s := backend.start(b)
			round := 0
			for _, writers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
					round++
					benchmarkRunWrites(b, s, fmt.Sprintf("bench-%d", round), writers)
				})
			}
			b.Run("paced=1000/s", func(b *testing.B) {
				round++
				benchmarkPacedCreates(b, s, fmt.Sprintf("bench-%d", round), 1000)
			})
		})
	}
}

// withProtobufClient makes s's client speak protobuf, as the kruntimes
// components do (preferProtobuf).
func withProtobufClient(tb testing.TB, s *testServer) *testServer {
	client, err := versioned.NewForConfig(preferProtobuf(s.config))
	if err != nil {
		tb.Fatal(err)
	}
	s.client = client
	return s
}

func benchmarkRunWrites(b *testing.B, s *testServer, ns string, writers int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := s.client.KruntimesV1alpha1().Runs(ns)
	list, err := runs.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// When the writers saturate the CPU the watch cache may close a watcher
	// that falls behind, as it does for any client; resume it from the last
	// event, as informers do, instead of losing the rest of the deliveries.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return runs.Watch(ctx, options)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	var (
		sent      sync.Map // name → time the status update was sent
		delivered atomic.Int64
		deliverMu sync.Mutex
		delivery  []time.Duration
	)
	go func() {
		for ev := range w.ResultChan() {
			run, ok := ev.Object.(*v1alpha1.Run)
			if !ok || ev.Type != watch.Modified || run.Status.Phase != lifecycle.Scheduled {
				continue
			}
			if t0, ok := sent.Load(run.Name); ok {
				d := time.Since(t0.(time.Time))
				deliverMu.Lock()
				delivery = append(delivery, d)
				deliverMu.Unlock()
			}
			delivered.Add(1)
		}
	}()

	var (
		next      atomic.Int64
		latencyMu sync.Mutex
		latencies = make([]time.Duration, 0, 2*b.N)
		wg        sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 2*b.N/writers+2)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					break
				}
				run := taskRun(fmt.Sprintf("run-%d", i))
				run.Namespace = ns
				t0 := time.Now()
				created, err := runs.Create(ctx, run, metav1.CreateOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				scheduled(&created.Status)
				sent.Store(created.Name, t1)
				if _, err := runs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
					b.Error(err)
					return
				}
				local = append(local, t1.Sub(t0), time.Since(t1))
			}
			latencyMu.Lock()
			latencies = append(latencies, local...)
			latencyMu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return delivered.Load() >= int64(b.N), nil
	})

	b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "writes/s")
	b.ReportMetric(percentile(latencies, 50).Seconds()*1000, "p50-write-ms")
	b.ReportMetric(percentile(latencies, 99).Seconds()*1000, "p99-write-ms")
	deliverMu.Lock()
	b.ReportMetric(percentile(delivery, 50).Seconds()*1000, "p50-watch-ms")
	b.ReportMetric(percentile(delivery, 99).Seconds()*1000, "p99-watch-ms")
	deliverMu.Unlock()
}

// benchmarkPacedCreates issues Run creates at a fixed rate, open loop (a
// slow write does not slow the arrivals), and reports the latency each saw.
func benchmarkPacedCreates(b *testing.B, s *testServer, ns string, perSecond int) {
	ctx := context.Background()
	runs := s.client.KruntimesV1alpha1().Runs(ns)
	interval := time.Second / time.Duration(perSecond)
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		wg        sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // pacing the arrivals, not synchronizing
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := taskRun(fmt.Sprintf("paced-%d", i))
			run.Namespace = ns
			t0 := time.Now()
			if _, err := runs.Create(ctx, run, metav1.CreateOptions{}); err != nil {
				b.Error(err)
				return
			}
			d := time.Since(t0)
			mu.Lock()
			latencies = append(latencies, d)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
	b.ReportMetric(percentile(latencies, 50).Seconds()*1000, "p50-write-ms")
	b.ReportMetric(percentile(latencies, 99).Seconds()*1000, "p99-write-ms")
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
