package scheduler

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned/fake"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

// queueEnv is a Scheduler over informers whose stores the test fills by
// hand and never starts: the test delivers each event to the scheduler's
// handler itself and runs its workers' steps one at a time, on a fake
// clock, so what an event woke is read off the queues exactly.
type queueEnv struct {
	t     *testing.T
	ctx   context.Context
	s     *Scheduler
	clock *testingclock.FakeClock
	runs  cache.Indexer
	rts   cache.Indexer
	pods  cache.Indexer
	rsets cache.Indexer
	deps  cache.Indexer
	lease cache.Indexer
	kr    *fake.Clientset
}

func newQueueEnv(t *testing.T) *queueEnv {
	_, ctx := ktesting.NewTestContext(t)
	kr := fake.NewSimpleClientset()
	kube := kubefake.NewSimpleClientset()
	krInformers := externalversions.NewSharedInformerFactory(kr, 0)
	kubeInformers := kubeinformers.NewSharedInformerFactory(kube, 0)
	clock := testingclock.NewFakeClock(testNow)
	runInformer := krInformers.Kruntimes().V1alpha1().Runs()
	rtInformer := krInformers.Kruntimes().V1alpha1().Runtimes()
	podInformer := kubeInformers.Core().V1().Pods()
	rsInformer := kubeInformers.Apps().V1().ReplicaSets()
	deployInformer := kubeInformers.Apps().V1().Deployments()
	leaseInformer := kubeInformers.Coordination().V1().Leases()
	s, err := New(ctx, runInformer, rtInformer, podInformer, rsInformer, deployInformer, leaseInformer, kr, record.NewFakeRecorder(1000), WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(func() {
		s.queue.ShutDown()
		s.wakes.ShutDown()
		s.checks.ShutDown()
		s.notes.ShutDown()
	})
	return &queueEnv{
		t: t, ctx: ctx, s: s, clock: clock, kr: kr,
		runs:  runInformer.Informer().GetIndexer(),
		rts:   rtInformer.Informer().GetIndexer(),
		pods:  podInformer.Informer().GetIndexer(),
		rsets: rsInformer.Informer().GetIndexer(),
		deps:  deployInformer.Informer().GetIndexer(),
		lease: leaseInformer.Informer().GetIndexer(),
	}
}

func (e *queueEnv) runtime(name string, capacity int32) *v1alpha1.Runtime {
	rt := &v1alpha1.Runtime{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: runtimeUID(name)},
		Spec: v1alpha1.RuntimeSpec{Capacity: v1alpha1.RuntimeCapacity{Runs: capacity}}}
	require.NoError(e.t, e.rts.Add(rt))
	e.s.runtimeChanged(rt)
	return rt
}

// pod adds a candidate Pod of runtime with a fresh heartbeat, a Pod of
// the runtime's Deployment.
func (e *queueEnv) pod(name, runtime string) {
	p := readyPod(name)
	p.Labels[lifecycle.LabelRuntime] = runtime
	d, rs := ownerChain(p, runtime)
	require.NoError(e.t, e.deps.Add(d))
	require.NoError(e.t, e.rsets.Add(rs))
	e.add(p)
}

// add adds a Pod with a fresh heartbeat as is.
func (e *queueEnv) add(p *corev1.Pod) {
	require.NoError(e.t, e.lease.Add(heartbeat(p, e.clock.Now())))
	require.NoError(e.t, e.pods.Add(p))
	e.s.podChanged(p)
}

// run adds a Pending Run of runtime in namespace, created i seconds after
// testNow, as the informer would deliver its creation.
func (e *queueEnv) run(namespace, name, runtime string, i int, mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	r := &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + namespace + "-" + name),
			CreationTimestamp: metav1.NewTime(testNow.Add(time.Duration(i) * time.Second)), ResourceVersion: "1"},
		Spec:   v1alpha1.RunSpec{Runtime: runtime},
		Status: v1alpha1.RunStatus{Phase: lifecycle.Pending},
	}
	for _, m := range mutate {
		m(r)
	}
	require.NoError(e.t, e.kr.Tracker().Add(r.DeepCopy()))
	require.NoError(e.t, e.runs.Add(r))
	e.s.addRun(r)
	return r
}

// change replaces the informer's copy of a Run and delivers the update.
func (e *queueEnv) change(old *v1alpha1.Run, mutate func(*v1alpha1.Run)) *v1alpha1.Run {
	cur := old.DeepCopy()
	mutate(cur)
	require.NoError(e.t, e.runs.Update(cur))
	e.s.updateRun(old, cur)
	return cur
}

// holding makes a Run of runtime that holds a slot of Pod name.
func holding(pod string) func(*v1alpha1.Run) {
	return func(r *v1alpha1.Run) {
		r.Status.Phase = lifecycle.Running
		r.Status.AssignedPod, r.Status.AssignedPodUID = pod, types.UID("uid-"+pod)
	}
}

// drain runs the wake worker's and the scheduling workers' steps until
// both queues are empty, and returns the keys the scheduling workers
// took, in order.
func (e *queueEnv) drain() []string {
	var tried []string
	for e.s.wakes.Len() > 0 || e.s.queue.Len() > 0 {
		if e.s.wakes.Len() > 0 {
			key, _ := e.s.wakes.Get()
			ns, rt, _ := cutKey(key)
			e.s.fillFreeSlots(ns, rt)
			e.s.wakes.Done(key)
			continue
		}
		key, _ := e.s.queue.Get()
		tried = append(tried, key)
		e.s.process(e.ctx, key)
	}
	return tried
}

// woken delivers the pending wake-ups and returns the keys they queued,
// without trying them.
func (e *queueEnv) woken() []string {
	for e.s.wakes.Len() > 0 {
		key, _ := e.s.wakes.Get()
		ns, rt, _ := cutKey(key)
		e.s.fillFreeSlots(ns, rt)
		e.s.wakes.Done(key)
	}
	var keys []string
	for e.s.queue.Len() > 0 {
		key, _ := e.s.queue.Get()
		keys = append(keys, key)
		e.s.queue.Done(key)
	}
	for _, key := range keys {
		e.s.queue.Add(key)
	}
	return keys
}

func cutKey(key string) (string, string, bool) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	return ns, name, err == nil
}

func (e *queueEnv) phase(namespace, name string) lifecycle.Phase {
	obj, err := e.kr.Tracker().Get(v1alpha1.SchemeGroupVersion.WithResource("runs"), namespace, name)
	require.NoError(e.t, err)
	return obj.(*v1alpha1.Run).Status.Phase
}

// TestParkedRunsWakeOnlyOnEventsThatCanPlaceThem parks five Runs behind a
// full Pod and one Run of another Runtime, then delivers events: none
// unrelated to a slot of bash wakes anything, and a released slot wakes
// exactly one Run of bash, the oldest.
func TestParkedRunsWakeOnlyOnEventsThatCanPlaceThem(t *testing.T) {
	e := newQueueEnv(t)
	e.runtime("bash", 1)
	e.runtime("python", 1)
	e.pod("a", "bash")
	running := e.run("ns", "running", "bash", 0, holding("a"))
	for i := 5; i >= 1; i-- { // created in age order, listed youngest first
		e.run("ns", fmt.Sprintf("w%d", i), "bash", i)
	}
	e.run("ns", "py", "python", 1)
	e.drain()
	parked, trying := e.s.lines.depth("ns/bash")
	assert.Equal(t, [2]int{5, 0}, [2]int{parked, trying}, "every bash Run parked")
	parked, _ = e.s.lines.depth("ns/python")
	assert.Equal(t, 1, parked)

	// Unrelated events.
	running = e.change(running, func(r *v1alpha1.Run) { r.Labels = map[string]string{"touched": "yes"} })
	assert.Empty(t, e.woken(), "a label change of a Running Run")
	w3, err := e.s.runs.Runs("ns").Get("w3")
	require.NoError(t, err)
	e.change(w3, func(r *v1alpha1.Run) { r.Labels = map[string]string{"touched": "yes"} })
	assert.Empty(t, e.woken(), "a label change of a parked Run")
	p, _, err := e.pods.GetByKey("ns/a")
	require.NoError(t, err)
	lease, _, err := e.lease.GetByKey("ns/a")
	require.NoError(t, err)
	e.s.leaseUpdated(lease, lease)
	assert.Empty(t, e.woken(), "a renewal of a fresh heartbeat")
	e.s.podUpdated(p, p)
	assert.Empty(t, e.woken(), "a Pod status update that changes no candidacy")
	e.pod("b", "python")
	assert.Equal(t, []string{"ns/py"}, e.woken(), "a python Pod wakes the python Run only")
	e.drain()
	assert.Equal(t, lifecycle.Scheduled, e.phase("ns", "py"))
	parked, _ = e.s.lines.depth("ns/bash")
	assert.Equal(t, 5, parked)

	// A released slot wakes exactly one Run of bash: the oldest.
	e.change(running, func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Succeeded })
	assert.Equal(t, []string{"ns/w1"}, e.woken())
	tried := e.drain()
	assert.Equal(t, []string{"ns/w1"}, tried)
	assert.Equal(t, lifecycle.Scheduled, e.phase("ns", "w1"))
	parked, _ = e.s.lines.depth("ns/bash")
	assert.Equal(t, 4, parked)
	assert.Equal(t, 0, e.s.checks.Len(), "the clock stood still: no recheck came")
}

// TestStartupGivesTheSlotToTheOldest lists three Runs youngest first with
// one free slot: the first ones tried leave it to the oldest.
func TestStartupGivesTheSlotToTheOldest(t *testing.T) {
	e := newQueueEnv(t)
	e.runtime("bash", 1)
	e.pod("a", "bash")
	e.run("ns", "z-youngest", "bash", 3)
	e.run("ns", "a-younger", "bash", 2)
	e.run("ns", "m-oldest", "bash", 1)
	e.drain()
	assert.Equal(t, lifecycle.Scheduled, e.phase("ns", "m-oldest"))
	assert.Equal(t, lifecycle.Pending, e.phase("ns", "a-younger"))
	assert.Equal(t, lifecycle.Pending, e.phase("ns", "z-youngest"))
}

// TestMissingRuntimeWakesOnItsCreation parks Runs of a missing Runtime; a
// released slot of another Runtime wakes none of them, creating theirs
// wakes them all, oldest first, and places as many as it has slots.
func TestMissingRuntimeWakesOnItsCreation(t *testing.T) {
	e := newQueueEnv(t)
	e.runtime("python", 1)
	e.pod("p", "python")
	pyRun := e.run("ns", "py", "python", 0)
	for i := 1; i <= 4; i++ {
		e.run("other", fmt.Sprintf("r%d", i), "late", i)
	}
	e.drain()
	assert.Equal(t, lifecycle.Scheduled, e.phase("ns", "py"))
	parked, _ := e.s.lines.depth("other/late")
	assert.Equal(t, 4, parked)
	assert.Equal(t, 4.0, pendingRunsValue(t, "other", missingRuntime))

	py, err := e.s.runs.Runs("ns").Get(pyRun.Name)
	require.NoError(t, err)
	e.change(py, func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Succeeded })
	assert.Empty(t, e.woken())

	rt := &v1alpha1.Runtime{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "other", UID: "rt-late"},
		Spec: v1alpha1.RuntimeSpec{Capacity: v1alpha1.RuntimeCapacity{Runs: 2}}}
	require.NoError(t, e.rts.Add(rt))
	e.s.runtimeChanged(rt)
	assert.Equal(t, []string{"other/r1", "other/r2", "other/r3", "other/r4"}, e.woken())
	e.drain()
	assert.Equal(t, 4.0, pendingRunsValue(t, "other", "late"))
	assert.Zero(t, pendingRunsValue(t, "other", missingRuntime))
	p := readyPod("l")
	p.Namespace, p.Labels[lifecycle.LabelRuntime] = "other", "late"
	d, rs := ownerChain(p, "late")
	require.NoError(t, e.deps.Add(d))
	require.NoError(t, e.rsets.Add(rs))
	e.add(p)
	assert.Equal(t, []string{"other/r1", "other/r2"}, e.woken(), "two slots, two Runs")
	e.drain()
	for i, want := range []lifecycle.Phase{lifecycle.Scheduled, lifecycle.Scheduled, lifecycle.Pending, lifecycle.Pending} {
		assert.Equal(t, want, e.phase("other", fmt.Sprintf("r%d", i+1)), "r%d", i+1)
	}
}

func pendingRunsValue(t *testing.T, namespace, runtime string) float64 {
	t.Helper()
	v, err := testutil.GetGaugeMetricValue(pendingRuns.WithLabelValues(namespace, runtime))
	require.NoError(t, err)
	return v
}

// TestRecheckCatchesALapsedReservation: a reservation lapses without an
// event (here, a binding the informer never showed), and the parked
// Runtime's recheck hands the slot on once its time comes.
func TestRecheckCatchesALapsedReservation(t *testing.T) {
	e := newQueueEnv(t)
	e.runtime("bash", 1)
	e.pod("a", "bash")
	e.run("ns", "w1", "bash", 1)
	e.run("ns", "w2", "bash", 2)
	e.drain()
	require.Equal(t, lifecycle.Scheduled, e.phase("ns", "w1"))
	parked, _ := e.s.lines.depth("ns/bash")
	require.Equal(t, 1, parked)

	// Renewals of a fresh heartbeat make no wake-up: write one to the
	// informer's store without delivering it.
	e.clock.Step(assumeTTL - 5*time.Second)
	p, _, err := e.pods.GetByKey("ns/a")
	require.NoError(t, err)
	require.NoError(t, e.lease.Update(heartbeat(p.(*corev1.Pod), e.clock.Now())))
	assert.Empty(t, e.woken())
	assert.Zero(t, e.s.checks.Len(), "not due yet")
	e.clock.Step(parkedRecheck - assumeTTL + 6*time.Second)
	require.Eventually(t, func() bool { return e.s.checks.Len() == 1 }, 5*time.Second, 10*time.Millisecond)
	key, _ := e.s.checks.Get()
	ns, rt, _ := cutKey(key)
	e.s.fillFreeSlots(ns, rt)
	e.s.checks.Done(key)
	assert.Equal(t, []string{"ns/w2"}, e.woken(), "the lapsed slot goes to the parked Run")
}

func TestRoundRobinTakesNamespacesInTurn(t *testing.T) {
	var depth int
	r := newRoundRobin(func(n int) { depth = n })
	for i := range 1000 {
		r.Push(fmt.Sprintf("a/r%d", i))
	}
	r.Push("b/only")
	r.Push("c/one")
	r.Push("c/two")
	assert.Equal(t, 1003, depth)
	var got []string
	for range 6 {
		got = append(got, r.Pop())
	}
	assert.Equal(t, []string{"a/r0", "b/only", "c/one", "a/r1", "c/two", "a/r2"}, got)
	for r.Len() > 0 {
		got = append(got, r.Pop())
	}
	assert.Len(t, got, 1003)
	assert.Equal(t, "a/r999", got[len(got)-1], "first in, first out within a namespace")
	assert.Zero(t, depth)
}

// TestPodNotOfTheRuntimesDeploymentGetsNoRun offers a Ready Pod with the
// Runtime's label and a fresh heartbeat but no place in the Runtime's
// Deployment, and one of a ReplicaSet whose Deployment has the Runtime's
// Deployment's name but no owner: the Run waits, saying why, and goes to
// the second once its Deployment is the Runtime's.
func TestPodNotOfTheRuntimesDeploymentGetsNoRun(t *testing.T) {
	e := newQueueEnv(t)
	e.runtime("bash", 4)
	impostor := readyPod("impostor")
	e.add(impostor)
	// One that names the Runtime's Deployment, created by someone else.
	d, rs := ownerChain(readyPod("x"), "bash")
	d.OwnerReferences = nil
	require.NoError(t, e.deps.Add(d))
	require.NoError(t, e.rsets.Add(rs))
	lookalike := readyPod("lookalike")
	lookalike.Labels = maps.Clone(rs.Spec.Template.Labels) // made from the template
	lookalike.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
	e.add(lookalike)
	run := e.run("ns", "w1", "bash", 1)
	e.drain()
	assert.Equal(t, lifecycle.Pending, e.phase("ns", "w1"))
	p, err := e.s.place(run)
	require.NoError(t, err)
	assert.Nil(t, p.pod)
	assert.Contains(t, p.message, "of 2 Pods, 0 are full (capacity 4 Runs per Pod), 2 not a Pod of the Runtime's Deployment")

	// The Deployment turns out the Runtime's (as if the runtime
	// controller's had been created in its place): its arrival wakes the
	// waiting Run, and the lookalike is a Pod of the Runtime now.
	require.NoError(t, e.deps.Delete(d))
	d, _ = ownerChain(lookalike.DeepCopy(), "bash")
	require.NoError(t, e.deps.Add(d))
	e.s.ownerAdded(d)
	assert.Equal(t, []string{"ns/w1"}, e.woken())
	e.drain()
	obj, err := e.kr.Tracker().Get(v1alpha1.SchemeGroupVersion.WithResource("runs"), "ns", "w1")
	require.NoError(t, err)
	st := obj.(*v1alpha1.Run).Status
	assert.Equal(t, lifecycle.Scheduled, st.Phase)
	assert.Equal(t, "lookalike", st.AssignedPod)
}
