// Command runs benchmarks Runs end to end against a cluster running
// kruntimes. For task Runs (--mode task) it reports the create→Scheduled,
// →Running and →terminal latencies (p50/p95/p99) from the Runs'
// microsecond status timestamps; for function Runs (--mode function) the
// create→Scheduled, →Running and →Ready latencies, Ready being when the
// function can be invoked. It also reports the latency the client observed
// through a watch, and the throughput in Runs/s.
//
// By default the load is a closed loop: each of --concurrency workers keeps
// one Run in flight, creating the next as soon as its previous Run is done
// (terminal, or Ready for a function, which is then deleted to free its
// slot), so the latencies are those of the system at that load
// (--concurrency 1 is a single Run at a time). --burst creates all Runs as
// fast as --concurrency creators can instead, which measures queueing.
// --mode both measures tasks, then functions, in one invocation.
//
//	go run ./test/bench/runs --kubeconfig .local/kubeconfig --mode task --runtime bash --runs 500 --concurrency 32
//	go run ./test/bench/runs --kubeconfig .local/kubeconfig --mode function --runtime python --runs 200 --concurrency 1
//
// With --profile-socket (kruntimes-apiserver's --debug-socket-path; the
// local cluster's is .local/cluster/kruntimes-apiserver/debug.sock) it
// also takes a CPU profile of kruntimes-apiserver for --profile-seconds,
// --profile-delay after the first create, writes it to --profile-out, and
// reports how many Runs were bound (status.scheduledTime) in that window:
// the hosted scheduler's CPU per placement is the CPU of its stacks
// (go tool pprof -top -focus=kruntimes/controllers/scheduler) over that
// count.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/test/bench/cputime"
)

type options struct {
	kubeconfig      string
	namespace       string
	mode            string
	runtime         string
	functionRuntime string
	script          string
	runs            int
	concurrency     int
	burst           bool
	timeout         time.Duration
	keep            bool
	profileSocket   string
	profileOut      string
	profileDelay    time.Duration
	profileSeconds  int
	stateDir        string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of the cluster to benchmark.")
	flag.StringVar(&o.namespace, "namespace", "default", "Namespace of the Runtime and the Runs.")
	flag.StringVar(&o.mode, "mode", "task", "What to create: task, function (a no-op Python function), or both (tasks, then functions).")
	flag.StringVar(&o.runtime, "runtime", "bash", "Runtime that executes the task Runs; it must exist and be Ready.")
	flag.StringVar(&o.functionRuntime, "function-runtime", "python", "Runtime (Python) that registers the function Runs; it must exist and be Ready.")
	flag.StringVar(&o.script, "script", "true", "Inline source of every task Run.")
	flag.IntVar(&o.runs, "runs", 200, "Number of Runs to create.")
	flag.IntVar(&o.concurrency, "concurrency", 16, "Runs in flight (closed loop), or concurrent creators with --burst.")
	flag.BoolVar(&o.burst, "burst", false, "Create every Run as fast as possible instead of keeping --concurrency Runs in flight.")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "Give up when the Runs are not all terminal by then.")
	flag.BoolVar(&o.keep, "keep", false, "Keep the Runs afterwards instead of deleting them.")
	flag.StringVar(&o.profileSocket, "profile-socket", "", "kruntimes-apiserver's debug socket: take a CPU profile of it during the batch.")
	flag.StringVar(&o.profileOut, "profile-out", "kruntimes-apiserver.cpu.pb.gz", "Where to write the CPU profile.")
	flag.DurationVar(&o.profileDelay, "profile-delay", 5*time.Second, "Start the CPU profile this long after the first create.")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 30, "Length of the CPU profile; the batch must last longer than --profile-delay plus this.")
	flag.StringVar(&o.stateDir, "state-dir", ".local/cluster", "The local cluster's state directory: the CPU its processes used during the batch is reported per Run, by command. Ignored when no local cluster holds it.")
	flag.Parse()
	modes := []lifecycle.Mode{lifecycle.ModeTask}
	switch o.mode {
	case "task":
	case "function":
		modes = []lifecycle.Mode{lifecycle.ModeFunction}
	case "both":
		modes = append(modes, lifecycle.ModeFunction)
	default:
		fmt.Fprintf(os.Stderr, "runs: --mode must be task, function or both, got %q\n", o.mode)
		os.Exit(2)
	}
	for _, mode := range modes {
		if err := run(context.Background(), o, mode); err != nil {
			fmt.Fprintln(os.Stderr, "runs:", err)
			os.Exit(1)
		}
	}
}

// noopFunction is the function every function Run registers.
const noopFunction = "def handle(event, context):\n    return None\n"

// newRun is the Run i of the batch.
func newRun(o options, mode lifecycle.Mode, name, batch string) *v1alpha1.Run {
	run := &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kruntimes.io/bench": batch}},
		Spec: v1alpha1.RunSpec{
			Runtime: o.runtime,
			Source:  v1alpha1.RunSource{Inline: o.script},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
		},
	}
	if mode == lifecycle.ModeFunction {
		run.Spec = v1alpha1.RunSpec{
			Runtime: o.functionRuntime,
			Source:  v1alpha1.RunSource{Inline: noopFunction, InlinePath: "handler.py"},
			Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "handler.handle"}},
		}
	}
	return run
}

// isDone says when a Run of mode has reached what the benchmark waits for:
// a terminal phase, or Ready for a function.
func isDone(mode lifecycle.Mode, r *v1alpha1.Run) bool {
	return lifecycle.IsTerminal(r.Status.Phase) || (mode == lifecycle.ModeFunction && r.Status.Phase == lifecycle.Ready)
}

// sample is what the benchmark knows of one Run.
type sample struct {
	created  time.Time     // just before the create request was sent
	observed time.Duration // create → the client saw it done
	final    *v1alpha1.Run
}

// doneWatch tells waiters when Runs of the batch are done, from one
// informer over the batch's label.
type doneWatch struct {
	mode    lifecycle.Mode
	mu      sync.Mutex
	waiters map[string]chan *v1alpha1.Run
	done    map[string]*v1alpha1.Run
}

func (w *doneWatch) observe(obj interface{}) {
	r, ok := obj.(*v1alpha1.Run)
	if !ok || !isDone(w.mode, r) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.done[r.Name]; seen {
		return
	}
	w.done[r.Name] = r
	if ch, ok := w.waiters[r.Name]; ok {
		ch <- r
		delete(w.waiters, r.Name)
	}
}

// expect returns a channel that receives the Run once it is done.
func (w *doneWatch) expect(name string) <-chan *v1alpha1.Run {
	ch := make(chan *v1alpha1.Run, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.done[name]; ok {
		ch <- r
	} else {
		w.waiters[name] = ch
	}
	return ch
}

func run(ctx context.Context, o options, mode lifecycle.Mode) error {
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	config.QPS, config.Burst = 5000, 5000
	// Protobuf, as kruntimes' own components use.
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	runs := client.KruntimesV1alpha1().Runs(o.namespace)
	batch := fmt.Sprintf("bench-%d", time.Now().UnixNano()%1_000_000)
	selector := metav1.ListOptions{LabelSelector: "kruntimes.io/bench=" + batch}
	if !o.keep {
		defer func() {
			_ = runs.DeleteCollection(context.Background(), metav1.DeleteOptions{}, selector)
		}()
	}

	tw := &doneWatch{mode: mode, waiters: map[string]chan *v1alpha1.Run{}, done: map[string]*v1alpha1.Run{}}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0,
		externalversions.WithNamespace(o.namespace),
		externalversions.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector.LabelSelector }))
	informer := factory.Kruntimes().V1alpha1().Runs().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tw.observe,
		UpdateFunc: func(_, obj interface{}) { tw.observe(obj) },
	}); err != nil {
		return err
	}
	stopInformers := make(chan struct{})
	factory.Start(stopInformers)
	defer func() {
		close(stopInformers)
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("watching the benchmark's Runs: %w", ctx.Err())
	}

	samples := make([]sample, o.runs)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	// await waits for Run i to be done and records it. A Ready function
	// is deleted at once so that its slot frees for the next.
	await := func(i int, name string, done <-chan *v1alpha1.Run) {
		select {
		case r := <-done:
			samples[i].observed = time.Since(samples[i].created)
			samples[i].final = r
			if mode == lifecycle.ModeFunction && !o.keep {
				if err := runs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					fail(fmt.Errorf("deleting %s: %w", name, err))
				}
			}
		case <-ctx.Done():
			fail(fmt.Errorf("%s was not done within %s: %w", name, o.timeout, ctx.Err()))
		}
	}
	clusterPID := cputime.ClusterPID(o.stateDir)
	cpuBefore := cputime.ByCommand(clusterPID)
	work := make(chan int)
	start := time.Now()
	var window profileWindow
	if o.profileSocket != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if window, err = profile(ctx, o); err != nil {
				fail(fmt.Errorf("profiling kruntimes-apiserver: %w", err))
			}
		}()
	}
	for w := 0; w < o.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("%s-%d", batch, i)
				terminal := tw.expect(name)
				samples[i].created = time.Now()
				_, err := runs.Create(ctx, newRun(o, mode, name, batch), metav1.CreateOptions{})
				if err != nil {
					fail(fmt.Errorf("creating %s: %w", name, err))
					continue
				}
				if o.burst {
					wg.Add(1)
					go func() {
						defer wg.Done()
						await(i, name, terminal)
					}()
				} else {
					await(i, name, terminal)
				}
			}
		}()
	}
feed:
	for i := 0; i < o.runs; i++ {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	report(o, mode, samples, time.Since(start))
	if clusterPID > 0 {
		fmt.Printf("cpu per Run: %s\n", cputime.PerOp(cpuBefore, cputime.ByCommand(clusterPID), len(samples)))
	}
	if o.profileSocket != "" {
		bound := 0
		for _, s := range samples {
			if t := s.final.Status.ScheduledTime; t != nil && !t.Time.Before(window.start) && t.Time.Before(window.end) {
				bound++
			}
		}
		fmt.Printf("CPU profile of kruntimes-apiserver in %s: %s for %s; %d Runs bound in that window\n",
			o.profileOut, window.start.Format("15:04:05.000"), window.end.Sub(window.start).Round(time.Millisecond), bound)
	}
	return nil
}

// profileWindow is when the CPU profile ran.
type profileWindow struct{ start, end time.Time }

// profile takes a CPU profile of kruntimes-apiserver through its debug
// socket, o.profileDelay from now, and writes it to o.profileOut.
func profile(ctx context.Context, o options) (profileWindow, error) {
	select {
	case <-time.After(o.profileDelay):
	case <-ctx.Done():
		return profileWindow{}, ctx.Err()
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", o.profileSocket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://kruntimes-apiserver/debug/pprof/profile?seconds=%d", o.profileSeconds), nil)
	if err != nil {
		return profileWindow{}, err
	}
	w := profileWindow{start: time.Now()}
	resp, err := client.Do(req)
	if err != nil {
		return w, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	w.end = time.Now()
	if err != nil {
		return w, err
	}
	if resp.StatusCode != http.StatusOK {
		return w, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return w, os.WriteFile(o.profileOut, body, 0o644)
}

func report(o options, mode lifecycle.Mode, samples []sample, elapsed time.Duration) {
	var scheduled, running, done, observed []time.Duration
	var first, last time.Time
	phases := map[lifecycle.Phase]int{}
	for _, s := range samples {
		r := s.final
		phases[r.Status.Phase]++
		if first.IsZero() || s.created.Before(first) {
			first = s.created
		}
		observed = append(observed, s.observed)
		if t := r.Status.ScheduledTime; t != nil {
			scheduled = append(scheduled, t.Sub(s.created))
		}
		if t := r.Status.StartTime; t != nil {
			running = append(running, t.Sub(s.created))
		}
		end := r.Status.CompletionTime
		if mode == lifecycle.ModeFunction && r.Status.Phase == lifecycle.Ready {
			end = r.Status.ReadyTime
		}
		if end != nil {
			done = append(done, end.Sub(s.created))
			if end.After(last) {
				last = end.Time
			}
		}
	}
	load := fmt.Sprintf("closed loop, %d in flight", o.concurrency)
	if o.burst {
		load = fmt.Sprintf("burst, %d creators", o.concurrency)
	}
	runtime, doneName := o.runtime, "terminal"
	if mode == lifecycle.ModeFunction {
		runtime, doneName = o.functionRuntime, "Ready"
	}
	fmt.Printf("mode=%s runs=%d %s runtime=%s phases=%v in %s\n", mode, o.runs, load, runtime, phases, elapsed.Round(time.Millisecond))
	fmt.Printf("%-22s %10s %10s %10s\n", "latency from create", "p50", "p95", "p99")
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{{"→ Scheduled", scheduled}, {"→ Running", running}, {"→ " + doneName, done}, {"→ " + doneName + " observed", observed}} {
		fmt.Printf("%-22s %10s %10s %10s\n", row.name, pct(row.d, 50), pct(row.d, 95), pct(row.d, 99))
	}
	if !last.IsZero() {
		fmt.Printf("throughput: %.1f Runs/s (first create to the last done)\n", float64(len(samples))/last.Sub(first).Seconds())
	}
}

func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(10 * time.Microsecond).String()
}
