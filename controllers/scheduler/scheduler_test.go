package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned/fake"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

// fixture is a Scheduler over informers that are never started: tests put
// objects straight into their indexers, as if the informers had seen them.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	s        *Scheduler
	client   *fake.Clientset
	clock    *testingclock.FakeClock
	runs     cache.Indexer
	runtimes cache.Indexer
	pods     cache.Indexer
	leases   cache.Indexer
}

func newFixture(t *testing.T) *fixture {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	kube := kubefake.NewClientset()
	factory := externalversions.NewSharedInformerFactory(client, 0)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	runInformer := factory.Kruntimes().V1alpha1().Runs()
	runtimeInformer := factory.Kruntimes().V1alpha1().Runtimes()
	podInformer := kubeFactory.Core().V1().Pods()
	leaseInformer := kubeFactory.Coordination().V1().Leases()
	s, err := New(ctx, runInformer, runtimeInformer, podInformer, leaseInformer, client, record.NewFakeRecorder(100))
	require.NoError(t, err)
	t.Cleanup(s.queue.ShutDown)
	f := &fixture{
		t: t, ctx: ctx, s: s, client: client,
		clock:    testingclock.NewFakeClock(testNow),
		runs:     runInformer.Informer().GetIndexer(),
		runtimes: runtimeInformer.Informer().GetIndexer(),
		pods:     podInformer.Informer().GetIndexer(),
		leases:   leaseInformer.Informer().GetIndexer(),
	}
	s.clock = f.clock
	return f
}

func (f *fixture) addRuntime(name string, capacity int32) {
	require.NoError(f.t, f.runtimes.Add(&v1alpha1.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       v1alpha1.RuntimeSpec{Capacity: v1alpha1.RuntimeCapacity{Runs: capacity}},
	}))
}

// addCandidate adds a Ready Pod of Runtime bash with a fresh heartbeat.
func (f *fixture) addCandidate(name string) *corev1.Pod {
	pod := readyPod(name)
	require.NoError(f.t, f.pods.Add(pod))
	require.NoError(f.t, f.leases.Add(heartbeat(pod, testNow.Add(-time.Second))))
	return pod
}

// addRun puts run into the informer and the fake API.
func (f *fixture) addRun(run *v1alpha1.Run) {
	require.NoError(f.t, f.runs.Add(run))
	require.NoError(f.t, f.client.Tracker().Add(run))
}

func pendingRun(name string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: ktypes.UID("uid-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(testNow.Add(-time.Second))},
		Spec:   v1alpha1.RunSpec{Runtime: "bash"},
		Status: v1alpha1.RunStatus{Phase: lifecycle.Pending, Attempt: 1},
	}
}

// statusUpdates returns the Runs written through runs/status.
func (f *fixture) statusUpdates() []*v1alpha1.Run {
	var runs []*v1alpha1.Run
	for _, a := range f.client.Actions() {
		if u, ok := a.(clienttesting.UpdateAction); ok && a.GetSubresource() == "status" {
			runs = append(runs, u.GetObject().(*v1alpha1.Run))
		}
	}
	return runs
}

func (f *fixture) sync(name string) error {
	return f.s.sync(f.ctx, "ns/"+name)
}

func TestSyncBindsToLeastLoadedPod(t *testing.T) {
	f := newFixture(t)
	f.addRuntime("bash", 2)
	a := f.addCandidate("a")
	f.addCandidate("b")
	f.addRun(assignedRun("busy", a, lifecycle.Running))
	f.addRun(pendingRun("r"))

	require.NoError(t, f.sync("r"))
	updates := f.statusUpdates()
	require.Len(t, updates, 1)
	got := updates[0]
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
	assert.Equal(t, "b", got.Status.AssignedPod)
	assert.Equal(t, "uid-b", string(got.Status.AssignedPodUID))
	assert.NotNil(t, got.Status.ScheduledTime)
	assert.Equal(t, "1", got.ResourceVersion, "binds with the Run's resourceVersion")
	cond := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionScheduled)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
}

func TestAssumedReservationPreventsDoubleBooking(t *testing.T) {
	f := newFixture(t)
	f.addRuntime("bash", 1)
	f.addCandidate("a")
	f.addRun(pendingRun("first"))
	f.addRun(pendingRun("second"))

	require.NoError(t, f.sync("first"))
	// The informer has not seen the binding yet; the reservation holds the slot.
	require.NoError(t, f.sync("second"))
	updates := f.statusUpdates()
	require.Len(t, updates, 2)
	assert.Equal(t, lifecycle.Scheduled, updates[0].Status.Phase)
	assert.Equal(t, lifecycle.Pending, updates[1].Status.Phase)
	cond := apimeta.FindStatusCondition(updates[1].Status.Conditions, lifecycle.ConditionScheduled)
	require.NotNil(t, cond)
	assert.Equal(t, lifecycle.ReasonNoCapacity, cond.Reason)
	assert.Equal(t, updates[1].Status.Message, cond.Message)

	// Once the informer shows the first Run finished, the slot is free.
	done := updates[0].DeepCopy()
	done.Status.Phase = lifecycle.Succeeded
	require.NoError(t, f.runs.Update(done))
	f.s.observe(done)
	second := updates[1].DeepCopy()
	require.NoError(t, f.runs.Update(second))
	require.NoError(t, f.sync("second"))
	updates = f.statusUpdates()
	require.Len(t, updates, 3)
	assert.Equal(t, lifecycle.Scheduled, updates[2].Status.Phase)
}

func TestConflictReleasesReservationAndRetries(t *testing.T) {
	f := newFixture(t)
	f.addRuntime("bash", 1)
	a := f.addCandidate("a")
	f.addRun(pendingRun("r"))
	f.client.PrependReactor("update", "runs", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupName, Resource: "runs"}, "r", nil)
	})
	err := f.sync("r")
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err), "the conflict reaches the queue, which retries: %v", err)
	assert.Empty(t, f.s.assumed.reservedOn(a.UID, testNow), "a refused bind holds no slot")
}

func TestUnschedulableIsWrittenOnlyWhenItChanges(t *testing.T) {
	f := newFixture(t)
	f.addRuntime("bash", 1)
	f.addRun(pendingRun("r"))

	require.NoError(t, f.sync("r"))
	updates := f.statusUpdates()
	require.Len(t, updates, 1)
	assert.Contains(t, updates[0].Status.Message, "no Pods yet")

	require.NoError(t, f.runs.Update(updates[0]))
	f.clock.Step(time.Minute)
	require.NoError(t, f.sync("r"))
	assert.Len(t, f.statusUpdates(), 1, "nothing changed, nothing written")
}

func TestRunOfMissingRuntime(t *testing.T) {
	f := newFixture(t)
	f.addRun(pendingRun("r"))
	require.NoError(t, f.sync("r"))
	updates := f.statusUpdates()
	require.Len(t, updates, 1)
	cond := apimeta.FindStatusCondition(updates[0].Status.Conditions, lifecycle.ConditionScheduled)
	require.NotNil(t, cond)
	assert.Equal(t, lifecycle.ReasonRuntimeNotFound, cond.Reason)
	assert.Equal(t, lifecycle.Pending, updates[0].Status.Phase)
}

func TestCancelRequestedWhilePending(t *testing.T) {
	f := newFixture(t)
	f.addRuntime("bash", 1)
	f.addCandidate("a")
	run := pendingRun("r")
	run.Spec.CancelRequested = true
	f.addRun(run)

	require.NoError(t, f.sync("r"))
	updates := f.statusUpdates()
	require.Len(t, updates, 1)
	got := updates[0]
	assert.Equal(t, lifecycle.Cancelled, got.Status.Phase)
	assert.NotNil(t, got.Status.CompletionTime)
	assert.Empty(t, got.Status.AssignedPod)
	cond := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionCompleted)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, lifecycle.ReasonCancelled, cond.Reason)
}

func TestRetryBackoffIsRespected(t *testing.T) {
	f := newFixture(t)
	f.addRuntime("bash", 1)
	f.addCandidate("a")
	run := pendingRun("r")
	run.Status.Attempt = 2
	run.Status.Conditions = []metav1.Condition{{
		Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonRetrying,
		LastTransitionTime: metav1.NewTime(testNow),
	}}
	f.addRun(run)

	require.NoError(t, f.sync("r"))
	assert.Empty(t, f.statusUpdates(), "not bound before retry.NotBefore")

	// Attempt 1 failed, so the default backoff is one second.
	f.clock.Step(2 * time.Second)
	require.NoError(t, f.sync("r"))
	updates := f.statusUpdates()
	require.Len(t, updates, 1)
	assert.Equal(t, lifecycle.Scheduled, updates[0].Status.Phase)
}

func TestReleasingCapacityWakesPendingRunsOfThatRuntime(t *testing.T) {
	f := newFixture(t)
	pod := readyPod("a")
	waiting := pendingRun("waiting")
	other := pendingRun("other")
	other.Spec.Runtime = "python"
	require.NoError(t, f.runs.Add(waiting))
	require.NoError(t, f.runs.Add(other))

	running := assignedRun("running", pod, lifecycle.Running)
	done := running.DeepCopy()
	done.Status.Phase = lifecycle.Succeeded
	f.s.updateRun(running, done)
	require.Equal(t, 1, f.s.queue.Len())
	key, _ := f.s.queue.Get()
	assert.Equal(t, "ns/waiting", key)
	f.s.queue.Done(key)

	stillRunning := running.DeepCopy()
	stillRunning.Labels = map[string]string{"touched": "yes"}
	f.s.updateRun(running, stillRunning)
	assert.Equal(t, 0, f.s.queue.Len(), "no capacity released, nobody woken")

	deleting := running.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	deleting.Finalizers = []string{lifecycle.FinalizerRegistrationCleanup}
	f.s.updateRun(running, deleting)
	assert.Equal(t, 0, f.s.queue.Len(), "a deleting Run with a finalizer still holds its slot")
	f.s.deleteRun(deleting)
	assert.Equal(t, 1, f.s.queue.Len(), "its deletion releases it")
}
