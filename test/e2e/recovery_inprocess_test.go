package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/controllers/recovery"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// recoveryEnv runs recovery.Controllers built by the test as
// controllers/manager builds them, over real informers, in the scheduler
// tests' setting (schedulerEnv): Runs in a standalone kruntimes-apiserver of
// the test's own, so the cluster's hosted controllers never act on them, and
// Runtime Pods and heartbeat Leases in the cluster's kube-apiserver, on a
// node no agent owns. The test plays the scheduler and runtimed. Each
// controller's writes, to both servers, are recorded in one list in the
// order they were made.
type recoveryEnv struct {
	*schedulerEnv
	// probes counts settleRecovery's probe Runs, shared with the copies
	// of the env that subtests use.
	probes *int
}

func newRecoveryEnv(t *testing.T) *recoveryEnv {
	return &recoveryEnv{schedulerEnv: newSchedulerEnv(t), probes: new(int)}
}

// in returns e for subtest t: its helpers fail t, not the test around it.
func (e *recoveryEnv) in(t *testing.T) *recoveryEnv {
	s := *e.schedulerEnv
	s.t = t
	return &recoveryEnv{schedulerEnv: &s, probes: e.probes}
}

// recoveryController is one running controller and what it wrote.
type recoveryController struct {
	writes *apiWrites
	// cancel tells it to stop, as losing the leader Lease does.
	cancel func()
	// stop stops it and waits until it has.
	stop func()
}

// startRecovery runs a controller with one worker, so keys are synced in
// queue order, until stop or the end of the test.
func (e *recoveryEnv) startRecovery(writes *apiWrites, opts ...recovery.Option) *recoveryController {
	t := e.t
	t.Helper()
	writer, err := versioned.NewForConfig(writes.config(e.api.Config))
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(writes.config(e.f.AdminConfig))
	require.NoError(t, err)
	kruntimesInformers := externalversions.NewSharedInformerFactoryWithOptions(e.client, 0, externalversions.WithNamespace(e.ns))
	labelled := kubeinformers.NewSharedInformerFactoryWithOptions(e.f.Client, 0, kubeinformers.WithNamespace(e.ns),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = lifecycle.LabelRuntime }))
	leases := kubeinformers.NewSharedInformerFactoryWithOptions(e.f.Client, 0, kubeinformers.WithNamespace(e.ns))
	c, err := recovery.New(e.ctx, kruntimesInformers.Kruntimes().V1alpha1().Runs(), labelled.Core().V1().Pods(),
		leases.Coordination().V1().Leases(), kube, writer, newEventRecorder(t, e.f.Client, "kruntimes-recovery-e2e"), opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 1)
	}()
	startInformers(t, ctx.Done(), kruntimesInformers, labelled, leases)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		kruntimesInformers.Shutdown()
		labelled.Shutdown()
		leases.Shutdown()
	}
	t.Cleanup(stop)
	return &recoveryController{writes: writes, cancel: cancel, stop: stop}
}

func asFunction(r *v1alpha1.Run) {
	r.Spec.Source = v1alpha1.RunSource{Inline: "def handle(event, context):\n    return 1\n", InlinePath: "handler.py"}
	r.Spec.Mode = v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "handler.handle"}}
}

func maxAttempts(n int32) func(*v1alpha1.Run) {
	return func(r *v1alpha1.Run) { r.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: n} }
}

func setReadyCondition(s *v1alpha1.RunStatus, status metav1.ConditionStatus, reason string) {
	apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: lifecycle.ConditionReady, Status: status, Reason: reason, LastTransitionTime: metav1.Now(),
	})
}

// readyOn creates a function Run and walks it to Ready on pod as the
// scheduler and runtimed would, finalizer included.
func (e *recoveryEnv) readyOn(name string, pod *corev1.Pod, mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	e.t.Helper()
	e.createRun(name, "python", append([]func(*v1alpha1.Run){asFunction}, mutate...)...)
	e.setStatus(name, bindTo(pod))
	e.setStatus(name, func(s *v1alpha1.RunStatus) {
		toRunning(s)
		setReadyCondition(s, metav1.ConditionFalse, lifecycle.ReasonRegistering)
	})
	e.update(name, func(r *v1alpha1.Run) { r.Finalizers = append(r.Finalizers, lifecycle.FinalizerRegistrationCleanup) })
	return e.setStatus(name, func(s *v1alpha1.RunStatus) {
		now := metav1.NowMicro()
		s.Phase, s.ReadyTime = lifecycle.Ready, &now
		setReadyCondition(s, metav1.ConditionTrue, lifecycle.ReasonFunctionRegistered)
	})
}

// runningTask creates a task Run that is Running on pod.
func (e *recoveryEnv) runningTask(name string, pod *corev1.Pod, mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	e.t.Helper()
	e.createRun(name, "bash", mutate...)
	e.setStatus(name, bindTo(pod))
	return e.setStatus(name, toRunning)
}

// deletePod deletes pod: with grace it stays deleting (no kubelet owns its
// node), with zero grace it is gone at once.
func (e *recoveryEnv) deletePod(pod *corev1.Pod, grace int64) {
	e.t.Helper()
	require.NoError(e.t, e.f.Client.CoreV1().Pods(e.ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(grace)}))
}

// waitForRun polls Run name in the test's kruntimes-apiserver until done.
func (e *recoveryEnv) waitForRun(name, what string, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	e.t.Helper()
	return waitRun(e.ctx, e.t, e.client, e.ns, name, what, done)
}

// story renders the controller's applied writes of Run name, and its Pod
// deletions, one line each in the order they were made.
func story(t *testing.T, writes []apiWrite, name string) []string {
	t.Helper()
	var out []string
	for _, w := range writes {
		if !w.Applied() {
			continue
		}
		switch {
		case w.Resource == "pods" && w.Verb == "delete":
			out = append(out, "delete Pod "+w.Name)
		case w.Name != name:
		case w.Resource == "runs" && (w.Verb == "update" || w.Verb == "patch"):
			out = append(out, fmt.Sprintf("finalizers %v", decode[v1alpha1.Run](t, w).Finalizers))
		case w.Resource == "runs/status":
			run := decode[v1alpha1.Run](t, w)
			ready := "-"
			if c := apimeta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady); c != nil {
				ready = string(c.Status) + "/" + c.Reason
			}
			out = append(out, fmt.Sprintf("%s attempt %d Ready %s pod %q", run.Status.Phase, run.Status.Attempt, ready, run.Status.AssignedPod))
		default:
			out = append(out, w.String())
		}
	}
	return out
}

// checkRefused asserts that the writes the servers did not apply were
// conflicts or a deleted Run's 404, of the Run or its status (written from
// a stale informer copy, e.g. a second Pod event for a Run whose finalizer
// recovery just removed: they change nothing), Pod deletions the test refused, or requests never sent
// (a stopped leader's).
func checkRefused(t *testing.T, writes []apiWrite) {
	t.Helper()
	for _, w := range writes {
		switch {
		case w.Applied(), w.Code == http.StatusConflict, w.Code == 0:
		case w.Code == http.StatusNotFound && (w.Resource == "runs" || w.Resource == "runs/status"):
		case w.Code == http.StatusForbidden && w.Resource == "pods":
		default:
			t.Errorf("%s answered %d", w, w.Code)
		}
	}
}

// waitForStory waits until the controller's writes of Run name tell want.
func (e *recoveryEnv) waitForStory(c *recoveryController, name string, want []string) {
	e.t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
		got = story(e.t, c.writes.All(), name)
		return len(got) >= len(want), nil
	})
	require.NoError(e.t, err, "writes of Run %s: %v; all: %v", name, got, describe(c.writes.All()))
	assert.Equal(e.t, want, story(e.t, c.writes.All(), name), "writes of Run %s", name)
	checkRefused(e.t, c.writes.All())
}

// settleRecovery returns once the controller has synced every Run queued
// before the call: it binds a probe Run to a Pod that never existed and
// waits for the controller to send it back to Pending. With one worker,
// every key queued earlier was synced before the probe's.
func (e *recoveryEnv) settleRecovery(c *recoveryController) {
	e.t.Helper()
	*e.probes++
	name := fmt.Sprintf("probe-%d", *e.probes)
	e.createRun(name, "bash")
	e.setStatus(name, bindTo(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "never-" + name, UID: types.UID("never-" + name)}}))
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
		return len(c.writes.Since(0, named("runs/status", name))) > 0, nil
	})
	require.NoError(e.t, err, "the controller recovers probe %s", name)
}

func recoveries(t *testing.T, reason, outcome string) float64 {
	t.Helper()
	values, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, "kruntimes_recovery_recoveries_total",
		map[string]string{"reason": reason}, "outcome")
	if err != nil {
		return 0 // no recovery counted yet
	}
	return values[outcome]
}

func scheduledCondition(r *v1alpha1.Run) *metav1.Condition {
	return apimeta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionScheduled)
}

// TestRecoveryFencedByPodLoss: a Run whose Pod is gone (or, never claimed,
// deleting) is made unroutable first (functions), released from its
// finalizer, and only then sent back to Pending, failed or, when deleting,
// let go — each as one write in that order, the fence named in its
// conditions. A claimed Run on a Pod deleted gracefully waits for its
// runtimed while that heartbeats.
func TestRecoveryFencedByPodLoss(t *testing.T) {
	e := newRecoveryEnv(t)
	// Runs whose Pods were lost while no controller ran, set up before it
	// starts (a controller would move them between the setup's writes).
	neverThere := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")}}
	}
	e.readyOn("fn-gone", neverThere("gone"), maxAttempts(2))
	current := e.candidatePod("reused", "bash")
	// Bound to an earlier Pod of the name, deleted before this one came.
	e.runningTask("task-reused", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: current.Name, UID: "earlier-" + current.UID}}, maxAttempts(2))
	e.runningTask("task-last", neverThere("last"))
	e.runningTask("task-cancelled", neverThere("cancelled"), maxAttempts(3))
	e.update("task-cancelled", func(r *v1alpha1.Run) { r.Spec.CancelRequested = true })
	failedBefore := recoveries(t, reasonPodGone, "failed")

	c := e.startRecovery(&apiWrites{})

	t.Run("a Ready function whose Pod is gone: unroutable, then Pending at attempt 2 at once", func(t *testing.T) {
		e := e.in(t)
		e.waitForStory(c, "fn-gone", []string{
			`Ready attempt 1 Ready False/OwnerLost pod "gone"`,
			"finalizers []",
			`Pending attempt 2 Ready False/OwnerLost pod ""`,
		})
		run := e.waitForRun("fn-gone", "Pending", inPhase(lifecycle.Pending))
		sched := scheduledCondition(run)
		require.NotNil(t, sched)
		assert.Equal(t, lifecycle.ReasonOwnerLost, sched.Reason)
		assert.Contains(t, sched.Message, "fence: Pod gone (uid gone-uid) no longer exists")
		assert.Contains(t, runReady(run).Message, "fence: Pod gone")
		assert.True(t, retry.NotBefore(run).IsZero(), "placed again at once, without a backoff")
	})

	t.Run("a Pod name now held by another Pod: the assigned UID is gone", func(t *testing.T) {
		e := e.in(t)
		e.waitForStory(c, "task-reused", []string{`Pending attempt 2 Ready - pod ""`})
		run := e.waitForRun("task-reused", "Pending", inPhase(lifecycle.Pending))
		assert.Contains(t, scheduledCondition(run).Message, "the name now belongs to Pod uid "+string(current.UID))
		_, err := e.f.Client.CoreV1().Pods(e.ns).Get(e.ctx, current.Name, metav1.GetOptions{})
		assert.NoError(t, err, "the Pod that took the name is left alone")
	})

	t.Run("a Running task with no attempt left fails with OwnerLost, as runtimed records an end", func(t *testing.T) {
		e := e.in(t)
		e.waitForStory(c, "task-last", []string{`Failed attempt 1 Ready - pod "last"`})
		run := e.waitForRun("task-last", "Failed", inPhase(lifecycle.Failed))
		completed := apimeta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, metav1.ConditionTrue, completed.Status)
		assert.Equal(t, lifecycle.ReasonOwnerLost, completed.Reason)
		assert.Contains(t, completed.Message, "fence: Pod last")
		require.NotNil(t, run.Status.CompletionTime)
		assert.Equal(t, failedBefore+1, recoveries(t, reasonPodGone, "failed"))
	})

	t.Run("a cancelled Run whose Pod is lost ends Cancelled, not retried", func(t *testing.T) {
		e := e.in(t)
		e.waitForStory(c, "task-cancelled", []string{`Cancelled attempt 1 Ready - pod "cancelled"`})
	})

	t.Run("a Ready function on a Pod deleted gracefully is left to its runtimed while it heartbeats; once the Pod is gone unreleased, it is an attempt", func(t *testing.T) {
		e := e.in(t)
		requeuedBefore := recoveries(t, reasonPodGone, "requeued")
		pod := e.candidatePod("deleting", "python")
		e.readyOn("fn-deleting", pod, maxAttempts(2))
		e.deletePod(pod, 30)
		// Deleting is no fence: the Pod's runtimed stops the function and
		// gives it back itself (Relocating, same attempt).
		e.settleRecovery(c)
		assert.Empty(t, story(t, c.writes.All(), "fn-deleting"), "recovery writes nothing while the deleting Pod's runtimed heartbeats")
		assert.Equal(t, lifecycle.Ready, e.waitForRun("fn-deleting", "Ready", inPhase(lifecycle.Ready)).Status.Phase)
		// The Pod goes without its runtimed having released the function:
		// an unplanned loss.
		e.deletePod(pod, 0)
		e.waitForStory(c, "fn-deleting", []string{
			`Ready attempt 1 Ready False/OwnerLost pod "deleting"`,
			"finalizers []",
			`Pending attempt 2 Ready False/OwnerLost pod ""`,
		})
		run := e.waitForRun("fn-deleting", "Pending", inPhase(lifecycle.Pending))
		assert.Contains(t, scheduledCondition(run).Message, "fence: Pod deleting (uid "+string(pod.UID)+") no longer exists")
		// settleRecovery's probe (a Run on a Pod that never existed) counts too.
		assert.Equal(t, requeuedBefore+2, recoveries(t, reasonPodGone, "requeued"))
	})

	t.Run("a Scheduled Run never claimed goes back to Pending at the same attempt", func(t *testing.T) {
		e := e.in(t)
		pod := e.candidatePod("unclaimed", "bash")
		e.createRun("task-unclaimed", "bash")
		e.setStatus("task-unclaimed", bindTo(pod))
		e.deletePod(pod, 30)
		e.waitForStory(c, "task-unclaimed", []string{`Pending attempt 1 Ready - pod ""`})
		run := e.waitForRun("task-unclaimed", "Pending", inPhase(lifecycle.Pending))
		assert.Equal(t, lifecycle.ReasonOwnerLost, scheduledCondition(run).Reason)
		assert.Contains(t, scheduledCondition(run).Message, "before it started")
	})

	t.Run("a deleting function Run whose Pod is gone loses its finalizer and goes", func(t *testing.T) {
		e := e.in(t)
		pod := e.candidatePod("finalize", "python")
		e.readyOn("fn-deleted", pod)
		require.NoError(t, e.client.KruntimesV1alpha1().Runs(e.ns).Delete(e.ctx, "fn-deleted", metav1.DeleteOptions{}))
		deleting := e.waitForRun("fn-deleted", "deleting", func(r *v1alpha1.Run) bool { return r.DeletionTimestamp != nil })
		assert.Contains(t, deleting.Finalizers, lifecycle.FinalizerRegistrationCleanup, "held by its finalizer while its Pod lives")
		e.deletePod(pod, 0)
		e.waitForStory(c, "fn-deleted", []string{
			`Ready attempt 1 Ready False/OwnerLost pod "finalize"`,
			"finalizers []",
		})
		err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := e.client.KruntimesV1alpha1().Runs(e.ns).Get(ctx, "fn-deleted", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		require.NoError(t, err, "the Run is gone without a manual finalizer edit")
	})
}

// The reasons recovery's metrics count by.
const (
	reasonPodGone     = "PodGone"
	reasonPodDeleting = "PodDeleting"
)

// timeline renders every Run status and Pod write of the controller in the
// order they were made, each line prefixed with the Run's name.
func timeline(t *testing.T, writes []apiWrite) []string {
	t.Helper()
	var out []string
	for _, w := range writes {
		if !w.Applied() {
			continue
		}
		switch {
		case w.Resource == "pods" && w.Verb == "delete":
			out = append(out, "delete Pod "+w.Name)
		case w.Resource == "runs/status":
			run := decode[v1alpha1.Run](t, w)
			ready := "-"
			if c := apimeta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady); c != nil {
				ready = string(c.Status) + "/" + c.Reason
			}
			out = append(out, fmt.Sprintf("%s: %s attempt %d Ready %s", w.Name, run.Status.Phase, run.Status.Attempt, ready))
		}
	}
	return out
}

func indexOf(lines []string, prefix string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}

// TestRecoveryHeartbeatLossFencedByDeletion: a Pod whose runtimed heartbeat went stale is
// left alone within the grace period; past it, its function Run is made
// unroutable first, then the Pod is deleted (its UID a precondition), and
// only then do its Runs go back to Pending. A stale heartbeat with a live
// Pod is no fence: while the deletion is refused, nothing moves.
func TestRecoveryHeartbeatLossFencedByDeletion(t *testing.T) {
	e := newRecoveryEnv(t)
	const grace = 40 * time.Second
	// The controller's clock: the test steps it past the grace period
	// instead of waiting, so the Pod's real heartbeat renewals (time.Now)
	// fall behind it.
	clk := testingclock.NewFakeClock(time.Now())
	var refusing atomic.Bool
	writes := &apiWrites{refuse: func(w apiWrite) bool { return refusing.Load() && w.Resource == "pods" && w.Verb == "delete" }}
	c := e.startRecovery(writes, recovery.WithClock(clk), recovery.WithHeartbeatGracePeriod(grace))
	deletionsBefore := podDeletionsTotal(t)

	pod := e.candidatePod("silent", "python")
	e.readyOn("fn", pod, maxAttempts(2))
	e.runningTask("task", pod, maxAttempts(2))
	e.settleRecovery(c)

	clk.Step(runtimepod.HeartbeatLeaseDuration + grace/2)
	e.settleRecovery(c)
	assert.Equal(t, -1, indexOf(timeline(t, writes.All()), "fn:"), "stale, but within the grace period: %v", timeline(t, writes.All()))
	assert.Equal(t, -1, indexOf(timeline(t, writes.All()), "task:"))

	refusing.Store(true)
	clk.Step(time.Hour)
	e.waitForStory(c, "fn", []string{`Ready attempt 1 Ready False/OwnerLost pod "silent"`})
	// Both Runs tried to delete the Pod and were refused; let their
	// backoff pass once, and let everything queued settle.
	clk.Step(time.Minute)
	e.settleRecovery(c)
	assert.Equal(t, []string{`Ready attempt 1 Ready False/OwnerLost pod "silent"`}, story(t, writes.All(), "fn"),
		"unroutable, but still assigned: a live Pod is no fence")
	assert.Empty(t, story(t, writes.All(), "task"))
	live, err := e.f.Client.CoreV1().Pods(e.ns).Get(e.ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, live.DeletionTimestamp)

	refusing.Store(false)
	// The refused syncs back off on the controller's clock: step it until
	// both Runs moved.
	var fn, task *v1alpha1.Run
	err = wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, framework.ShortTimeout, true, func(ctx context.Context) (bool, error) {
		clk.Step(time.Minute)
		var err error
		if fn, err = e.client.KruntimesV1alpha1().Runs(e.ns).Get(ctx, "fn", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if task, err = e.client.KruntimesV1alpha1().Runs(e.ns).Get(ctx, "task", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return fn.Status.Phase == lifecycle.Pending && task.Status.Phase == lifecycle.Pending, nil
	})
	require.NoError(t, err, "both Runs go back to Pending once the Pod could be deleted; writes %v", timeline(t, writes.All()))
	lines := timeline(t, writes.All())
	marked, deleted := indexOf(lines, "fn: Ready attempt 1 Ready False/OwnerLost"), indexOf(lines, "delete Pod silent")
	require.NotEqual(t, -1, deleted, "the Pod was deleted: %v", lines)
	assert.Less(t, marked, deleted, "unroutable before the Pod is deleted: %v", lines)
	assert.Less(t, deleted, indexOf(lines, "fn: Pending attempt 2"), "the function moves after the fence: %v", lines)
	assert.Less(t, deleted, indexOf(lines, "task: Pending attempt 2"), "the task moves after the fence: %v", lines)
	for _, w := range writes.All() {
		if w.Resource == "pods" && w.Verb == "delete" {
			opts := decode[metav1.DeleteOptions](t, w)
			require.NotNil(t, opts.Preconditions)
			assert.Equal(t, pod.UID, *opts.Preconditions.UID, "deleted with its UID as a precondition")
		}
	}
	live, err = e.f.Client.CoreV1().Pods(e.ns).Get(e.ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotNil(t, live.DeletionTimestamp, "the Pod is deleting")
	deletedBy := 0
	for _, run := range []*v1alpha1.Run{fn, task} {
		assert.Equal(t, int32(2), run.Status.Attempt)
		msg := scheduledCondition(run).Message
		assert.Contains(t, msg, "fence: Pod silent (uid "+string(pod.UID)+") is deleting", run.Name)
		if strings.Contains(msg, "recovery deleted it because the runtimed heartbeat of Pod silent") {
			deletedBy++
		}
	}
	assert.GreaterOrEqual(t, deletedBy, 1, "the Run whose sync deleted the Pod says so; the other may have found it deleting")
	deletes := 0
	for _, w := range writes.All() {
		if w.Resource == "pods" && w.Verb == "delete" && w.Applied() {
			deletes++
		}
	}
	assert.Equal(t, 1, deletes, "the Pod is deleted once for all its Runs")
	assert.GreaterOrEqual(t, podDeletionsTotal(t), deletionsBefore+1)
}

func podDeletionsTotal(t *testing.T) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() == "kruntimes_recovery_pod_deletions_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// isRequeue reports whether w sends a Run back to Pending.
func isRequeue(w apiWrite) bool {
	if w.Resource != "runs/status" {
		return false
	}
	var run v1alpha1.Run
	return json.Unmarshal(w.Body, &run) == nil && run.Status.Phase == lifecycle.Pending
}

// holdRequeue returns writes whose requeue of Run name waits, once the
// request is made, until release is closed; held is closed when it waits.
func holdRequeue(name string) (writes *apiWrites, held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	writes = &apiWrites{before: func(w apiWrite) {
		if w.Name == name && isRequeue(w) {
			once.Do(func() {
				close(held)
				<-release
			})
		}
	}}
	return writes, held, release
}

func (e *recoveryEnv) waitClosed(ch chan struct{}, what string) {
	e.t.Helper()
	select {
	case <-ch:
	case <-time.After(framework.ShortTimeout):
		e.t.Fatalf("timed out waiting for %s", what)
	}
}

// requeues counts the requeues of Run name that the servers applied.
func requeues(name string, controllers ...*recoveryController) int {
	n := 0
	for _, c := range controllers {
		for _, w := range c.writes.Since(0, named("runs/status", name)) {
			if w.Applied() && isRequeue(w) {
				n++
			}
		}
	}
	return n
}

// TestRecoveryLeaderChange: recovery that a leader began and another
// finishes happens once — one requeue, attempt + 1 once — whether the old
// leader stopped before its last write or that write arrives after the new
// leader's.
func TestRecoveryLeaderChange(t *testing.T) {
	e := newRecoveryEnv(t)

	t.Run("a leader stopped between OwnerLost and the requeue: the next completes it, once", func(t *testing.T) {
		e := e.in(t)
		pod := e.candidatePod("a", "python")
		e.readyOn("fn-a", pod, maxAttempts(3))
		writes, held, release := holdRequeue("fn-a")
		old := e.startRecovery(writes)
		// Gone at once (force-deleted): an unplanned loss, which recovery
		// requeues. A graceful deletion would wait for the Pod's runtimed.
		e.deletePod(pod, 0)
		e.waitClosed(held, "the first leader's requeue")
		// It loses the Lease while its requeue is about to be sent.
		old.cancel()
		close(release)
		old.stop()
		assert.Equal(t, []string{`Ready attempt 1 Ready False/OwnerLost pod "a"`, "finalizers []"}, story(t, old.writes.All(), "fn-a"))

		next := e.startRecovery(&apiWrites{})
		run := e.waitForRun("fn-a", "Pending", inPhase(lifecycle.Pending))
		assert.Equal(t, int32(2), run.Status.Attempt)
		e.settleRecovery(next)
		assert.Equal(t, []string{`Pending attempt 2 Ready False/OwnerLost pod ""`}, story(t, next.writes.All(), "fn-a"),
			"the next leader finds the Run unroutable and its finalizer gone, and only requeues it")
		assert.Equal(t, 1, requeues("fn-a", old, next))
		next.stop()
	})

	t.Run("an old leader's requeue that arrives after the new leader's is refused", func(t *testing.T) {
		e := e.in(t)
		pod := e.candidatePod("b", "python")
		e.readyOn("fn-b", pod, maxAttempts(3))
		writes, held, release := holdRequeue("fn-b")
		old := e.startRecovery(writes)
		e.deletePod(pod, 0)
		e.waitClosed(held, "the old leader's requeue")

		next := e.startRecovery(&apiWrites{})
		e.waitForRun("fn-b", "Pending at attempt 2", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2
		})
		close(release)
		err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
			for _, w := range old.writes.Since(0, named("runs/status", "fn-b")) {
				if isRequeue(w) {
					return w.Code != 0, nil
				}
			}
			return false, nil
		})
		require.NoError(t, err, "the old leader's requeue is answered")
		for _, w := range old.writes.Since(0, named("runs/status", "fn-b")) {
			if isRequeue(w) {
				assert.Equal(t, http.StatusConflict, w.Code, "written from a copy the new leader's requeue replaced")
			}
		}
		// The new leader's requeue was applied: it has nothing left to do
		// with fn-b. Stopped first, so the probe that settles the old one
		// is recovered by the old one (with both running, either may take
		// it, and the old one then writes nothing to wait for).
		next.stop()
		e.settleRecovery(old)
		run, err := e.client.KruntimesV1alpha1().Runs(e.ns).Get(e.ctx, "fn-b", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Pending, run.Status.Phase)
		assert.Equal(t, int32(2), run.Status.Attempt, "attempt + 1, once")
		assert.Equal(t, 1, requeues("fn-b", old, next))
		old.stop()
		next.stop()
	})
}
