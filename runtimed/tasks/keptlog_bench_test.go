package tasks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesclient "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

// BenchmarkTaskLogKept measures what keeping each task's log costs: task
// Runs/s through one runtimed with the attempt's log handed to
// kruntimes-apiserver (runs/log, the one extra write per attempt) and with
// that write skipped, in interleaved rounds on one controller, one
// kruntimes-apiserver (embedded storage) and one bash Runtime Server. Every
// task prints the same 1 KiB either way and runtimed receives it from the
// Runtime Server either way: only the write differs. The load is a closed
// loop of capacity (4) Runs in flight, each created Scheduled for this Pod
// and awaited to its end through a watch, b.N Runs per round. Report,
// don't assert:
//
//	go test -tags fieldsv1string -run '^$' -bench TaskLogKept -benchtime 200x ./runtimed/tasks
func BenchmarkTaskLogKept(b *testing.B) {
	const (
		capacity = 4
		rounds   = 6
		script   = "printf '%01023d\\n' 0" // 1 KiB of stdout
	)
	var logs *logSwitch
	h := startWith(b, capacity, harnessOptions{wrap: func(runs kruntimesclient.RunsGetter) kruntimesclient.RunsGetter {
		logs = &logSwitch{RunsGetter: runs}
		return logs
	}})
	ends := watchEnds(b, h)
	elapsed := map[bool]time.Duration{}
	slowest, fastest := map[bool]float64{}, map[bool]float64{}
	b.ResetTimer()
	for round := range rounds {
		// kept, unkept, unkept, kept, kept, unkept: each mode runs first
		// as often as second, so a drift of the machine's load cancels.
		for _, keep := range [][2]bool{{true, false}, {false, true}}[round%2] {
			logs.keep.Store(keep)
			savedBefore := logs.saved.Load()
			took := closedLoop(b, h, ends, fmt.Sprintf("r%d-%s", round, keptName(keep)), script, capacity, b.N)
			elapsed[keep] += took
			rate := float64(b.N) / took.Seconds()
			if slowest[keep] == 0 || rate < slowest[keep] {
				slowest[keep] = rate
			}
			fastest[keep] = max(fastest[keep], rate)
			saved := logs.saved.Load() - savedBefore
			if want := map[bool]int64{true: int64(b.N), false: 0}[keep]; saved != want {
				b.Fatalf("round %d (%s): %d logs saved, want %d", round, keptName(keep), saved, want)
			}
			b.Logf("round %d, %s: %d Runs in %s, %.1f Runs/s", round, keptName(keep), b.N, took.Round(time.Millisecond), rate)
		}
	}
	b.StopTimer()
	perMode := float64(rounds * b.N)
	b.ReportMetric(perMode/elapsed[true].Seconds(), "kept-Runs/s")
	b.ReportMetric(perMode/elapsed[false].Seconds(), "unkept-Runs/s")
	// The rounds' spread, to judge the difference by.
	b.ReportMetric(slowest[true], "kept-slowest-round-Runs/s")
	b.ReportMetric(fastest[true], "kept-fastest-round-Runs/s")
	b.ReportMetric(slowest[false], "unkept-slowest-round-Runs/s")
	b.ReportMetric(fastest[false], "unkept-fastest-round-Runs/s")
}

func keptName(keep bool) string {
	if keep {
		return "kept"
	}
	return "unkept"
}

// logSwitch forwards the controller's SaveLog to kruntimes-apiserver only
// while keep is set, and counts what it forwarded.
type logSwitch struct {
	kruntimesclient.RunsGetter
	keep  atomic.Bool
	saved atomic.Int64
}

func (s *logSwitch) Runs(namespace string) kruntimesclient.RunInterface {
	return &switchedRuns{RunInterface: s.RunsGetter.Runs(namespace), logs: s}
}

type switchedRuns struct {
	kruntimesclient.RunInterface
	logs *logSwitch
}

func (r *switchedRuns) SaveLog(ctx context.Context, name string, attempt int32, log *v1alpha1.RunLog) error {
	if !r.logs.keep.Load() {
		return nil
	}
	r.logs.saved.Add(1)
	return r.RunInterface.SaveLog(ctx, name, attempt, log)
}

// runEnds tells a waiter when its Run reached a terminal phase, from one
// informer over the namespace.
type runEnds struct {
	mu      sync.Mutex
	waiters map[string]chan *v1alpha1.Run
	ended   map[string]*v1alpha1.Run
}

func watchEnds(b *testing.B, h *harness) *runEnds {
	e := &runEnds{waiters: map[string]chan *v1alpha1.Run{}, ended: map[string]*v1alpha1.Run{}}
	factory := externalversions.NewSharedInformerFactoryWithOptions(h.client, 0, externalversions.WithNamespace(testNamespace))
	informer := factory.Kruntimes().V1alpha1().Runs().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    e.observe,
		UpdateFunc: func(_, obj interface{}) { e.observe(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	b.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	if !cache.WaitForCacheSync(b.Context().Done(), informer.HasSynced) {
		b.Fatal("the Runs informer did not sync")
	}
	return e
}

func (e *runEnds) observe(obj interface{}) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok || !terminal(run) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, seen := e.ended[run.Name]; seen {
		return
	}
	e.ended[run.Name] = run
	if ch, ok := e.waiters[run.Name]; ok {
		ch <- run
		delete(e.waiters, run.Name)
	}
}

func (e *runEnds) expect(name string) <-chan *v1alpha1.Run {
	ch := make(chan *v1alpha1.Run, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if run, ok := e.ended[name]; ok {
		ch <- run
	} else {
		e.waiters[name] = ch
	}
	return ch
}

// closedLoop runs n task Runs named prefix-i, inFlight at a time, each
// created as soon as the previous one of its worker ended, and returns how
// long they took. A Run that does not succeed fails the benchmark.
func closedLoop(b *testing.B, h *harness, ends *runEnds, prefix, script string, inFlight, n int) time.Duration {
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Pointer[string]
	started := time.Now()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("%s-%d", prefix, i)
				ended := ends.expect(name)
				if err := createScheduled(b.Context(), h.client, scheduledRun(name, script)); err != nil {
					msg := err.Error()
					failed.CompareAndSwap(nil, &msg)
					continue
				}
				select {
				case run := <-ended:
					if run.Status.Phase != lifecycle.Succeeded {
						msg := fmt.Sprintf("%s ended %s: %s", name, run.Status.Phase, run.Status.Message)
						failed.CompareAndSwap(nil, &msg)
					}
				case <-time.After(time.Minute):
					msg := name + " did not end within a minute"
					failed.CompareAndSwap(nil, &msg)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	took := time.Since(started)
	if msg := failed.Load(); msg != nil {
		b.Fatal(*msg)
	}
	return took
}

// createScheduled creates run and binds it to this Pod through runs/status,
// as the scheduler does: createAt for a goroutine of its own.
func createScheduled(ctx context.Context, client versioned.Interface, run *v1alpha1.Run) error {
	runs := client.KruntimesV1alpha1().Runs(run.Namespace)
	status := run.Status
	created, err := runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create %s: %w", run.Name, err)
	}
	created.Status = status
	if _, err := runs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("schedule %s: %w", run.Name, err)
	}
	return nil
}

// TestSilentAttemptSavesNoLog: an attempt that wrote nothing costs no
// runs/log write, and its log reads as an empty 200 all the same; one that
// wrote is kept.
func TestSilentAttemptSavesNoLog(t *testing.T) {
	var logs *logSwitch
	h := startWith(t, 2, harnessOptions{wrap: func(runs kruntimesclient.RunsGetter) kruntimesclient.RunsGetter {
		logs = &logSwitch{RunsGetter: runs}
		logs.keep.Store(true)
		return logs
	}}, scheduledRun("silent", "true"), scheduledRun("printer", "echo hi"))
	for _, name := range []string{"silent", "printer"} {
		run := h.waitFor(t, name, "terminal", terminal)
		require.Equal(t, lifecycle.Succeeded, run.Status.Phase, run.Status.Message)
	}
	assert.Equal(t, int64(1), logs.saved.Load(), "only the attempt that wrote saved a log")
	for name, want := range map[string]string{"silent": "", "printer": "hi\n"} {
		for _, opts := range []*v1alpha1.RunLogOptions{{}, {Attempt: ptr.To[int32](1)}, {Follow: true}} {
			got, err := h.client.KruntimesV1alpha1().Runs(testNamespace).GetLogs(name, opts).DoRaw(t.Context())
			require.NoError(t, err, "%s %+v", name, opts)
			assert.Equal(t, want, string(got), "%s %+v", name, opts)
		}
	}
}
