// Command backlog measures what a burst of Runs that cannot be placed costs
// a healthy Runtime's functions in another namespace (issue 28): it creates
// --backlog task Runs in --backlog-namespace for a Runtime that does not
// exist, from --creators goroutines as fast as the server takes them, and
// meanwhile keeps one no-op Python function Run in flight for the healthy
// --runtime in --namespace: created, waited for until Ready, deleted, the
// next created --probe-gap later. It reports the functions' create→Ready
// latency (p50/p99/max, from the client's clock just before the create to
// the Run's microsecond status.readyTime) before the burst (--baseline
// probes), while the burst is arriving, and for --after once it stopped,
// and how many of the backlog's Runs say why they wait (the Scheduled
// condition's RuntimeNotFound) at the end.
//
//	make run    # in another shell, then:
//	bin/kubectl apply -f artifacts/examples/runtime-python.yaml
//	go run ./test/bench/backlog --kubeconfig .local/kubeconfig --backlog 20000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

type options struct {
	kubeconfig       string
	namespace        string
	runtime          string
	backlogNamespace string
	missingRuntime   string
	backlog          int
	creators         int
	baseline         int
	probeGap         time.Duration
	after            time.Duration
	probeTimeout     time.Duration
	keep             bool
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of the cluster to benchmark.")
	flag.StringVar(&o.namespace, "namespace", "default", "Namespace of the healthy Runtime and of the function Runs.")
	flag.StringVar(&o.runtime, "runtime", "python", "Healthy Python Runtime that registers the function Runs; it must exist and be Ready.")
	flag.StringVar(&o.backlogNamespace, "backlog-namespace", "backlog", "Namespace of the backlog (created when missing).")
	flag.StringVar(&o.missingRuntime, "missing-runtime", "missing", "Runtime the backlog's Runs name; it must not exist in --backlog-namespace.")
	flag.IntVar(&o.backlog, "backlog", 20000, "Runs in the burst.")
	flag.IntVar(&o.creators, "creators", 32, "Goroutines creating the burst.")
	flag.IntVar(&o.baseline, "baseline", 10, "Function Runs measured before the burst.")
	flag.DurationVar(&o.probeGap, "probe-gap", 250*time.Millisecond, "Pause between one function Run's deletion and the next one's creation.")
	flag.DurationVar(&o.after, "after", time.Minute, "How long to keep measuring once the burst stopped.")
	flag.DurationVar(&o.probeTimeout, "probe-timeout", 2*time.Minute, "Give up when a function Run is not Ready by then.")
	flag.BoolVar(&o.keep, "keep", false, "Keep the backlog's Runs afterwards instead of deleting them.")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "backlog:", err)
		os.Exit(1)
	}
}

// probe is one function Run's measurement.
type probe struct {
	phase    string // baseline, during, after
	created  time.Time
	ready    time.Duration // create → status.readyTime
	observed time.Duration // create → the client saw it Ready
}

// readyWatch tells the prober when a function Run is Ready.
type readyWatch struct {
	mu      sync.Mutex
	waiters map[string]chan *v1alpha1.Run
}

func (w *readyWatch) observe(obj any) {
	r, ok := obj.(*v1alpha1.Run)
	if !ok || (r.Status.Phase != lifecycle.Ready && !lifecycle.IsTerminal(r.Status.Phase)) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.waiters[r.Name]; ok {
		ch <- r
		delete(w.waiters, r.Name)
	}
}

func (w *readyWatch) expect(name string) <-chan *v1alpha1.Run {
	ch := make(chan *v1alpha1.Run, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiters[name] = ch
	return ch
}

func run(ctx context.Context, o options) error {
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	config.QPS, config.Burst = 5000, 5000
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	if _, err := client.KruntimesV1alpha1().Runtimes(o.backlogNamespace).Get(ctx, o.missingRuntime, metav1.GetOptions{}); err == nil {
		return fmt.Errorf("runtime %s/%s exists; the backlog must name a missing one", o.backlogNamespace, o.missingRuntime)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.backlogNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	batch := fmt.Sprintf("backlog-%d", time.Now().UnixNano()%1_000_000)
	selector := metav1.ListOptions{LabelSelector: "kruntimes.io/bench=" + batch}
	backlogRuns := client.KruntimesV1alpha1().Runs(o.backlogNamespace)
	functions := client.KruntimesV1alpha1().Runs(o.namespace)
	if !o.keep {
		defer func() {
			start := time.Now()
			if err := deleteAll(backlogRuns, selector); err != nil {
				fmt.Fprintln(os.Stderr, "backlog: deleting the backlog:", err)
				return
			}
			fmt.Printf("deleted the backlog in %s\n", time.Since(start).Round(time.Millisecond))
		}()
	}
	defer func() { _ = functions.DeleteCollection(context.Background(), metav1.DeleteOptions{}, selector) }()

	// One informer over the function Runs of this batch only: the
	// backlog's Runs are not watched, so the benchmark does not decode
	// 20,000 objects and their status writes.
	rw := &readyWatch{waiters: map[string]chan *v1alpha1.Run{}}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0,
		externalversions.WithNamespace(o.namespace),
		externalversions.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector.LabelSelector }))
	informer := factory.Kruntimes().V1alpha1().Runs().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    rw.observe,
		UpdateFunc: func(_, obj any) { rw.observe(obj) },
	}); err != nil {
		return err
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() {
		close(stop)
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("watching the function Runs: %w", ctx.Err())
	}

	var (
		phase   atomic.Value // of the probes being created
		probes  []probe
		probeNo int
	)
	measure := func() error {
		probeNo++
		name := fmt.Sprintf("%s-fn-%d", batch, probeNo)
		ready := rw.expect(name)
		p := probe{phase: phase.Load().(string), created: time.Now()}
		if _, err := functions.Create(ctx, functionRun(o, name, batch), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
		select {
		case r := <-ready:
			p.observed = time.Since(p.created)
			if r.Status.Phase != lifecycle.Ready || r.Status.ReadyTime == nil {
				return fmt.Errorf("%s ended %s, not Ready: %s", name, r.Status.Phase, r.Status.Message)
			}
			p.ready = r.Status.ReadyTime.Sub(p.created)
		case <-time.After(o.probeTimeout):
			return fmt.Errorf("%s was not Ready within %s", name, o.probeTimeout)
		}
		probes = append(probes, p)
		if err := functions.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("deleting %s: %w", name, err)
		}
		time.Sleep(o.probeGap)
		return nil
	}

	phase.Store("baseline")
	for range o.baseline {
		if err := measure(); err != nil {
			return err
		}
	}

	// The burst, while the prober keeps measuring.
	phase.Store("during")
	var (
		created   atomic.Int64
		createErr atomic.Value
		burstDone = make(chan struct{})
		burstTook time.Duration
		wg        sync.WaitGroup
	)
	next := make(chan int)
	burstStart := time.Now()
	for range o.creators {
		wg.Go(func() {
			for i := range next {
				r := taskRun(o, fmt.Sprintf("%s-%05d", batch, i), batch)
				if _, err := backlogRuns.Create(ctx, r, metav1.CreateOptions{}); err != nil {
					createErr.CompareAndSwap(nil, err)
					continue
				}
				created.Add(1)
			}
		})
	}
	go func() {
		for i := range o.backlog {
			next <- i
		}
		close(next)
		wg.Wait()
		burstTook = time.Since(burstStart)
		close(burstDone)
	}()
during:
	for {
		select {
		case <-burstDone:
			break during
		default:
		}
		if err := measure(); err != nil {
			return err
		}
	}
	if err, _ := createErr.Load().(error); err != nil {
		return fmt.Errorf("creating the backlog: %w", err)
	}
	fmt.Printf("burst: %d Runs for missing Runtime %s/%s created in %s (%.0f/s, %d creators)\n",
		created.Load(), o.backlogNamespace, o.missingRuntime, burstTook.Round(time.Millisecond),
		float64(created.Load())/burstTook.Seconds(), o.creators)

	phase.Store("after")
	afterStart := time.Now()
	for time.Since(afterStart) < o.after {
		if err := measure(); err != nil {
			return err
		}
	}

	noted, total, err := countNoted(ctx, backlogRuns, selector)
	if err != nil {
		return err
	}
	fmt.Printf("backlog: %d of %d Runs noted %s, %s after the burst stopped\n",
		noted, total, lifecycle.ReasonRuntimeNotFound, time.Since(afterStart).Round(time.Second))
	report(probes, burstStart)
	return nil
}

// deleteAll deletes the Runs of selector; one request may end at the
// server's timeout with thousands left, so it asks again until none is.
func deleteAll(runs interface {
	DeleteCollection(context.Context, metav1.DeleteOptions, metav1.ListOptions) error
	List(context.Context, metav1.ListOptions) (*v1alpha1.RunList, error)
}, selector metav1.ListOptions) error {
	for attempt := 0; ; attempt++ {
		err := runs.DeleteCollection(context.Background(), metav1.DeleteOptions{}, selector)
		if err == nil {
			opts := selector
			opts.Limit = 1
			list, lerr := runs.List(context.Background(), opts)
			if lerr == nil && len(list.Items) == 0 {
				return nil
			}
			err = lerr
		}
		if attempt == 20 {
			return err
		}
	}
}

// countNoted lists the backlog page by page and counts the Runs whose
// Scheduled condition says RuntimeNotFound.
func countNoted(ctx context.Context, runs interface {
	List(context.Context, metav1.ListOptions) (*v1alpha1.RunList, error)
}, selector metav1.ListOptions) (noted, total int, err error) {
	opts := selector
	opts.Limit = 2000
	for {
		list, err := runs.List(ctx, opts)
		if err != nil {
			return 0, 0, err
		}
		for i := range list.Items {
			total++
			if c := apimeta.FindStatusCondition(list.Items[i].Status.Conditions, lifecycle.ConditionScheduled); c != nil && c.Reason == lifecycle.ReasonRuntimeNotFound {
				noted++
			}
		}
		if list.Continue == "" {
			return noted, total, nil
		}
		opts.Continue = list.Continue
	}
}

func report(probes []probe, burstStart time.Time) {
	fmt.Printf("%-9s %6s %12s %12s %12s %12s   %s\n", "functions", "n", "ready p50", "ready p99", "ready max", "observed p50", "(create→Ready)")
	for _, phase := range []string{"baseline", "during", "after"} {
		var ready, observed []time.Duration
		for _, p := range probes {
			if p.phase == phase {
				ready = append(ready, p.ready)
				observed = append(observed, p.observed)
			}
		}
		fmt.Printf("%-9s %6d %12s %12s %12s %12s\n", phase, len(ready), pct(ready, 50), pct(ready, 99), pct(ready, 100), pct(observed, 50))
	}
	fmt.Println("each function Run: seconds since the burst started, create→Ready")
	for _, p := range probes {
		if p.phase != "baseline" {
			fmt.Printf("  %s %7.1f s  %s\n", p.phase, p.created.Sub(burstStart).Seconds(), p.ready.Round(100*time.Microsecond))
		}
	}
}

// taskRun is one Run of the backlog.
func taskRun(o options, name, batch string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kruntimes.io/bench": batch}},
		Spec: v1alpha1.RunSpec{
			Runtime: o.missingRuntime,
			Source:  v1alpha1.RunSource{Inline: "true"},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
		},
	}
}

// functionRun is a no-op Python function for the healthy Runtime.
func functionRun(o options, name, batch string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kruntimes.io/bench": batch}},
		Spec: v1alpha1.RunSpec{
			Runtime: o.runtime,
			Source:  v1alpha1.RunSource{Inline: "def handle(event, context):\n    return None\n", InlinePath: "handler.py"},
			Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "handler.handle"}},
		},
	}
}

func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(100 * time.Microsecond).String()
}
