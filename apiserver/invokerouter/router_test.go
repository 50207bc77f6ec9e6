package invokerouter

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/kubernetes/fake"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runregistry "kruntimes.io/kruntimes/registry/run"
)

// fakeRuns is a RunSource over a fixed set of Runs: it lists them, answers
// Get from them, and sends what a test adds to its watchers.
type fakeRuns struct {
	rest.TableConvertor

	mu       sync.Mutex
	runs     map[string]*kruntimes.Run
	watchers []*watch.RaceFreeFakeWatcher
}

func newFakeRuns(runs ...*kruntimes.Run) *fakeRuns {
	f := &fakeRuns{TableConvertor: rest.NewDefaultTableConvertor(kruntimes.Resource("runs")), runs: map[string]*kruntimes.Run{}}
	for _, run := range runs {
		f.runs[run.Namespace+"/"+run.Name] = run
	}
	return f
}

func (f *fakeRuns) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	run, ok := f.runs[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(kruntimes.Resource("runs"), name)
	}
	return run.DeepCopy(), nil
}

func (f *fakeRuns) NewList() runtime.Object { return &kruntimes.RunList{} }

func (f *fakeRuns) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := &kruntimes.RunList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, run := range f.runs {
		list.Items = append(list.Items, *run.DeepCopy())
	}
	return list, nil
}

func (f *fakeRuns) Watch(_ context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	if options.SendInitialEvents != nil {
		return nil, errors.New("streaming lists are not supported: list, then watch")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := watch.NewRaceFreeFake()
	f.watchers = append(f.watchers, w)
	return w, nil
}

// add stores run and sends it to the watchers.
func (f *fakeRuns) add(run *kruntimes.Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[run.Namespace+"/"+run.Name] = run
	for _, w := range f.watchers {
		w.Add(run.DeepCopy())
	}
}

// expireWatches ends every watch as the watch cache ends one that fell too
// far behind (410 Expired), which makes a reflector list again.
func (f *fakeRuns) expireWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watchers {
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		w.Stop()
	}
	f.watchers = nil
}

// startedAt is when the Runs of the tests started: a minute before the
// tests did.
var startedAt = time.Now().Add(-time.Minute).Truncate(time.Microsecond)

// functionRun is a Ready function Run on Pod pod-a, started at startedAt
// with an hour to live.
func functionRun(name string, mutate ...func(*kruntimes.Run)) *kruntimes.Run {
	started := metav1.NewMicroTime(startedAt)
	run := &kruntimes.Run{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), ResourceVersion: "1"},
		Spec: kruntimes.RunSpec{
			Runtime: "python",
			Mode:    kruntimes.RunMode{Function: &kruntimes.FunctionMode{Handler: "handler.handle"}},
			Env:     []kruntimes.EnvVar{{Name: "NOT", Value: "KEPT"}},
			Timeout: &metav1.Duration{Duration: time.Hour},
		},
		Status: kruntimes.RunStatus{
			Phase: lifecycle.Ready, Attempt: 2, StartTime: &started,
			AssignedPod: "pod-a", AssignedPodUID: "pod-a-uid",
			Conditions: []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Registered", Message: "not kept"}},
		},
	}
	for _, m := range mutate {
		m(run)
	}
	return run
}

func runtimePod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), Labels: map[string]string{lifecycle.LabelRuntime: "python"}},
		Status:     corev1.PodStatus{PodIP: "127.0.0.7"},
	}
	for _, m := range mutate {
		m(pod)
	}
	return pod
}

// startedRouter is a router over runs and pods whose cache synced.
func startedRouter(t *testing.T, runs *fakeRuns, pods ...runtime.Object) *Router {
	t.Helper()
	router := New(Config{Kube: fake.NewClientset(pods...), ClientTLS: &tls.Config{MinVersion: tls.VersionTLS13}})
	router.Start(t.Context(), runs)
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return router.cache.Load().synced(), nil
	})
	require.NoError(t, err, "the ownership cache syncs")
	return router
}

func TestRoute(t *testing.T) {
	deleted := metav1.Now()
	runs := newFakeRuns(
		functionRun("ready"),
		functionRun("no-timeout", func(r *kruntimes.Run) { r.Spec.Timeout = nil }),
		functionRun("registering", func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Running; r.Status.Conditions = nil }),
		functionRun("not-ready", func(r *kruntimes.Run) { r.Status.Conditions[0].Status = metav1.ConditionFalse }),
		functionRun("ended", func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Succeeded }),
		functionRun("deleting", func(r *kruntimes.Run) { r.DeletionTimestamp = &deleted }),
		functionRun("pod-gone", func(r *kruntimes.Run) { r.Status.AssignedPod = "pod-gone" }),
		functionRun("earlier-pod", func(r *kruntimes.Run) { r.Status.AssignedPodUID = "earlier-uid" }),
		functionRun("pod-deleting", func(r *kruntimes.Run) {
			r.Status.AssignedPod, r.Status.AssignedPodUID = "pod-deleting", "pod-deleting-uid"
		}),
		functionRun("pod-no-ip", func(r *kruntimes.Run) { r.Status.AssignedPod, r.Status.AssignedPodUID = "pod-no-ip", "pod-no-ip-uid" }),
		functionRun("task", func(r *kruntimes.Run) { r.Spec.Mode = kruntimes.RunMode{Task: &kruntimes.TaskMode{}} }),
		functionRun("relocating", func(r *kruntimes.Run) {
			r.Status.Phase, r.Status.Conditions = lifecycle.Pending, []metav1.Condition{
				{Type: lifecycle.ConditionReady, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonRelocating},
				{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonRelocating},
			}
		}),
		functionRun("no-runtime", func(r *kruntimes.Run) {
			r.Status.Phase, r.Status.Conditions = lifecycle.Pending, []metav1.Condition{
				{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonRuntimeNotFound}}
		}),
		functionRun("no-capacity", func(r *kruntimes.Run) {
			r.Status.Phase, r.Status.Conditions = lifecycle.Pending, []metav1.Condition{
				{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonNoCapacity}}
		}),
	)
	router := startedRouter(t, runs,
		runtimePod("pod-a"),
		runtimePod("pod-deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &deleted; p.Finalizers = []string{"hold"} }),
		runtimePod("pod-no-ip", func(p *corev1.Pod) { p.Status.PodIP = "" }),
	)

	cases := []struct {
		name string
		run  string
		uid  types.UID
		// code is the API error's; zero when the invocation is routed.
		code    int32
		message string
		// becomingReady: an invocation may wait for the Run (a 503 whose
		// Run is on its way to Ready, not parked).
		becomingReady bool
	}{
		{name: "a Ready function Run routes to its Pod", run: "ready"},
		{name: "the Run's own UID routes", run: "ready", uid: "ready-uid"},
		{name: "another UID is 404: the Run addressed is gone", run: "ready", uid: "earlier", code: 404},
		{name: "an unknown Run is 404", run: "unknown", code: 404},
		{name: "a task Run is 400", run: "task", code: 400, message: "Run ns/task is a task; only function Runs are invoked"},
		{name: "a task Run under another UID is 404", run: "task", uid: "earlier", code: 404},
		{name: "a Run still registering is 503", run: "registering", code: 503, message: "Run ns/registering is not Ready; retry shortly", becomingReady: true},
		{name: "a Run whose Ready condition is false is 503", run: "not-ready", code: 503, message: "Run ns/not-ready is not Ready; retry shortly", becomingReady: true},
		{name: "an ended Run is 409", run: "ended", code: 409, message: `Operation cannot be fulfilled on runs.kruntimes.io "ended": it ended (Succeeded) and is not invoked any more`},
		{name: "a Run being deleted is 409", run: "deleting", code: 409, message: `Operation cannot be fulfilled on runs.kruntimes.io "deleting": it is being deleted and is not invoked any more`},
		{name: "a Run whose Pod is gone is 503", run: "pod-gone", code: 503, message: "Run ns/pod-gone is assigned to Pod pod-gone, which is gone; retry shortly", becomingReady: true},
		{name: "a Run assigned to an earlier Pod of the name is 503", run: "earlier-pod", code: 503, message: "Run ns/earlier-pod is assigned to an earlier Pod of the name pod-a; retry shortly", becomingReady: true},
		{name: "a Run whose Pod is being deleted is 503", run: "pod-deleting", code: 503, message: "Run ns/pod-deleting is assigned to Pod pod-deleting, which is being deleted; retry shortly", becomingReady: true},
		{name: "a function relocating to another Pod is 503, becoming Ready", run: "relocating", code: 503, becomingReady: true},
		{name: "a Run parked for want of its Runtime is 503, not becoming Ready", run: "no-runtime", code: 503},
		{name: "a Run parked for want of a free slot is 503, not becoming Ready", run: "no-capacity", code: 503},
		{name: "a Run whose Pod has no IP is 503", run: "pod-no-ip", code: 503, message: "Run ns/pod-no-ip is assigned to Pod pod-no-ip, which has no IP; retry shortly", becomingReady: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			route, err := router.Route(t.Context(), "ns", tc.run, tc.uid)
			if tc.code != 0 {
				var status apierrors.APIStatus
				require.ErrorAs(t, err, &status)
				assert.Equal(t, tc.code, status.Status().Code)
				if tc.message != "" {
					assert.Equal(t, tc.message, status.Status().Message)
				}
				assert.Equal(t, tc.becomingReady, errors.Is(err, runtimedclient.ErrBecomingReady), "becoming Ready")
				assert.Nil(t, route)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, types.UID("ready-uid"), route.RunUID)
			assert.Equal(t, int32(2), route.Attempt)
			assert.Equal(t, types.UID("pod-a-uid"), route.PodUID)
			assert.Equal(t, startedAt.Add(time.Hour), route.Deadline, "the Run's spec.timeout from its start")
			assert.NotNil(t, route.Runtimed)
		})
	}

	t.Run("a Run without spec.timeout has no deadline", func(t *testing.T) {
		route, err := router.Route(t.Context(), "ns", "no-timeout", "")
		require.NoError(t, err)
		assert.True(t, route.Deadline.IsZero())
	})

	t.Run("a Run created after the cache synced routes once the watch brought it", func(t *testing.T) {
		runs.add(functionRun("later"))
		err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := router.Route(ctx, "ns", "later", "later-uid")
			return err == nil, nil
		})
		require.NoError(t, err)
	})

	t.Run("the cache keeps function Runs only, and of them what routing reads", func(t *testing.T) {
		c := router.cache.Load()
		_, exists, err := c.runs.GetIndexer().GetByKey("ns/task")
		require.NoError(t, err)
		assert.False(t, exists, "task Runs are not kept")
		obj, exists, err := c.runs.GetIndexer().GetByKey("ns/ready")
		require.NoError(t, err)
		require.True(t, exists)
		kept := obj.(*kruntimes.Run)
		assert.Empty(t, kept.Spec.Env)
		assert.Empty(t, kept.Spec.Mode.Function.Handler)
		assert.Equal(t, []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: "Registered"}}, kept.Status.Conditions)
	})
}

func TestRouteChanged(t *testing.T) {
	runs := newFakeRuns(functionRun("fn", func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Running; r.Status.Conditions = nil }))
	kube := fake.NewClientset(runtimePod("pod-a"))
	router := New(Config{Kube: kube, ClientTLS: &tls.Config{MinVersion: tls.VersionTLS13}})
	router.Start(t.Context(), runs)
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return router.cache.Load().synced(), nil
	}))
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	waitClosed := func(t *testing.T, ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the channel was not closed within 10s", what)
		}
	}

	t.Run("an event of the Run wakes its waiters, not another Run's", func(t *testing.T) {
		fn, stopFn := router.RouteChanged("ns", "fn")
		defer stopFn()
		other, stopOther := router.RouteChanged("ns", "other")
		defer stopOther()
		runs.add(functionRun("fn"))
		waitClosed(t, fn, "the Run became Ready")
		_, err := router.Route(t.Context(), "ns", "fn", "")
		require.NoError(t, err, "routed once the channel closed: the cache had the event")
		assert.False(t, closed(other), "another Run's waiter sleeps on")
	})

	t.Run("an event of a task Run wakes its waiters, though the cache keeps no task", func(t *testing.T) {
		task, stopTask := router.RouteChanged("ns", "task")
		defer stopTask()
		other, stopOther := router.RouteChanged("ns", "other")
		defer stopOther()
		runs.add(functionRun("task", func(r *kruntimes.Run) { r.Spec.Mode.Function = nil; r.Status.Phase = lifecycle.Running }))
		waitClosed(t, task, "the task started")
		_, exists, err := router.cache.Load().runs.GetIndexer().GetByKey("ns/task")
		require.NoError(t, err)
		assert.False(t, exists, "task Runs are not kept")
		assert.False(t, closed(other), "another Run's waiter sleeps on")
	})

	t.Run("a Runtime Pod's change wakes the waiters of the Runs on it, not others", func(t *testing.T) {
		fn, stopFn := router.RouteChanged("ns", "fn")
		defer stopFn()
		task, stopTask := router.RouteChanged("ns", "task")
		defer stopTask()
		elsewhere, stopElsewhere := router.RouteChanged("ns", "elsewhere")
		defer stopElsewhere()
		unassigned, stopUnassigned := router.RouteChanged("ns", "unassigned")
		defer stopUnassigned()
		runs.add(functionRun("elsewhere", func(r *kruntimes.Run) { r.Status.AssignedPod, r.Status.AssignedPodUID = "pod-b", "pod-b-uid" }))
		waitClosed(t, elsewhere, "the Run was added")
		elsewhere, stopElsewhere = router.RouteChanged("ns", "elsewhere")
		defer stopElsewhere()

		_, err := kube.CoreV1().Pods("ns").Create(t.Context(), runtimePod("pod-c"), metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = kube.CoreV1().Pods("ns").Update(t.Context(), runtimePod("pod-a", func(p *corev1.Pod) { p.Status.PodIP = "127.0.0.8" }), metav1.UpdateOptions{})
		require.NoError(t, err)
		waitClosed(t, fn, "the function's Pod moved")
		waitClosed(t, task, "the task's Pod moved")
		// Pod c was added before Pod a changed: had it woken anyone, the
		// channels below would be closed by now.
		assert.False(t, closed(elsewhere), "a Run on another Pod sleeps on")
		assert.False(t, closed(unassigned), "a Run on no Pod sleeps on: its own event will say when it is assigned")

		_, err = kube.CoreV1().Pods("ns").Create(t.Context(), runtimePod("pod-b"), metav1.CreateOptions{})
		require.NoError(t, err)
		waitClosed(t, elsewhere, "the Run's Pod appeared")
	})

	t.Run("an ended task is forgotten: its Pod's changes wake it no more", func(t *testing.T) {
		runs.add(functionRun("task", func(r *kruntimes.Run) { r.Spec.Mode.Function = nil; r.Status.Phase = lifecycle.Succeeded }))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			router.changes.mu.Lock()
			defer router.changes.mu.Unlock()
			assert.NotContains(c, router.changes.taskPods, "ns/task")
		}, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("a relist after a broken watch wakes every waiter: events in between are lost", func(t *testing.T) {
		lost, stop := router.RouteChanged("ns", "lost-task")
		defer stop()
		runs.expireWatches()
		waitClosed(t, lost, "the cache listed again")
	})

	t.Run("a waiter that stopped is forgotten", func(t *testing.T) {
		_, stop := router.RouteChanged("ns", "fn")
		stop()
		router.changes.mu.Lock()
		defer router.changes.mu.Unlock()
		assert.Empty(t, router.changes.waiters)
	})

	t.Run("with invoke off nothing changes", func(t *testing.T) {
		ch, stop := New(Config{}).RouteChanged("ns", "fn")
		defer stop()
		assert.False(t, closed(ch))
	})
}

func TestRouteBeforeRouting(t *testing.T) {
	cases := []struct {
		name   string
		router func(t *testing.T) *Router
		// code is 501 for an invoke that is off (no retry helps), 503 for
		// one that is starting.
		code    int32
		message string
	}{
		{"without a cluster invoke is off: 501", func(*testing.T) *Router { return New(Config{ClientTLS: &tls.Config{MinVersion: tls.VersionTLS13}}) },
			501, "invoke needs the cluster's Pods, and this server runs without a cluster (--standalone)"},
		{"without a client certificate invoke is off: 501", func(*testing.T) *Router { return New(Config{Kube: fake.NewClientset()}) },
			501, "invoke is not configured: kruntimes-apiserver has no client certificate for runtimed (--runtimed-client-cert-file)"},
		{"before Start the cache is starting: 503", func(*testing.T) *Router {
			return New(Config{Kube: fake.NewClientset(), ClientTLS: &tls.Config{MinVersion: tls.VersionTLS13}})
		}, 503, "the invoke routing cache is still starting"},
		{"an off router stays off once started", func(t *testing.T) *Router {
			router := New(Config{})
			router.Start(t.Context(), newFakeRuns())
			return router
		}, 501, "invoke needs the cluster's Pods, and this server runs without a cluster (--standalone)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.router(t).Route(t.Context(), "ns", "fn", "")
			var status apierrors.APIStatus
			require.ErrorAs(t, err, &status)
			assert.Equal(t, tc.code, status.Status().Code)
			assert.Equal(t, tc.message, err.Error())
			if tc.code == 501 {
				assert.Equal(t, metav1.StatusReason("NotImplemented"), status.Status().Reason)
			}
		})
	}
}

var _ runregistry.Router = &Router{}

func TestReadyzCheckWaitsForTheOwnershipCache(t *testing.T) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS13}
	t.Run("it is named runs-invoke-routing", func(t *testing.T) {
		assert.Equal(t, "runs-invoke-routing", New(Config{}).ReadyzCheck().Name())
	})
	t.Run("with invoke off it passes: there is nothing to wait for", func(t *testing.T) {
		assert.NoError(t, New(Config{}).ReadyzCheck().Check(nil))
		assert.NoError(t, New(Config{Kube: fake.NewClientset()}).ReadyzCheck().Check(nil))
	})
	t.Run("before Start it fails", func(t *testing.T) {
		err := New(Config{Kube: fake.NewClientset(), ClientTLS: tlsConfig}).ReadyzCheck().Check(nil)
		assert.EqualError(t, err, "the invoke ownership cache has not synced its Runs and Runtime Pods yet")
	})
	t.Run("it fails while the Runs have not been listed, and passes once they are", func(t *testing.T) {
		runs := &blockingRuns{fakeRuns: newFakeRuns(functionRun("ready")), listed: make(chan struct{})}
		router := New(Config{Kube: fake.NewClientset(runtimePod("pod-a")), ClientTLS: tlsConfig})
		router.Start(t.Context(), runs)
		check := router.ReadyzCheck()
		assert.Error(t, check.Check(nil), "not ready while the Runs list is outstanding")
		close(runs.listed)
		err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return check.Check(nil) == nil, nil
		})
		assert.NoError(t, err, "ready once both informers synced")
	})
}

// blockingRuns holds every List until listed is closed.
type blockingRuns struct {
	*fakeRuns
	listed chan struct{}
}

func (b *blockingRuns) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	select {
	case <-b.listed:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.fakeRuns.List(ctx, options)
}

// TestRuntimed: runs/log's follow finds a task's runtimed through the
// cache's Pods, never a Run of the cache (tasks are not kept there).
func TestRuntimed(t *testing.T) {
	router := startedRouter(t, newFakeRuns(),
		runtimePod("pod-a"),
		runtimePod("pod-noip", func(p *corev1.Pod) { p.Status.PodIP = "" }))
	client, err := router.Runtimed("ns", "pod-a", "pod-a-uid")
	require.NoError(t, err)
	assert.NotNil(t, client)
	again, err := router.Runtimed("ns", "pod-a", "pod-a-uid")
	require.NoError(t, err)
	assert.Equal(t, client, again, "the pool's one connection per Pod")

	for _, tc := range []struct{ name, pod, uid string }{
		{"an unknown Pod", "pod-gone", "pod-gone-uid"},
		{"an earlier Pod of the name", "pod-a", "other-uid"},
		{"a Pod without an IP", "pod-noip", "pod-noip-uid"},
	} {
		_, err := router.Runtimed("ns", tc.pod, types.UID(tc.uid))
		assert.True(t, apierrors.IsServiceUnavailable(err), "%s: %v", tc.name, err)
	}
	_, err = New(Config{Kube: fake.NewClientset()}).Runtimed("ns", "pod-a", "pod-a-uid")
	var status apierrors.APIStatus
	require.ErrorAs(t, err, &status, "invoke off")
	assert.Equal(t, int32(501), status.Status().Code)
}
