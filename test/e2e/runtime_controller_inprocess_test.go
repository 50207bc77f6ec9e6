package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	runtimecontroller "kruntimes.io/kruntimes/controllers/runtime"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// runtimeControllerEnv runs the runtime controller built by the test as
// controllers/manager builds it, over real informers: Runtimes in a
// standalone kruntimes-apiserver of its own, the pool (ServiceAccount, Role,
// RoleBinding, Deployment) in the suite's bare kube-apiserver. Not the
// cluster's: its garbage collector deletes objects whose owner it cannot
// find, and a Runtime of the standalone server is unknown to it (see
// framework.ControlPlane). With no Deployment controller there, the test
// writes the Deployment's status as that controller would. Every write the
// controller makes is recorded on the wire.
type runtimeControllerEnv struct {
	t          *testing.T
	ctx        context.Context
	ns         string
	kube       kubernetes.Interface // the test's own writes, not recorded
	client     versioned.Interface  // the test's own writes, not recorded
	kubeWrites *apiWrites           // the controller's writes of the pool
	writes     *apiWrites           // the controller's writes of Runtimes
	start      func()
	probes     int
}

func newRuntimeControllerEnv(t *testing.T) *runtimeControllerEnv {
	t.Helper()
	f := framework.Get(t)
	cp := f.ControlPlane(t)
	_, ctx := ktesting.NewTestContext(t)
	ns, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "runtime-inproc-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	api := testserver.Start(t, "")
	e := &runtimeControllerEnv{
		t: t, ctx: ctx, ns: ns.Name, kube: cp.Client, client: api.Client,
		kubeWrites: &apiWrites{}, writes: &apiWrites{},
	}
	e.start = func() {
		kubeWriter, err := kubernetes.NewForConfig(e.kubeWrites.config(cp.Config))
		require.NoError(t, err)
		writer, err := versioned.NewForConfig(e.writes.config(api.Config))
		require.NoError(t, err)
		kruntimesInformers := externalversions.NewSharedInformerFactoryWithOptions(e.client, 0, externalversions.WithNamespace(e.ns))
		// As controllers/manager: only objects labelled kruntimes.io/runtime.
		labelled := kubeinformers.NewSharedInformerFactoryWithOptions(e.kube, 0, kubeinformers.WithNamespace(e.ns),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = lifecycle.LabelRuntime }))
		c, err := runtimecontroller.New(ctx, kruntimesInformers.Kruntimes().V1alpha1().Runtimes(),
			labelled.Apps().V1().Deployments(), labelled.Core().V1().ServiceAccounts(),
			labelled.Rbac().V1().Roles(), labelled.Rbac().V1().RoleBindings(), labelled.Policy().V1().PodDisruptionBudgets(),
			kubeWriter, writer, newEventRecorder(t, e.kube, "kruntimes-runtime-e2e"))
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(runCtx, 1)
		}()
		startInformers(t, runCtx.Done(), kruntimesInformers, labelled)
		t.Cleanup(func() {
			cancel()
			<-done
			kruntimesInformers.Shutdown()
			labelled.Shutdown()
		})
	}
	return e
}

// poolOf keeps the writes of the objects of Runtime name's pool.
func poolOf(name string) func(apiWrite) bool {
	return func(w apiWrite) bool { return w.Name == runtimepod.DeploymentName(name) }
}

// applied splits writes into those the server applied and the others,
// which must have been refused as conflicts: a write made from an informer
// that had not caught up yet, which changes nothing.
func applied(t *testing.T, writes []apiWrite) []apiWrite {
	t.Helper()
	var out []apiWrite
	for _, w := range writes {
		if w.Applied() {
			out = append(out, w)
			continue
		}
		assert.Equal(t, http.StatusConflict, w.Code, "%s: only writes from a stale informer may be refused", w)
		t.Logf("refused, from a stale informer: %s (%d)", w, w.Code)
	}
	return out
}

// waitForRuntime polls Runtime name until done holds.
func (e *runtimeControllerEnv) waitForRuntime(name, what string, done func(*v1alpha1.Runtime) bool) *v1alpha1.Runtime {
	e.t.Helper()
	var last *v1alpha1.Runtime
	err := framework.Poll(e.ctx, 50*time.Millisecond, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		rt, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Get(ctx, name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		last = rt
		return done(rt), nil
	})
	require.NoError(e.t, err, "waiting for Runtime %s: %s; last status %+v; writes %v %v", name, what, last,
		describe(e.kubeWrites.All()), describe(e.writes.All()))
	return last
}

// settle returns once the controller has synced every Runtime queued
// before the call: it creates a Runtime and waits for the controller to
// start on its pool. After the informers' initial list, Runtime events
// reach the queue in the order the server made them, and one worker takes
// keys in queue order.
func (e *runtimeControllerEnv) settle() {
	e.t.Helper()
	e.probes++
	name := fmt.Sprintf("probe-%d", e.probes)
	_, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Create(e.ctx, newTestRuntime(name, 0, 1), metav1.CreateOptions{})
	require.NoError(e.t, err)
	err = wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, framework.ShortTimeout, true, func(context.Context) (bool, error) {
		return len(e.kubeWrites.Since(0, poolOf(name))) > 0, nil
	})
	require.NoError(e.t, err, "the controller syncs Runtime %s", name)
}

func readyCondition(rt *v1alpha1.Runtime) *metav1.Condition {
	return apimeta.FindStatusCondition(rt.Status.Conditions, lifecycle.ConditionReady)
}

func TestRuntimeControllerCreatesPoolThenWritesNothingMore(t *testing.T) {
	e := newRuntimeControllerEnv(t)
	rt, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Create(e.ctx, newTestRuntime("bash", 2, 4), metav1.CreateOptions{})
	require.NoError(t, err)
	name := runtimepod.DeploymentName("bash")
	e.start()

	e.waitForRuntime("bash", "status written", func(rt *v1alpha1.Runtime) bool { return readyCondition(rt) != nil })
	e.settle()
	assert.Equal(t, []string{
		"create serviceaccounts " + name + " (201)",
		"create roles " + name + " (201)",
		"create rolebindings " + name + " (201)",
		"create poddisruptionbudgets " + name + " (201)",
		"create deployments " + name + " (201)",
	}, describe(applied(t, e.kubeWrites.Since(0, poolOf("bash")))), "the pool is created, ServiceAccount first and Deployment last")
	pdb, err := e.kube.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable, "a drain takes one Pod of the Runtime at a time")
	assertOwnedBy(t, rt, pdb.ObjectMeta)
	deploy, err := e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, deploy.Spec.Strategy.RollingUpdate)
	assert.Equal(t, intstr.FromInt32(0), *deploy.Spec.Strategy.RollingUpdate.MaxUnavailable, "a rollout keeps the capacity")
	assert.Equal(t, intstr.FromInt32(1), *deploy.Spec.Strategy.RollingUpdate.MaxSurge)
	statusWrites := applied(t, e.writes.Since(0, named("runtimes/status", "bash")))
	require.Len(t, statusWrites, 1, "%v", describe(e.writes.All()))
	status := decode[v1alpha1.Runtime](t, statusWrites[0])
	assert.Equal(t, rt.ResourceVersion, status.ResourceVersion, "status is written with the Runtime's resourceVersion")
	assert.Equal(t, rt.Generation, status.Status.ObservedGeneration)
	ready := readyCondition(status)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, "0 of 2 Runtime Pods are ready", ready.Message)

	role, err := e.kube.RbacV1().Roles(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, runtimecontroller.RuntimedPolicyRules(), role.Rules)
	binding, err := e.kube.RbacV1().RoleBindings(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: e.ns}}, binding.Subjects)
	assertOwnedBy(t, rt, binding.ObjectMeta)

	t.Run("the Deployment reporting both Pods ready is written to the status only", func(t *testing.T) {
		kubeMark, mark := e.kubeWrites.Len(), e.writes.Len()
		d, err := e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}
		_, err = e.kube.AppsV1().Deployments(e.ns).UpdateStatus(e.ctx, d, metav1.UpdateOptions{})
		require.NoError(t, err)
		got := e.waitForRuntime("bash", "Ready", func(rt *v1alpha1.Runtime) bool {
			return apimeta.IsStatusConditionTrue(rt.Status.Conditions, lifecycle.ConditionReady)
		})
		assert.Equal(t, int32(2), got.Status.ReadyReplicas)
		e.settle()
		assert.Empty(t, applied(t, e.kubeWrites.Since(kubeMark, poolOf("bash"))), "the pool is as it should be")
		assert.Len(t, applied(t, e.writes.Since(mark, named("runtimes/status", "bash"))), 1, "%v", describe(e.writes.Since(mark, nil)))
	})

	t.Run("a sync that finds everything as it should be writes nothing", func(t *testing.T) {
		kubeMark, mark := e.kubeWrites.Len(), e.writes.Len()
		_, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Patch(e.ctx, "bash", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		e.settle()
		assert.Empty(t, describe(e.kubeWrites.Since(kubeMark, poolOf("bash"))), "the pool is as it should be")
		assert.Empty(t, describe(e.writes.Since(mark, named("runtimes/status", "bash"))), "an unchanged status is not written")
	})

	t.Run("scaling the Runtime updates the Deployment", func(t *testing.T) {
		kubeMark := e.kubeWrites.Len()
		_, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Patch(e.ctx, "bash", types.MergePatchType,
			[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		e.waitForRuntime("bash", "generation 2 observed", func(rt *v1alpha1.Runtime) bool {
			return rt.Generation == 2 && rt.Status.ObservedGeneration == 2
		})
		e.settle()
		assert.Equal(t, []string{"update deployments " + name + " (200)"},
			describe(applied(t, e.kubeWrites.Since(kubeMark, poolOf("bash")))))
		d, err := e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, ptr.To[int32](3), d.Spec.Replicas)
	})
}

func TestRuntimeControllerReportsForeignDeploymentAndLeavesIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		// The controller's informers see it: the conflict shows in the cache.
		{name: "labelled as a pool", labels: map[string]string{lifecycle.LabelRuntime: "bash", "app": "foreign"}},
		// Its informers never see it: only creating the Deployment finds it.
		{name: "unlabelled", labels: map[string]string{"app": "foreign"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testForeignDeployment(t, tc.labels)
		})
	}
}

// testForeignDeployment has someone else's Deployment, labelled with labels,
// hold the name of Runtime bash's.
func testForeignDeployment(t *testing.T, labels map[string]string) {
	e := newRuntimeControllerEnv(t)
	name := runtimepod.DeploymentName("bash")
	_, visible := labels[lifecycle.LabelRuntime]
	foreign, err := e.kube.AppsV1().Deployments(e.ns).Create(e.ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/foreign:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	rt, err := e.client.KruntimesV1alpha1().Runtimes(e.ns).Create(e.ctx, newTestRuntime("bash", 2, 4), metav1.CreateOptions{})
	require.NoError(t, err)
	e.start()

	got := e.waitForRuntime("bash", "ResourceConflict", func(rt *v1alpha1.Runtime) bool {
		c := readyCondition(rt)
		return c != nil && c.Reason == lifecycle.ReasonResourceConflict
	})
	assert.Equal(t, metav1.ConditionFalse, readyCondition(got).Status)
	assert.Contains(t, readyCondition(got).Message, "delete or rename it")
	e.settle()
	var creates int
	for _, w := range e.kubeWrites.Since(0, poolOf("bash")) {
		if w.Resource != "deployments" {
			continue
		}
		// Unseen, it can only be found by trying to create the Deployment,
		// which the server refuses: that changes nothing.
		if !visible && w.Verb == "create" && w.Code == http.StatusConflict {
			creates++
			continue
		}
		assert.Fail(t, "the foreign Deployment is not taken", "%s (%d)", w, w.Code)
	}
	if !visible {
		assert.Positive(t, creates, "the controller tried to create its Deployment")
	}
	d, err := e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, foreign.ResourceVersion, d.ResourceVersion, "the foreign Deployment is untouched")
	assert.Equal(t, foreign.UID, d.UID)

	err = framework.Poll(e.ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		events, err := e.kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
		if seen.Err(err) {
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Kind == "Runtime" && ev.InvolvedObject.UID == rt.UID &&
				ev.Type == corev1.EventTypeWarning && ev.Reason == lifecycle.ReasonResourceConflict {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "a Warning event on the Runtime reports the conflict")

	// The sync failed, so the Runtime is retried with backoff: once the
	// foreign Deployment is gone, the controller creates its own.
	require.NoError(t, e.kube.AppsV1().Deployments(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}))
	err = framework.Poll(e.ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		d, err := e.kube.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		ref := metav1.GetControllerOf(d)
		return ref != nil && ref.UID == rt.UID, nil
	})
	require.NoError(t, err, "the Runtime's own Deployment replaces the foreign one")
	e.waitForRuntime("bash", "conflict resolved", func(rt *v1alpha1.Runtime) bool {
		c := readyCondition(rt)
		return c != nil && c.Reason != lifecycle.ReasonResourceConflict
	})
}
