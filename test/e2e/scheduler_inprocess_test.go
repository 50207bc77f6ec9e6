package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
	"kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/controllers/scheduler"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// schedulerEnv runs a scheduler.Scheduler built by the test as
// controllers/manager builds it, over real informers: Runs and Runtimes in a
// standalone kruntimes-apiserver of its own, so the cluster's hosted
// controllers never act on them, and Runtime Pods and heartbeat Leases in
// the cluster's kube-apiserver. The Pods are bound to a node no agent owns,
// so nothing runs them; the test writes their status and renews their
// Leases as the kubelet and runtimed would. Every write the scheduler makes
// is recorded on the wire.
type schedulerEnv struct {
	t   *testing.T
	f   *framework.Framework
	ctx context.Context
	ns  string
	// node is the Pods' node: no agent owns it, and being unique to the
	// test, the Pod garbage collector's quarantine of it (40s) starts with
	// the test.
	node   string
	api    *testserver.Server
	client versioned.Interface // the test's own writes, not recorded
	writes *apiWrites          // the scheduler's writes
	probes int
	// allNamespaces: the scheduler watches Runs and Runtimes in every
	// namespace of the test's kruntimes-apiserver, not only ns.
	allNamespaces bool
}

func newSchedulerEnv(t *testing.T) *schedulerEnv {
	t.Helper()
	f := framework.Get(t)
	_, ctx := ktesting.NewTestContext(t)
	ns := f.CreateNamespace(t, "sched-inproc")
	api := testserver.Start(t, "")
	return &schedulerEnv{
		t: t, f: f, ctx: ctx, ns: ns, node: "unowned-" + ns,
		api: api, client: api.Client, writes: &apiWrites{},
	}
}

// start runs the scheduler with workers until the test ends.
func (e *schedulerEnv) start(workers int, opts ...scheduler.Option) {
	t := e.t
	t.Helper()
	writer, err := versioned.NewForConfig(e.writes.config(e.api.Config))
	require.NoError(t, err)
	var only []externalversions.SharedInformerOption
	if !e.allNamespaces {
		only = append(only, externalversions.WithNamespace(e.ns))
	}
	kruntimesInformers := externalversions.NewSharedInformerFactoryWithOptions(e.client, 0, only...)
	// As controllers/manager: Runtime Pods by label, Leases by name.
	labelled := kubeinformers.NewSharedInformerFactoryWithOptions(e.f.Client, 0, kubeinformers.WithNamespace(e.ns),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = lifecycle.LabelRuntime }))
	leases := kubeinformers.NewSharedInformerFactoryWithOptions(e.f.Client, 0, kubeinformers.WithNamespace(e.ns))
	kr := kruntimesInformers.Kruntimes().V1alpha1()
	// The Runtimes live in this test's own API server, which the cluster's
	// garbage collector does not see: a Deployment owned by one would be
	// collected, so the candidate Pods are bare Pods, trusted by label.
	// TestSchedulerPlacesRunsOnlyOnPodsOfTheRuntimesDeployment covers the
	// ownership check on the whole cluster.
	opts = append([]scheduler.Option{scheduler.TrustPodLabels()}, opts...)
	s, err := scheduler.New(e.ctx, kr.Runs(), kr.Runtimes(), labelled.Core().V1().Pods(),
		labelled.Apps().V1().ReplicaSets(), labelled.Apps().V1().Deployments(), leases.Coordination().V1().Leases(),
		writer, newEventRecorder(t, e.f.Client, "kruntimes-scheduler-e2e"), opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, workers)
	}()
	startInformers(t, ctx.Done(), kruntimesInformers, labelled, leases)
	t.Cleanup(func() {
		cancel()
		<-done
		kruntimesInformers.Shutdown()
		labelled.Shutdown()
		leases.Shutdown()
	})
}

func (e *schedulerEnv) createRuntime(name string, capacity int32) {
	e.t.Helper()
	_, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Create(e.ctx, newTestRuntime(name, 0, capacity), metav1.CreateOptions{})
	require.NoError(e.t, err)
}

// candidatePod creates a Pod of runtime that is Running and Ready, with a
// heartbeat renewed until the test ends: a Pod the scheduler may bind to.
func (e *schedulerEnv) candidatePod(name, runtime string) *corev1.Pod {
	t := e.t
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{lifecycle.LabelRuntime: runtime}},
		Spec: corev1.PodSpec{
			NodeName:   e.node,
			Containers: []corev1.Container{{Name: "runtime", Image: "kruntimes.io/kruntimes-runtime:dev"}},
		},
	}
	pods := e.f.Client.CoreV1().Pods(e.ns)
	var created *corev1.Pod
	// Admission wants the namespace's default ServiceAccount, which the
	// cluster's controller-manager creates shortly after the namespace.
	err := framework.Poll(e.ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		var err error
		created, err = pods.Create(ctx, pod, metav1.CreateOptions{})
		return !seen.Err(err), nil
	})
	require.NoError(t, err, "creating Pod %s", name)
	now := metav1.Now()
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	created, err = pods.UpdateStatus(e.ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)
	heartbeat(t, e.f, []corev1.Pod{*created})
	return created
}

// createRun creates a Pending task Run of runtime, as a user would.
func (e *schedulerEnv) createRun(name, runtime string, mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	e.t.Helper()
	run := newTaskRun(name, runtime)
	for _, m := range mutate {
		m(run)
	}
	created, err := e.client.KruntimesV1alpha1().Runs(e.ns).Create(e.ctx, run, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return created
}

// setStatus writes the status of Run name through runs/status, as the
// scheduler or runtimed would.
func (e *schedulerEnv) setStatus(name string, mutate func(*v1alpha1.RunStatus)) *v1alpha1.Run {
	e.t.Helper()
	runs := e.client.KruntimesV1alpha1().Runs(e.ns)
	run, err := runs.Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	mutate(&run.Status)
	run, err = runs.UpdateStatus(e.ctx, run, metav1.UpdateOptions{})
	require.NoError(e.t, err)
	return run
}

// update changes Run name through the main resource.
func (e *schedulerEnv) update(name string, mutate func(*v1alpha1.Run)) *v1alpha1.Run {
	e.t.Helper()
	runs := e.client.KruntimesV1alpha1().Runs(e.ns)
	run, err := runs.Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	mutate(run)
	run, err = runs.Update(e.ctx, run, metav1.UpdateOptions{})
	require.NoError(e.t, err)
	return run
}

// finish makes Run name Succeeded, as runtimed would, releasing its slot.
func (e *schedulerEnv) finish(name string) {
	e.t.Helper()
	run, err := e.client.KruntimesV1alpha1().Runs(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	finishRun(e.ctx, e.t, e.client, run)
}

func bindTo(pod *corev1.Pod) func(*v1alpha1.RunStatus) {
	return func(s *v1alpha1.RunStatus) {
		now := metav1.NowMicro()
		s.Phase = lifecycle.Scheduled
		s.AssignedPod, s.AssignedPodUID = pod.Name, pod.UID
		s.ScheduledTime = &now
	}
}

func toRunning(s *v1alpha1.RunStatus) {
	now := metav1.NowMicro()
	s.Phase = lifecycle.Running
	s.StartTime = &now
}

// runningOn creates a Run of runtime that is Running on pod.
func (e *schedulerEnv) runningOn(name, runtime string, pod *corev1.Pod) *v1alpha1.Run {
	e.t.Helper()
	e.createRun(name, runtime)
	e.setStatus(name, bindTo(pod))
	return e.setStatus(name, toRunning)
}

// writesOf returns the scheduler's writes of Run name.
func (e *schedulerEnv) writesOf(name string) []apiWrite {
	return e.writes.Since(0, named("runs/status", name))
}

// waitForWrites waits until the scheduler made n writes of Run name and
// returns them.
func (e *schedulerEnv) waitForWrites(name string, n int) []apiWrite {
	e.t.Helper()
	var got []apiWrite
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
		got = e.writesOf(name)
		return len(got) >= n, nil
	})
	require.NoError(e.t, err, "waiting for %d writes of Run %s; all writes: %v", n, name, describe(e.writes.All()))
	return got
}

// settle returns once the scheduler has synced every Run queued before the
// call. It creates a Run of a Runtime that does not exist and waits for the
// scheduler to say so: after the informers' initial list, Run events reach
// the queue in the order the server made them, and one worker takes keys in
// queue order, so every key queued earlier was synced before this one.
// Tests use it to assert that a sync wrote nothing.
func (e *schedulerEnv) settle() {
	e.t.Helper()
	e.probes++
	name := fmt.Sprintf("probe-%d", e.probes)
	e.createRun(name, "no-such-runtime-"+name)
	e.waitForWrites(name, 1)
}

func runOf(t *testing.T, w apiWrite) *v1alpha1.Run {
	t.Helper()
	require.True(t, w.Applied(), "%s answered %d", w, w.Code)
	return decode[v1alpha1.Run](t, w)
}

// schedulingAttempts reads kruntimes_scheduler_attempts_total{result} from
// this process's registry: how often a scheduler here tried to place a Run
// with that result.
func schedulingAttempts(t *testing.T, result string) float64 {
	t.Helper()
	values, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, "kruntimes_scheduler_attempts_total", map[string]string{}, "result")
	require.NoError(t, err)
	return values[result]
}

func TestSchedulerBindsToLeastLoadedPod(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRuntime("bash", 2)
	a := e.candidatePod("a", "bash")
	b := e.candidatePod("b", "bash")
	e.runningOn("busy", "bash", a)
	r := e.createRun("r", "bash")
	e.start(1)

	e.waitForWrites("r", 1)
	e.settle()
	writes := e.writesOf("r")
	require.Len(t, writes, 1, "one binding, nothing after: %v", describe(writes))
	got := runOf(t, writes[0])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	assert.Equal(t, "b", got.Status.AssignedPod, "a holds one of its two slots, b none")
	assert.Equal(t, b.UID, got.Status.AssignedPodUID)
	assert.NotNil(t, got.Status.ScheduledTime)
	assert.Equal(t, r.ResourceVersion, got.ResourceVersion, "binds with the Run's resourceVersion")
	cond := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionScheduled)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Empty(t, e.writesOf("busy"), "a Running Run is not the scheduler's")

	stored, err := e.client.KruntimesV1alpha1().Runs(e.ns).Get(e.ctx, "r", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.Scheduled, stored.Status.Phase)
	assert.Equal(t, "b", stored.Status.AssignedPod)
}

// TestSchedulerAssumedReservationPreventsDoubleBooking runs two workers and
// holds the first binding on the wire until the other Run's decision was
// written: that decision cannot have seen the binding in the informer, or
// even in the server, so only the reservation can keep the slot.
func TestSchedulerAssumedReservationPreventsDoubleBooking(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRuntime("bash", 1)
	a := e.candidatePod("a", "bash")
	e.createRun("first", "bash")
	e.createRun("second", "bash")

	var (
		holding             atomic.Bool
		releaseOnce         sync.Once
		released            = make(chan struct{})
		heldUntilOtherWrite atomic.Bool
	)
	e.writes.before = func(w apiWrite) {
		if w.Resource != "runs/status" {
			return
		}
		var run v1alpha1.Run
		if json.Unmarshal(w.Body, &run) == nil && run.Status.Phase == lifecycle.Scheduled && holding.CompareAndSwap(false, true) {
			select {
			case <-released:
				heldUntilOtherWrite.Store(true)
			case <-time.After(framework.ShortTimeout):
			}
			return
		}
		releaseOnce.Do(func() { close(released) })
	}
	e.start(2)

	e.waitForWrites("first", 1)
	e.waitForWrites("second", 1)
	require.True(t, heldUntilOtherWrite.Load(), "the other Run was decided while the binding was held: %v", describe(e.writes.All()))
	var bound, waiting string
	for _, name := range []string{"first", "second"} {
		writes := e.writesOf(name)
		require.Len(t, writes, 1, "%s: %v", name, describe(writes))
		got := runOf(t, writes[0])
		switch got.Status.Phase {
		case lifecycle.Scheduled:
			assert.Empty(t, bound, "both Runs bound to the one slot")
			bound = name
			assert.Equal(t, a.Name, got.Status.AssignedPod)
		case lifecycle.Pending:
			waiting = name
			cond := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionScheduled)
			require.NotNil(t, cond)
			assert.Equal(t, lifecycle.ReasonNoCapacity, cond.Reason)
			assert.Equal(t, got.Status.Message, cond.Message)
		default:
			t.Fatalf("%s written as %s", name, got.Status.Phase)
		}
	}
	require.NotEmpty(t, bound)
	require.NotEmpty(t, waiting)

	// Once the informer shows the bound Run finished, the slot is free.
	e.finish(bound)
	writes := e.waitForWrites(waiting, 2)
	got := runOf(t, writes[1])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	assert.Equal(t, a.Name, got.Status.AssignedPod)
	e.settle()
	assert.Len(t, e.writesOf(bound), 1, "%v", describe(e.writesOf(bound)))
	assert.Len(t, e.writesOf(waiting), 2, "%v", describe(e.writesOf(waiting)))
}

// TestSchedulerConflictRetriesFromNewerCopy makes the scheduler lose a real
// race: just before its first binding goes out, another writer changes the
// Run, so the server answers 409 Conflict. The Run keeps its place in line:
// the younger Run does not take the slot meanwhile, and the retry binds
// from the copy the informer saw next.
func TestSchedulerConflictRetriesFromNewerCopy(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRuntime("bash", 1)
	a := e.candidatePod("a", "bash")
	e.createRun("r1", "bash")
	e.createRun("r2", "bash")

	var racing atomic.Bool
	type race struct {
		run string // whose binding lost the race
		err error
	}
	raced := make(chan race, 1)
	e.writes.before = func(w apiWrite) {
		var run v1alpha1.Run
		if w.Resource != "runs/status" || json.Unmarshal(w.Body, &run) != nil ||
			run.Status.Phase != lifecycle.Scheduled || !racing.CompareAndSwap(false, true) {
			return
		}
		runs := e.client.KruntimesV1alpha1().Runs(e.ns)
		current, err := runs.Get(e.ctx, w.Name, metav1.GetOptions{})
		if err == nil {
			current.Labels = map[string]string{"raced": "yes"}
			_, err = runs.Update(e.ctx, current, metav1.UpdateOptions{})
		}
		raced <- race{run: w.Name, err: err}
	}
	e.start(1)

	var r race
	select {
	case r = <-raced:
	case <-e.ctx.Done():
		t.Fatal("the scheduler bound nothing")
	case <-time.After(framework.ShortTimeout):
		t.Fatal("the scheduler bound nothing")
	}
	require.NoError(t, r.err, "racing the scheduler")
	loser := r.run
	other := map[string]string{"r1": "r2", "r2": "r1"}[loser]

	// The conflict reached the queue, which retried from the newer copy.
	var writes, applied []apiWrite
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
		writes, applied = e.writesOf(loser), nil
		if len(writes) == 0 {
			return false, nil
		}
		for _, w := range writes[1:] {
			if w.Applied() {
				applied = append(applied, w)
			}
		}
		return len(applied) > 0, nil
	}), "waiting for the retried binding: %v", describe(e.writes.All()))
	e.settle()
	writes = e.writesOf(loser)
	assert.Equal(t, 409, writes[0].Code, "the binding lost the race")
	first := decode[v1alpha1.Run](t, writes[0])
	assert.Equal(t, lifecycle.Scheduled, first.Status.Phase)
	// The racing label change also queues the loser; if that sync runs
	// before the informer has seen the scheduler's own write, its stale
	// copy is refused too. Such refusals are allowed, nothing else is.
	for _, w := range writes[1:] {
		if !w.Applied() {
			assert.Equal(t, 409, w.Code, "only a stale copy may be refused: %v", describe(writes))
		}
	}
	require.Len(t, applied, 1, "%v", describe(writes))
	retried := runOf(t, applied[0])
	assert.NotEqual(t, first.ResourceVersion, retried.ResourceVersion, "the retry starts from the Run the informer saw next")
	assert.Equal(t, lifecycle.Scheduled, retried.Status.Phase)
	assert.Equal(t, a.Name, retried.Status.AssignedPod)

	// The younger Run waited its turn.
	for _, w := range e.writesOf(other) {
		got := runOf(t, w)
		assert.Equal(t, lifecycle.Pending, got.Status.Phase, "%s took the slot of the older %s", other, loser)
		assert.Equal(t, lifecycle.ReasonNoCapacity, scheduledReason(got))
	}
}

func TestSchedulerWritesUnschedulableOnlyWhenItChanges(t *testing.T) {
	e := newSchedulerEnv(t)
	clock := testingclock.NewFakeClock(time.Now())
	e.createRuntime("bash", 1)
	e.createRun("r", "bash")
	e.start(1, scheduler.WithClock(clock))

	writes := e.waitForWrites("r", 1)
	got := runOf(t, writes[0])
	assert.Equal(t, lifecycle.Pending, got.Status.Phase)
	assert.Contains(t, got.Status.Message, "no Pods yet")
	e.settle()

	// A minute later something about the Run changes, but nothing the
	// scheduler decides on: the parked Run stays parked, unexamined.
	attempts := schedulingAttempts(t, "no_capacity")
	clock.Step(time.Minute)
	e.update("r", func(r *v1alpha1.Run) { r.Labels = map[string]string{"touched": "yes"} })
	e.settle()
	assert.Equal(t, attempts, schedulingAttempts(t, "no_capacity"), "a label change wakes no parked Run")
	assert.Len(t, e.writesOf("r"), 1, "nothing changed, nothing written: %v", describe(e.writesOf("r")))
}

func TestSchedulerRunOfMissingRuntime(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRun("r", "missing")
	e.start(1)

	e.waitForWrites("r", 1)
	e.settle()
	writes := e.writesOf("r")
	require.Len(t, writes, 1, "%v", describe(writes))
	got := runOf(t, writes[0])
	assert.Equal(t, lifecycle.Pending, got.Status.Phase)
	cond := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionScheduled)
	require.NotNil(t, cond)
	assert.Equal(t, lifecycle.ReasonRuntimeNotFound, cond.Reason)
	assert.Contains(t, got.Status.Message, `"missing"`)
}

func TestSchedulerCancelsRunAskedToCancelWhilePending(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRuntime("bash", 1)
	e.candidatePod("a", "bash")
	e.createRun("r", "bash", func(r *v1alpha1.Run) { r.Spec.CancelRequested = true })
	e.start(1)

	e.waitForWrites("r", 1)
	e.settle()
	writes := e.writesOf("r")
	require.Len(t, writes, 1, "cancelled, never bound: %v", describe(writes))
	got := runOf(t, writes[0])
	assert.Equal(t, lifecycle.Cancelled, got.Status.Phase)
	assert.NotNil(t, got.Status.CompletionTime)
	assert.Empty(t, got.Status.AssignedPod)
	cond := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionCompleted)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, lifecycle.ReasonCancelled, cond.Reason)
}

func TestSchedulerRespectsRetryBackoff(t *testing.T) {
	e := newSchedulerEnv(t)
	// Whole seconds: the condition's transition time is stored as such.
	now := time.Now().Truncate(time.Second)
	clock := testingclock.NewFakeClock(now)
	e.createRuntime("bash", 1)
	a := e.candidatePod("a", "bash")
	// Attempt 1 ran on a and failed; runtimed sent the Run back to Pending.
	e.createRun("r", "bash")
	e.setStatus("r", bindTo(a))
	e.setStatus("r", toRunning)
	run := e.setStatus("r", func(s *v1alpha1.RunStatus) {
		s.Phase = lifecycle.Pending
		s.Attempt = 2
		s.AssignedPod, s.AssignedPodUID = "", ""
		s.ScheduledTime, s.StartTime = nil, nil
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonRetrying,
			Message: "attempt 1 of 2 failed", LastTransitionTime: metav1.NewTime(now),
		})
	})
	// Attempt 1 failed, so the default backoff is one second.
	require.Equal(t, now.Add(time.Second), retry.NotBefore(run))
	e.start(1, scheduler.WithClock(clock))

	e.settle()
	assert.Empty(t, e.writesOf("r"), "not bound before retry.NotBefore")

	clock.Step(2 * time.Second)
	writes := e.waitForWrites("r", 1)
	got := runOf(t, writes[0])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	assert.Equal(t, a.Name, got.Status.AssignedPod)
	assert.Equal(t, int32(2), got.Status.Attempt)
}

// TestSchedulerReleasingCapacityWakesPendingRunsOfThatRuntime watches which
// Runs the scheduler examines, through its attempts metric, as capacity is
// held and released. The scheduler's clock stands still, so its periodic
// re-check (30s after a Run was last examined) never comes: every Run
// examined or bound here was woken.
func TestSchedulerReleasingCapacityWakesPendingRunsOfThatRuntime(t *testing.T) {
	e := newSchedulerEnv(t)
	clock := testingclock.NewFakeClock(time.Now())
	e.createRuntime("bash", 1)
	e.createRuntime("python", 1)
	a := e.candidatePod("a", "bash")
	e.runningOn("running", "bash", a)
	e.createRun("waiting", "bash")
	e.createRun("other", "python")
	e.start(1, scheduler.WithClock(clock))

	for _, name := range []string{"waiting", "other"} {
		got := runOf(t, e.waitForWrites(name, 1)[0])
		assert.Equal(t, lifecycle.ReasonNoCapacity, scheduledReason(got), name)
	}
	e.settle()
	noCapacity := schedulingAttempts(t, "no_capacity")
	examined := func() float64 { return schedulingAttempts(t, "no_capacity") - noCapacity }

	e.update("running", func(r *v1alpha1.Run) { r.Labels = map[string]string{"touched": "yes"} })
	e.settle()
	assert.Zero(t, examined(), "no capacity released, nobody woken")

	const finalizer = "e2e.kruntimes.io/hold"
	e.update("running", func(r *v1alpha1.Run) { r.Finalizers = append(r.Finalizers, finalizer) })
	require.NoError(t, e.client.KruntimesV1alpha1().Runs(e.ns).Delete(e.ctx, "running", metav1.DeleteOptions{}))
	e.settle()
	assert.Zero(t, examined(), "a deleting Run with a finalizer still holds its slot")
	assert.Len(t, e.writesOf("waiting"), 1)

	// Its deletion releases the slot and wakes the Pending Runs of bash
	// only.
	e.update("running", func(r *v1alpha1.Run) { r.Finalizers = nil })
	got := runOf(t, e.waitForWrites("waiting", 2)[1])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	assert.Equal(t, a.Name, got.Status.AssignedPod)
	e.settle()
	assert.Zero(t, examined(), "the python Run was not woken")

	// A Run finishing releases its slot too.
	e.createRun("next", "bash")
	e.waitForWrites("next", 1)
	e.settle()
	noCapacity = schedulingAttempts(t, "no_capacity")
	e.finish("waiting")
	got = runOf(t, e.waitForWrites("next", 2)[1])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	assert.Equal(t, a.Name, got.Status.AssignedPod)
	e.settle()
	assert.Zero(t, examined(), "the python Run was not woken")
	assert.Len(t, e.writesOf("other"), 1)
}

// TestSchedulerPlacesOldestFirst releases one slot at a time while several
// Runs wait for it: each slot goes to the oldest waiting Run, including
// over a Run created just before the slot was released.
func TestSchedulerPlacesOldestFirst(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRuntime("bash", 1)
	a := e.candidatePod("a", "bash")
	e.runningOn("running", "bash", a)
	e.start(1)
	// Created one after the other while the scheduler runs, so that within
	// one second (creationTimestamp's precision) it sees them in this order.
	order := []string{"w1", "w2", "w3", "w4", "w5"}
	for _, name := range order {
		e.createRun(name, "bash")
		got := runOf(t, e.waitForWrites(name, 1)[0])
		require.Equal(t, lifecycle.ReasonNoCapacity, scheduledReason(got), name)
	}

	holder := "running"
	for i, name := range order {
		if i == 2 {
			// A Run created now is younger than every waiting one.
			e.createRun("late", "bash")
			e.waitForWrites("late", 1)
			order = append(order, "late")
		}
		e.finish(holder)
		got := runOf(t, e.waitForWrites(name, 2)[1])
		assert.Equal(t, lifecycle.Scheduled, got.Status.Phase, "%s is the oldest waiting Run", name)
		e.settle()
		for _, younger := range order[i+1:] {
			assert.Len(t, e.writesOf(younger), 1, "%s overtook %s: %v", younger, name, describe(e.writesOf(younger)))
		}
		holder = name
	}
	e.finish(holder)
	got := runOf(t, e.waitForWrites("late", 2)[1])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
}

// TestSchedulerStartingUpPlacesOldestFirst frees a slot while the
// scheduler is down and three Runs created a second apart wait for it. On
// start the informer lists them in an order of its own, and each is synced
// in that order; the slot still goes to the oldest. Their names sort the
// oldest in the middle, so neither key order nor its reverse is age order.
func TestSchedulerStartingUpPlacesOldestFirst(t *testing.T) {
	e := newSchedulerEnv(t)
	e.createRuntime("bash", 1)
	a := e.candidatePod("a", "bash")
	running := e.runningOn("running", "bash", a)
	var created []*v1alpha1.Run
	for _, name := range []string{"m-oldest", "a-younger", "z-youngest"} {
		if len(created) > 0 {
			// creationTimestamp has whole seconds: wait for the next one.
			last := created[len(created)-1].CreationTimestamp.Time
			require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
				return time.Now().Truncate(time.Second).After(last), nil
			}))
		}
		created = append(created, e.createRun(name, "bash"))
	}
	require.True(t, created[0].CreationTimestamp.Before(&created[1].CreationTimestamp))
	require.True(t, created[1].CreationTimestamp.Before(&created[2].CreationTimestamp))
	finishRun(e.ctx, t, e.client, running)
	e.start(1)

	// On a loaded machine the first binding may conflict (the informer's
	// copy was stale); the retry keeps the Run's place in line. What must
	// hold: the oldest, and only the oldest, binds, once, and is never
	// told to wait.
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
		for _, w := range e.writesOf("m-oldest") {
			if w.Applied() {
				return true, nil
			}
		}
		return false, nil
	}), "the oldest Run is bound: %v", describe(e.writes.All()))
	e.settle()
	var bindings []apiWrite
	for _, w := range e.writesOf("m-oldest") {
		if !w.Applied() {
			assert.Equal(t, 409, w.Code, "only a stale copy may be refused: %v", describe(e.writesOf("m-oldest")))
			continue
		}
		bindings = append(bindings, w)
	}
	require.Len(t, bindings, 1, "one write applied, the binding: %v", describe(e.writesOf("m-oldest")))
	got := runOf(t, bindings[0])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase, "the oldest was never told to wait")
	assert.Equal(t, a.Name, got.Status.AssignedPod)
	for _, name := range []string{"a-younger", "z-youngest"} {
		for _, w := range e.writesOf(name) {
			if w.Applied() {
				assert.Equal(t, lifecycle.ReasonNoCapacity, scheduledReason(runOf(t, w)), "%s took the slot: %v", name, describe(e.writes.All()))
			}
		}
	}
}

// TestSchedulerRunThatCannotBindDoesNotHoldUpTheLine has the server refuse
// every binding of the oldest waiting Run (403, as an authorizer denying
// it would). The slot it is handed goes to the next Run in line, without
// waiting for the periodic re-check, and the refused Run binds once the
// server lets it and its backoff is over. The scheduler's clock moves only
// when the test steps it, so the periodic re-check (30s) never comes.
func TestSchedulerRunThatCannotBindDoesNotHoldUpTheLine(t *testing.T) {
	e := newSchedulerEnv(t)
	clock := testingclock.NewFakeClock(time.Now())
	e.createRuntime("bash", 1)
	a := e.candidatePod("a", "bash")
	running := e.runningOn("running", "bash", a)
	var refusing atomic.Bool
	refusing.Store(true)
	e.writes.refuse = func(w apiWrite) bool {
		var run v1alpha1.Run
		return refusing.Load() && w.Name == "stuck" && json.Unmarshal(w.Body, &run) == nil &&
			run.Status.Phase == lifecycle.Scheduled
	}
	e.start(1, scheduler.WithClock(clock))
	for _, name := range []string{"stuck", "next"} {
		e.createRun(name, "bash")
		require.Equal(t, lifecycle.ReasonNoCapacity, scheduledReason(runOf(t, e.waitForWrites(name, 1)[0])), name)
	}

	finishRun(e.ctx, t, e.client, running)
	refused := e.waitForWrites("stuck", 2)[1]
	assert.Equal(t, 403, refused.Code, "the oldest Run was handed the slot")
	got := runOf(t, e.waitForWrites("next", 2)[1])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase, "the next Run took the slot the refused one could not")
	assert.Equal(t, a.Name, got.Status.AssignedPod)

	// The slot next releases is not handed to the refused Run: it waits out
	// its backoff, out of line.
	refusing.Store(false)
	e.finish("next")
	e.settle()
	require.Len(t, e.writesOf("stuck"), 2, "refused once, then waiting out its backoff: %v", describe(e.writesOf("stuck")))
	// One worker requeued the refused Run with its backoff (5ms after one
	// refusal) before it took next's key, so that is already waiting to be
	// crossed; a second is well under the periodic re-check.
	clock.Step(time.Second)
	require.NoError(t, framework.Poll(e.ctx, 50*time.Millisecond, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		run, err := e.client.KruntimesV1alpha1().Runs(e.ns).Get(ctx, "stuck", metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		return run.Status.Phase == lifecycle.Scheduled, nil
	}), "the refused Run binds once the server accepts it: %v", describe(e.writesOf("stuck")))
}

// TestSchedulerTakesNamespacesInTurn starts the scheduler with another
// namespace's 1,000 Runs queued ahead of this namespace's one: those wait
// for a Runtime with no Pods, this one has a free slot. The namespaces
// take turns, so the one Run is bound after a few of the 1,000 were
// tried, not after all of them.
func TestSchedulerTakesNamespacesInTurn(t *testing.T) {
	e := newSchedulerEnv(t)
	// A namespace of the test's own kruntimes-apiserver only, sorting
	// before e.ns: the informer's initial list delivers its Runs first.
	const other = "aaa-backlog"
	e.allNamespaces = true
	e.createRuntime("bash", 1)
	e.candidatePod("a", "bash")
	_, err := e.client.KruntimesV1alpha1().Runtimes(other).Create(e.ctx, newTestRuntime("bash", 0, 1), metav1.CreateOptions{})
	require.NoError(t, err)
	const backlog = 1000
	createInParallel(t, e.ctx, backlog, func(ctx context.Context, i int) error {
		_, err := e.client.KruntimesV1alpha1().Runs(other).Create(ctx, newTaskRun(fmt.Sprintf("q%04d", i), "bash"), metav1.CreateOptions{})
		return err
	})
	e.createRun("mine", "bash")
	e.start(1)

	got := runOf(t, e.waitForWrites("mine", 1)[0])
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	ahead := 0
	for _, w := range e.writes.All() {
		if w.Name == "mine" {
			break
		}
		if strings.HasPrefix(w.Name, "q") {
			ahead++
		}
	}
	t.Logf("the one Run was bound after %d writes of the other namespace's %d queued Runs", ahead, backlog)
	assert.LessOrEqual(t, ahead, 10, "namespaces take turns")
	// Every one of the 1,000 is still noted, once.
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, framework.PodTimeout, true, func(context.Context) (bool, error) {
		n := 0
		for _, w := range e.writes.All() {
			if strings.HasPrefix(w.Name, "q") {
				n++
			}
		}
		return n >= backlog, nil
	}))
}

// createInParallel calls create for 0..n-1 from a few goroutines, taking
// the indexes in order, so the objects are created roughly in index order.
func createInParallel(t *testing.T, ctx context.Context, n int, create func(ctx context.Context, i int) error) {
	t.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := create(ctx, i); err != nil {
					errs <- fmt.Errorf("creating #%d: %w", i, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
