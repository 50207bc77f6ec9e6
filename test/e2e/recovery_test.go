package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/client/tombstone"
	"kruntimes.io/kruntimes/controllers/recovery"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// ownershipWatch watches the Runs and Pods of a namespace for a whole test
// and holds recovery to what it promises whatever happens: a Run's attempt
// never decreases, and no Run is Ready=True while assigned to a Pod that is
// gone or deleting — not on an event seen after the Pod was, not again once
// recovery marked the assignment OwnerLost, and not at the end.
type ownershipWatch struct {
	t  *testing.T
	mu sync.Mutex
	// lostPods says, by UID, how the watch saw each Pod go.
	lostPods map[types.UID]string
	// podDeletions holds when each deleting Pod's deletion was asked for:
	// its deletionTimestamp (when it is killed, at second precision) less
	// its deletionGracePeriodSeconds.
	podDeletions map[types.UID]time.Time
	attempts     map[types.UID]int32
	// marked holds <run UID>/<attempt>/<pod UID> of claimed assignments
	// seen Ready=False reason OwnerLost. (A Run the scheduler just bound
	// still carries the OwnerLost of the attempt it replaced until its new
	// runtimed claims it; that one is not a mark of the new assignment.)
	marked map[string]bool
	// latest is the last version of each Run, by UID.
	latest map[types.UID]*v1alpha1.Run
	// history is every version of each Run seen, by name.
	history    map[string][]*v1alpha1.Run
	violations []string
}

// watchOwnership starts an ownershipWatch of ns and checks it when the test
// ends.
func watchOwnership(ctx context.Context, t *testing.T, f *framework.Framework, runs versioned.Interface, ns string) *ownershipWatch {
	t.Helper()
	w := &ownershipWatch{
		t: t, lostPods: map[types.UID]string{}, podDeletions: map[types.UID]time.Time{}, attempts: map[types.UID]int32{},
		marked: map[string]bool{}, latest: map[types.UID]*v1alpha1.Run{}, history: map[string][]*v1alpha1.Run{},
	}
	podInformers := kubeinformers.NewSharedInformerFactoryWithOptions(f.Client, 0, kubeinformers.WithNamespace(ns))
	runInformers := externalversions.NewSharedInformerFactoryWithOptions(runs, 0, externalversions.WithNamespace(ns))
	_, err := podInformers.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil {
				w.podLost(pod, "deleting since "+pod.DeletionTimestamp.UTC().Format(time.RFC3339))
			}
		},
		DeleteFunc: func(obj any) {
			if pod, ok := tombstone.As[*corev1.Pod](obj); ok {
				w.podLost(pod, "gone")
			}
		},
	})
	require.NoError(t, err)
	_, err = runInformers.Kruntimes().V1alpha1().Runs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj.(*v1alpha1.Run)) },
		UpdateFunc: func(_, obj any) { w.observe(obj.(*v1alpha1.Run)) },
		DeleteFunc: func(obj any) {
			if run, ok := tombstone.As[*v1alpha1.Run](obj); ok {
				w.mu.Lock()
				delete(w.latest, run.UID)
				w.mu.Unlock()
			}
		},
	})
	require.NoError(t, err)
	stop := make(chan struct{})
	startInformers(t, stop, podInformers, runInformers)
	t.Cleanup(func() {
		w.check()
		close(stop)
		podInformers.Shutdown()
		runInformers.Shutdown()
	})
	return w
}

func (w *ownershipWatch) podLost(pod *corev1.Pod, how string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.lostPods[pod.UID]; !seen || how == "gone" {
		w.lostPods[pod.UID] = fmt.Sprintf("Pod %s %s", pod.Name, how)
	}
	if pod.DeletionTimestamp != nil {
		asked := pod.DeletionTimestamp.Time
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			asked = asked.Add(-time.Duration(*g) * time.Second)
		}
		w.podDeletions[pod.UID] = asked
	}
}

func assignment(run *v1alpha1.Run) string {
	return fmt.Sprintf("%s/%d/%s", run.UID, run.Status.Attempt, run.Status.AssignedPodUID)
}

func (w *ownershipWatch) observe(run *v1alpha1.Run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.attempts[run.UID]; ok && run.Status.Attempt < prev {
		w.violations = append(w.violations, fmt.Sprintf("Run %s: attempt went from %d down to %d", run.Name, prev, run.Status.Attempt))
	}
	w.attempts[run.UID] = max(w.attempts[run.UID], run.Status.Attempt)
	if ready := runReady(run); ready != nil && run.Status.AssignedPodUID != "" {
		switch {
		case ready.Status == metav1.ConditionFalse && ready.Reason == lifecycle.ReasonOwnerLost:
			if run.Status.Phase == lifecycle.Running || run.Status.Phase == lifecycle.Ready {
				w.marked[assignment(run)] = true
			}
		case ready.Status == metav1.ConditionTrue && w.marked[assignment(run)]:
			w.violations = append(w.violations, fmt.Sprintf("Run %s: Ready=True again at attempt %d on Pod %s after recovery marked it OwnerLost",
				run.Name, run.Status.Attempt, run.Status.AssignedPod))
		case ready.Status == metav1.ConditionTrue && w.lostPods[run.Status.AssignedPodUID] != "":
			w.violations = append(w.violations, fmt.Sprintf("Run %s: Ready=True at attempt %d while assigned to %s",
				run.Name, run.Status.Attempt, w.lostPods[run.Status.AssignedPodUID]))
		}
	}
	w.latest[run.UID] = run
	w.history[run.Name] = append(w.history[run.Name], run)
}

// check reports every violation seen, and any Run left Ready=True on a Pod
// that is gone or deleting.
func (w *ownershipWatch) check() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, run := range w.latest {
		if ready := runReady(run); ready != nil && ready.Status == metav1.ConditionTrue && w.lostPods[run.Status.AssignedPodUID] != "" {
			w.violations = append(w.violations, fmt.Sprintf("Run %s: left Ready=True while assigned to %s", run.Name, w.lostPods[run.Status.AssignedPodUID]))
		}
	}
	for _, v := range w.violations {
		w.t.Errorf("ownership: %s", v)
	}
}

// versions returns every version of Run name the watch has seen.
func (w *ownershipWatch) versions(name string) []*v1alpha1.Run {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*v1alpha1.Run(nil), w.history[name]...)
}

// waitFor waits until the watch has seen a version of Run name that done
// accepts, and returns it: unlike polling, it sees states that last a moment.
func (w *ownershipWatch) waitFor(ctx context.Context, name, what string, timeout time.Duration, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	w.t.Helper()
	var found *v1alpha1.Run
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, run := range w.versions(name) {
			if done(run) {
				found = run
				return true, nil
			}
		}
		return false, nil
	})
	var last any
	if versions := w.versions(name); len(versions) > 0 {
		last = versions[len(versions)-1].Status
	}
	require.NoError(w.t, err, "waiting for Run %s: %s; last status %+v", name, what, last)
	return found
}

// deletionOf returns when the deletion of the Pod of uid was asked for, to
// the second (rounded down), as the watch saw it.
func (w *ownershipWatch) deletionOf(uid types.UID) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.podDeletions[uid]
	return t, ok
}

// firstIndex returns the index of the first version done accepts, or -1.
func firstIndex(versions []*v1alpha1.Run, done func(*v1alpha1.Run) bool) int {
	for i, r := range versions {
		if done(r) {
			return i
		}
	}
	return -1
}

func markedOwnerLostOn(uid types.UID) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool {
		c := runReady(r)
		return r.Status.AssignedPodUID == uid && (r.Status.Phase == lifecycle.Running || r.Status.Phase == lifecycle.Ready) &&
			c != nil && c.Status == metav1.ConditionFalse && c.Reason == lifecycle.ReasonOwnerLost
	}
}

func assignedElsewhere(uid types.UID) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool { return r.Status.AssignedPodUID != "" && r.Status.AssignedPodUID != uid }
}

// readyPods waits until runtime has n Pods, all Ready and none deleting (a
// replaced Pod gone, its replacement up), and returns them.
func readyPods(ctx context.Context, t *testing.T, f *framework.Framework, ns, runtime string, n int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, framework.PollInterval, framework.PodTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lifecycle.LabelRuntime + "=" + runtime})
		if err != nil {
			return false, nil
		}
		ready = ready[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podIsReady(&p) {
				ready = append(ready, p)
			}
		}
		return len(ready) == n && len(list.Items) == n, nil
	})
	require.NoError(t, err, "%d Ready Pods of Runtime %s, and no other", n, runtime)
	return ready
}

func podWithUID(t *testing.T, pods []corev1.Pod, uid types.UID) *corev1.Pod {
	t.Helper()
	for i := range pods {
		if pods[i].UID == uid {
			return &pods[i]
		}
	}
	require.FailNow(t, "no such Pod", "uid %s among %d Pods", uid, len(pods))
	return nil
}

// freeze stops the runtimed of pod with SIGSTOP until the test ends (or
// the Pod goes with it): it renews no heartbeat and writes nothing.
func freeze(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pid := runtimedPID(t, string(pod.UID))
	require.NotZero(t, pid, "runtimed of Pod %s runs on this machine", pod.Name)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() {
		if runtimedPID(t, string(pod.UID)) == pid {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

func deletePod(ctx context.Context, t *testing.T, f *framework.Framework, pod *corev1.Pod) {
	t.Helper()
	uid := pod.UID
	require.NoError(t, f.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}))
}

func waitPodGone(ctx context.Context, t *testing.T, f *framework.Framework, pod *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, framework.PollInterval, framework.PodTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID), nil
	})
	require.NoError(t, err, "Pod %s is gone", pod.Name)
}

// waitForEvents waits until Run name has Events with every one of reasons.
func waitForEvents(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string, reasons ...string) {
	t.Helper()
	// Events are written by each component's Event sink after the status
	// write they follow, behind the sink's own client-side rate limit.
	err := framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		list, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
		})
		if seen.Err(err) {
			return false, nil
		}
		var got []string
		for _, e := range list.Items {
			got = append(got, e.Reason)
		}
		seen.State("Events %v", got)
		for _, r := range reasons {
			if !slices.Contains(got, r) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Logf("kruntimes-apiserver's log lines about Events and the controllers' Lease:\n%s", eventAndLeaseLines(f))
	}
	require.NoError(t, err, "Events of Run %s: want %v", name, reasons)
}

// eventAndLeaseLines returns the lines of the kruntimes-apiserver replicas'
// logs that tell why an Event may be missing: the sink's write errors and
// the controllers losing their Lease (which shuts their Event sink down).
func eventAndLeaseLines(f *framework.Framework) string {
	var lines []string
	for _, path := range f.Cluster.KruntimesReplicaLogs() {
		data, err := os.ReadFile(path)
		if err != nil {
			lines = append(lines, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "event") || strings.Contains(line, "Lease") {
				lines = append(lines, line)
			}
		}
	}
	if len(lines) > 200 {
		lines = lines[len(lines)-200:]
	}
	return strings.Join(lines, "\n")
}

// onceThenDone is a task that records each execution in dir/starts and
// runs until its Pod goes on its first execution, and finishes on the next.
func onceThenDone(dir string) string {
	return fmt.Sprintf("echo $$ >> %[1]s/starts\nif [ \"$(wc -l < %[1]s/starts)\" -lt 2 ]; then sleep 600; fi\necho done\n", dir)
}

func executions(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "starts"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(data), "\n")
}

// TestRecoveryOfTasks: task Runs on Runtime Pods that are deleted, with the
// hosted controllers and real runtimed.
func TestRecoveryOfTasks(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "recovery-tasks")
	ctx := framework.Context(t, 10*time.Minute)
	w := watchOwnership(ctx, t, f, runs, ns)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("bash", 2, 1), metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("a Running task whose Pod is deleted runs again on another Pod at attempt 2 and succeeds", func(t *testing.T) {
		readyPods(ctx, t, f, ns, "bash", 2)
		dir := t.TempDir()
		run := taskRun("rerun", onceThenDone(dir))
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2}
		createRun(ctx, t, runs, ns, run)
		running := waitForRun(ctx, t, runs, ns, "rerun", functionTimeout, "Running", inPhase(lifecycle.Running))
		require.NoError(t, wait.PollUntilContextTimeout(ctx, framework.PollInterval, framework.ShortTimeout, true, func(context.Context) (bool, error) {
			return executions(t, dir) == 1, nil
		}), "the first attempt executes")
		lost := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: running.Status.AssignedPod, UID: running.Status.AssignedPodUID}}
		deletePod(ctx, t, f, lost)

		done := waitForRun(ctx, t, runs, ns, "rerun", functionTimeout, "Succeeded", inPhase(lifecycle.Succeeded))
		assert.Equal(t, int32(2), done.Status.Attempt)
		assert.NotEqual(t, lost.UID, done.Status.AssignedPodUID, "the retry ran on another Pod")
		assert.Equal(t, 2, executions(t, dir), "the lost attempt had started, and the task ran again: at least once")
		requeued := w.waitFor(ctx, "rerun", "back to Pending at attempt 2", framework.ShortTimeout, func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2
		})
		sched := scheduledCondition(requeued)
		require.NotNil(t, sched)
		assert.Equal(t, lifecycle.ReasonOwnerLost, sched.Reason)
		assert.Contains(t, sched.Message, "fence: Pod "+lost.Name)
		waitForEvents(ctx, t, f, ns, "rerun", recovery.EventOwnerLost, recovery.EventRecovered)
	})

	t.Run("with maxAttempts 1 it fails with OwnerLost", func(t *testing.T) {
		readyPods(ctx, t, f, ns, "bash", 2)
		createRun(ctx, t, runs, ns, taskRun("once", "sleep 600"))
		running := waitForRun(ctx, t, runs, ns, "once", functionTimeout, "Running", inPhase(lifecycle.Running))
		deletePod(ctx, t, f, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: running.Status.AssignedPod, UID: running.Status.AssignedPodUID}})

		failed := waitForRun(ctx, t, runs, ns, "once", functionTimeout, "Failed", inPhase(lifecycle.Failed))
		assert.Equal(t, int32(1), failed.Status.Attempt)
		completed := apimeta.FindStatusCondition(failed.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, metav1.ConditionTrue, completed.Status)
		assert.Equal(t, lifecycle.ReasonOwnerLost, completed.Reason)
		require.NotNil(t, failed.Status.CompletionTime)
		assert.Contains(t, failed.Status.Message, "fence: Pod "+running.Status.AssignedPod)
		waitForEvents(ctx, t, f, ns, "once", recovery.EventOwnerLost, recovery.EventRecoveryFailed)
	})

	t.Run("a Scheduled Run whose Pod is deleted before runtimed claimed it is placed elsewhere", func(t *testing.T) {
		_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("single", 1, 1), metav1.CreateOptions{})
		require.NoError(t, err)
		pod := &readyPods(ctx, t, f, ns, "single", 1)[0]
		freeze(t, pod)
		createRun(ctx, t, runs, ns, newTaskRun("unclaimed", "single"))
		scheduled := w.waitFor(ctx, "unclaimed", "Scheduled", framework.ShortTimeout, inPhase(lifecycle.Scheduled))
		require.Equal(t, pod.UID, scheduled.Status.AssignedPodUID, "bound to the only Pod, whose runtimed cannot claim it")
		deletePod(ctx, t, f, pod)

		pending := w.waitFor(ctx, "unclaimed", "back to Pending", framework.ShortTimeout, inPhase(lifecycle.Pending))
		assert.Equal(t, int32(1), pending.Status.Attempt, "an attempt that never started is not spent")
		done := waitForRun(ctx, t, runs, ns, "unclaimed", functionTimeout, "Succeeded on the new Pod", inPhase(lifecycle.Succeeded))
		assert.Equal(t, int32(1), done.Status.Attempt)
		assert.NotEqual(t, pod.UID, done.Status.AssignedPodUID)
	})
}

// TestRecoveryOfFunctions: function Runs whose Runtime Pod is deleted or
// whose runtimed is frozen, with the hosted controllers, real runtimed and
// the Python Runtime Server, asked over its socket what it holds.
func TestRecoveryOfFunctions(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "recovery-functions")
	ctx := framework.Context(t, 10*time.Minute)
	w := watchOwnership(ctx, t, f, runs, ns)
	rt := functionRuntime("python", "python", 2)
	rt.Spec.Replicas = ptr.To[int32](2)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, rt, metav1.CreateOptions{})
	require.NoError(t, err)
	const source = "def handle(event, context):\n    return 'ok'\n"
	function := func(name string) *v1alpha1.Run {
		run := functionRun(name, "python", "handler.py", source, "handler.handle")
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2}
		return run
	}

	t.Run("a Ready function whose Pod is deleted gracefully is given back (Relocating) before it moves, Ready at attempt 1 elsewhere, and registered only there", func(t *testing.T) {
		pods := readyPods(ctx, t, f, ns, "python", 2)
		created := createRun(ctx, t, runs, ns, function("moved"))
		ready := waitForRun(ctx, t, runs, ns, "moved", functionTimeout, "Ready", readyAtAttempt(1))
		lost := podWithUID(t, pods, ready.Status.AssignedPodUID)
		lostHost := hostFor(t, lost)
		require.NotNil(t, lostHost.registration(ctx, t, created.UID))
		deletePod(ctx, t, f, lost)

		again := waitForRun(ctx, t, runs, ns, "moved", functionTimeout, "Ready at attempt 1 on another Pod", func(r *v1alpha1.Run) bool {
			return readyAtAttempt(1)(r) && r.Status.AssignedPodUID != lost.UID
		})
		versions := w.versions("moved")
		relocated := firstIndex(versions, func(r *v1alpha1.Run) bool {
			c := runReady(r)
			return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 1 && c != nil && c.Reason == lifecycle.ReasonRelocating
		})
		moved := firstIndex(versions, assignedElsewhere(lost.UID))
		require.NotEqual(t, -1, relocated, "Pending at attempt 1 with Ready reason Relocating was seen")
		assert.Less(t, relocated, moved, "given back by the old Pod before it is assigned elsewhere")
		assert.Equal(t, -1, firstIndex(versions, markedOwnerLostOn(lost.UID)), "a planned disruption is no OwnerLost")

		newPod, err := f.Client.CoreV1().Pods(ns).Get(ctx, again.Status.AssignedPod, metav1.GetOptions{})
		require.NoError(t, err)
		st := hostFor(t, newPod).registration(ctx, t, created.UID)
		require.NotNil(t, st, "registered on the new Pod's Runtime Server")
		assert.Equal(t, int64(1), st.GetRegistrationAttempt())
		waitPodGone(ctx, t, f, lost)
		assertNoRegistration(ctx, t, lostHost, created.UID)
		for _, p := range readyPods(ctx, t, f, ns, "python", 2) {
			if p.UID != newPod.UID {
				assertNoRegistration(ctx, t, hostFor(t, &p), created.UID)
			}
		}
		// The Relocating Event of a runtimed that is exiting is best-effort
		// (its Event sink stops with it); the Run's conditions say it.
		reason := runReady(versions[relocated])
		assert.Contains(t, reason.Message, lost.Name, "the message names the Pod that went")
	})

	t.Run("a frozen runtimed: after the grace period the Run is OwnerLost, its Pod deleted, and only then it moves", func(t *testing.T) {
		pods := readyPods(ctx, t, f, ns, "python", 2)
		created := createRun(ctx, t, runs, ns, function("frozen"))
		ready := waitForRun(ctx, t, runs, ns, "frozen", functionTimeout, "Ready", readyAtAttempt(1))
		silent := podWithUID(t, pods, ready.Status.AssignedPodUID)
		freeze(t, silent)
		// Read after the freeze: the last renewal is this one or a later
		// one that was already on its way.
		lease, err := f.Client.CoordinationV1().Leases(ns).Get(ctx, runtimepod.LeaseName(silent.Name), metav1.GetOptions{})
		require.NoError(t, err)
		lostAt := lease.Spec.RenewTime.Add(runtimepod.HeartbeatLeaseDuration + framework.RecoveryHeartbeatGracePeriod)

		again := waitForRun(ctx, t, runs, ns, "frozen", functionTimeout+time.Minute, "Ready at attempt 2", readyAtAttempt(2))
		require.NotEqual(t, silent.UID, again.Status.AssignedPodUID)
		versions := w.versions("frozen")
		marked, moved := firstIndex(versions, markedOwnerLostOn(silent.UID)), firstIndex(versions, assignedElsewhere(silent.UID))
		require.NotEqual(t, -1, marked, "Ready=False/OwnerLost on the silent Pod was seen")
		assert.Less(t, marked, moved, "unroutable before it is assigned elsewhere")
		// metav1.Time (a condition's transition, a deletionTimestamp) is
		// stored to the second, rounded down: the bounds allow for it.
		markedAt := runReady(versions[marked]).LastTransitionTime.Time
		assert.False(t, markedAt.Before(lostAt.Add(-time.Second)), "marked at %s, not before the grace period ended at %s", markedAt, lostAt)
		// Nor long after: the hosted controller runs with the suite's
		// --recovery-heartbeat-grace-period, not the 40s default.
		assert.True(t, markedAt.Before(lostAt.Add(10*time.Second)), "marked at %s, soon after the grace period ended at %s", markedAt, lostAt)
		deleted, ok := w.deletionOf(silent.UID)
		require.True(t, ok, "the silent Pod was deleted")
		assert.False(t, deleted.Before(lostAt.Add(-time.Second)), "deleted at %s, not before the grace period ended at %s", deleted, lostAt)
		require.NotNil(t, again.Status.ScheduledTime)
		assert.False(t, again.Status.ScheduledTime.Time.Before(deleted), "assigned again at %s, not before the silent Pod's deletion at %s",
			again.Status.ScheduledTime.Time, deleted)
		requeued := firstIndex(versions, func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2 })
		require.NotEqual(t, -1, requeued, "back to Pending at attempt 2 was seen")
		sched := scheduledCondition(versions[requeued])
		require.NotNil(t, sched)
		assert.Contains(t, sched.Message, "fence: Pod "+silent.Name)
		assert.Contains(t, sched.Message, "is deleting")

		newPod, err := f.Client.CoreV1().Pods(ns).Get(ctx, again.Status.AssignedPod, metav1.GetOptions{})
		require.NoError(t, err)
		st := hostFor(t, newPod).registration(ctx, t, created.UID)
		require.NotNil(t, st)
		assert.Equal(t, int64(2), st.GetRegistrationAttempt())
	})

	t.Run("a deleting function Run whose Pod is gone is deleted without a finalizer edit", func(t *testing.T) {
		pods := readyPods(ctx, t, f, ns, "python", 2)
		createRun(ctx, t, runs, ns, function("deleted"))
		ready := waitForRun(ctx, t, runs, ns, "deleted", functionTimeout, "Ready", readyAtAttempt(1))
		owner := podWithUID(t, pods, ready.Status.AssignedPodUID)
		// A frozen runtimed cannot run the finalizer flow itself.
		freeze(t, owner)
		require.NoError(t, runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, "deleted", metav1.DeleteOptions{}))
		deleting := w.waitFor(ctx, "deleted", "deleting", framework.ShortTimeout, func(r *v1alpha1.Run) bool { return r.DeletionTimestamp != nil })
		require.Contains(t, deleting.Finalizers, lifecycle.FinalizerRegistrationCleanup)
		deletePod(ctx, t, f, owner)

		err := wait.PollUntilContextTimeout(ctx, framework.PollInterval, functionTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "deleted", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		require.NoError(t, err, "the Run is gone once its Pod is")
	})
}

// assertNoRegistration asserts that the Runtime Server of h holds no
// registration of the Run: it stopped with its Pod (its socket answers
// nothing), or it does not know the Run.
func assertNoRegistration(ctx context.Context, t *testing.T, h *runtimeHost, uid types.UID) {
	t.Helper()
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := h.functions.ListFunctions(callCtx, &runtimev1.ListFunctionsRequest{})
	if err != nil {
		t.Logf("the Runtime Server of Pod %s is gone: %v", h.pod.Name, err)
		return
	}
	for _, st := range list.GetRegistrations() {
		assert.NotEqual(t, string(uid), st.GetRunUid(), "the Runtime Server of Pod %s holds the Run", h.pod.Name)
	}
}
