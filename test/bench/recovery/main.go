// Command recovery benchmarks how long a Ready function takes to be Ready
// again on another Pod after its Runtime Pod is lost, against a cluster
// running kruntimes. Each trial creates a no-op Python function, waits until
// it is Ready, loses its Pod, and times, from the loss:
//
//   - detect: the client sees the Run Ready=False reason OwnerLost;
//   - fenced: the client sees it back in Pending at the next attempt (the
//     fence held and recovery requeued it);
//   - rescheduled: status.scheduledTime of the new assignment;
//   - registered: status.readyTime on the new Pod, when it can be invoked;
//   - observed: the client sees it Ready again.
//
// --loss deleted force-deletes the Pod (kubectl delete pod --grace-period=0
// --force: gone at once, an unplanned loss; a graceful deletion is a planned
// disruption, whose runtimed relocates its functions at the same attempt,
// measured by the e2e TestRuntimeRolloutRelocatesFunctions). --loss heartbeat
// freezes the Pod's runtimed with SIGSTOP, so it runs on the machine that
// runs the local cluster's node agent (make run): recovery deletes the Pod
// once its heartbeat is stale past the grace period, and the times are
// also given from the moment that period ended (the Lease's last renewal +
// its duration + --grace, which must match the cluster's
// --recovery-heartbeat-grace-period).
//
// The Runtime (--runtime, Python) must have at least two Ready Pods, so a
// Run always has another Pod to go to; each trial waits for the Deployment
// to replace the lost Pod first.
//
//	go run ./test/bench/recovery --kubeconfig .local/kubeconfig --runtime python --trials 20
//	go run ./test/bench/recovery --kubeconfig .local/kubeconfig --runtime python --trials 5 --loss heartbeat --grace 40s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

type options struct {
	kubeconfig string
	namespace  string
	runtime    string
	loss       string
	grace      time.Duration
	trials     int
	timeout    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of the cluster to benchmark.")
	flag.StringVar(&o.namespace, "namespace", "default", "Namespace of the Runtime and the Runs.")
	flag.StringVar(&o.runtime, "runtime", "python", "Python Runtime with at least two Ready Pods.")
	flag.StringVar(&o.loss, "loss", "deleted", "How the Pod is lost: deleted (the Pod is deleted) or heartbeat (its runtimed is frozen; local cluster only).")
	flag.DurationVar(&o.grace, "grace", 40*time.Second, "The cluster's --recovery-heartbeat-grace-period, for --loss heartbeat.")
	flag.IntVar(&o.trials, "trials", 20, "Number of trials.")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "Give up on a trial after this long.")
	flag.Parse()
	if o.loss != "deleted" && o.loss != "heartbeat" {
		fmt.Fprintf(os.Stderr, "recovery: --loss must be deleted or heartbeat, got %q\n", o.loss)
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "recovery:", err)
		os.Exit(1)
	}
}

const noopFunction = "def handle(event, context):\n    return None\n"

// runWatch keeps every version of the benchmark's Runs the client saw, with
// the time it saw each.
type runWatch struct {
	mu   sync.Mutex
	seen map[string][]seenRun
}

type seenRun struct {
	at  time.Time
	run *v1alpha1.Run
}

func (w *runWatch) observe(obj any) {
	if r, ok := obj.(*v1alpha1.Run); ok {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seen[r.Name] = append(w.seen[r.Name], seenRun{at: time.Now(), run: r})
	}
}

// first returns the first version of Run name that done accepts.
func (w *runWatch) first(name string, done func(*v1alpha1.Run) bool) (seenRun, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen[name] {
		if done(s.run) {
			return s, true
		}
	}
	return seenRun{}, false
}

// await waits until the client saw a version of Run name that done accepts.
func (w *runWatch) await(ctx context.Context, name, what string, done func(*v1alpha1.Run) bool) (seenRun, error) {
	var found seenRun
	err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		var ok bool
		found, ok = w.first(name, done)
		return ok, nil
	})
	if err != nil {
		return seenRun{}, fmt.Errorf("Run %s: waiting for %s: %w", name, what, err)
	}
	return found, nil
}

// trial is the timeline of one trial, each time from the loss.
type trial struct {
	detect, fenced, rescheduled, registered, observed time.Duration
	// graceEnd is when the grace period ended, from the loss (heartbeat).
	graceEnd time.Duration
}

func run(ctx context.Context, o options) error {
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	config.QPS, config.Burst = 100, 200
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
	batch := fmt.Sprintf("recovery-%d", time.Now().UnixNano()%1_000_000)
	runs := client.KruntimesV1alpha1().Runs(o.namespace)
	selector := metav1.ListOptions{LabelSelector: "kruntimes.io/bench=" + batch}
	defer func() { _ = runs.DeleteCollection(context.Background(), metav1.DeleteOptions{}, selector) }()

	w := &runWatch{seen: map[string][]seenRun{}}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithNamespace(o.namespace),
		externalversions.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector.LabelSelector }))
	informer := factory.Kruntimes().V1alpha1().Runs().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	}); err != nil {
		return err
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() { close(stop); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return errors.New("the Run informer did not sync")
	}

	var trials []trial
	for i := range o.trials {
		tr, err := oneTrial(ctx, o, kube, client, w, fmt.Sprintf("%s-%d", batch, i), batch)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i, err)
		}
		fmt.Printf("trial %2d: detect %s, fenced %s, rescheduled %s, registered %s, observed %s\n",
			i, ms(tr.detect), ms(tr.fenced), ms(tr.rescheduled), ms(tr.registered), ms(tr.observed))
		trials = append(trials, tr)
	}
	report(o, trials)
	return nil
}

func oneTrial(ctx context.Context, o options, kube kubernetes.Interface, client versioned.Interface, w *runWatch, name, batch string) (trial, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := twoReadyPods(ctx, kube, o); err != nil {
		return trial{}, err
	}
	runs := client.KruntimesV1alpha1().Runs(o.namespace)
	_, err := runs.Create(ctx, &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kruntimes.io/bench": batch}},
		Spec: v1alpha1.RunSpec{
			Runtime:     o.runtime,
			Source:      v1alpha1.RunSource{Inline: noopFunction, InlinePath: "handler.py"},
			Mode:        v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "handler.handle"}},
			RetryPolicy: &v1alpha1.RetryPolicy{MaxAttempts: 2},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return trial{}, err
	}
	first, err := w.await(ctx, name, "Ready", readyAt(1))
	if err != nil {
		return trial{}, err
	}
	pod := first.run.Status.AssignedPod
	podUID := first.run.Status.AssignedPodUID

	var tr trial
	var lost time.Time
	switch o.loss {
	case "deleted":
		lost = time.Now()
		if err := kube.CoreV1().Pods(o.namespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &podUID}}); err != nil {
			return trial{}, err
		}
	case "heartbeat":
		pid, err := runtimedPID(string(podUID))
		if err != nil {
			return trial{}, err
		}
		lost = time.Now()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return trial{}, err
		}
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		lease, err := kube.CoordinationV1().Leases(o.namespace).Get(ctx, runtimepod.LeaseName(pod), metav1.GetOptions{})
		if err != nil {
			return trial{}, err
		}
		tr.graceEnd = lease.Spec.RenewTime.Add(runtimepod.HeartbeatLeaseDuration + o.grace).Sub(lost)
	}

	detect, err := w.await(ctx, name, "Ready=False/OwnerLost", func(r *v1alpha1.Run) bool {
		c := apimeta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionReady)
		return r.Status.AssignedPodUID == podUID && c != nil && c.Reason == lifecycle.ReasonOwnerLost
	})
	if err != nil {
		return trial{}, err
	}
	fenced, err := w.await(ctx, name, "Pending at attempt 2", func(r *v1alpha1.Run) bool {
		return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2
	})
	if err != nil {
		return trial{}, err
	}
	again, err := w.await(ctx, name, "Ready at attempt 2", readyAt(2))
	if err != nil {
		return trial{}, err
	}
	if again.run.Status.AssignedPodUID == podUID {
		return trial{}, fmt.Errorf("Run %s is Ready again on the lost Pod %s", name, pod)
	}
	tr.detect = detect.at.Sub(lost)
	tr.fenced = fenced.at.Sub(lost)
	tr.rescheduled = again.run.Status.ScheduledTime.Sub(lost)
	tr.registered = again.run.Status.ReadyTime.Sub(lost)
	tr.observed = again.at.Sub(lost)
	// Free its slot for the next trial.
	return tr, runs.Delete(ctx, name, metav1.DeleteOptions{})
}

func readyAt(attempt int32) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Ready && r.Status.Attempt == attempt }
}

// twoReadyPods waits until the Runtime has at least two Ready Pods that are
// not deleting.
func twoReadyPods(ctx context.Context, kube kubernetes.Interface, o options) error {
	var n int
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Pods(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: lifecycle.LabelRuntime + "=" + o.runtime})
		if err != nil {
			return false, nil
		}
		n = 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				n++
			}
		}
		return n >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("Runtime %s has %d Ready Pods, the benchmark needs 2 (spec.replicas: 2): %w", o.runtime, n, err)
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runtimedPID finds the runtimed of the Pod with UID podUID among this
// machine's processes: the local node agent runs it with POD_UID set.
func runtimedPID(podUID string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(exe) != "runtimed" {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && slices.Contains(strings.Split(string(environ), "\x00"), runtimepod.EnvPodUID+"="+podUID) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no runtimed of Pod UID %s runs on this machine; --loss heartbeat needs the local cluster", podUID)
}

func report(o options, trials []trial) {
	column := func(get func(trial) time.Duration) []time.Duration {
		var d []time.Duration
		for _, t := range trials {
			d = append(d, get(t))
		}
		return d
	}
	fmt.Printf("\nloss=%s runtime=%s trials=%d\n", o.loss, o.runtime, len(trials))
	fmt.Printf("%-34s %10s %10s\n", "from the loss", "p50", "p99")
	rows := []struct {
		name string
		get  func(trial) time.Duration
	}{
		{"→ detect (Ready=False/OwnerLost)", func(t trial) time.Duration { return t.detect }},
		{"→ fenced (Pending, attempt 2)", func(t trial) time.Duration { return t.fenced }},
		{"→ rescheduled (scheduledTime)", func(t trial) time.Duration { return t.rescheduled }},
		{"→ registered (readyTime)", func(t trial) time.Duration { return t.registered }},
		{"→ observed Ready", func(t trial) time.Duration { return t.observed }},
	}
	for _, r := range rows {
		d := column(r.get)
		fmt.Printf("%-34s %10s %10s\n", r.name, pct(d, 50), pct(d, 99))
	}
	if o.loss == "heartbeat" {
		fmt.Printf("%-34s %10s %10s\n", "from the end of the grace period", "", "")
		for _, r := range rows {
			d := column(func(t trial) time.Duration { return r.get(t) - t.graceEnd })
			fmt.Printf("%-34s %10s %10s\n", r.name, pct(d, 50), pct(d, 99))
		}
	}
}

func ms(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }

func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return ms(s[(len(s)-1)*p/100])
}
