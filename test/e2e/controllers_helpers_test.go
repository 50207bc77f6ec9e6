package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// controllersClient waits until the controllers hosted by kruntimes-apiserver
// (with the RBAC of artifacts/deploy) lead, and returns a kruntimes client.
func controllersClient(t *testing.T, f *framework.Framework) versioned.Interface {
	t.Helper()
	f.RequireKruntimes(t)
	ctx := framework.Context(t, time.Minute)
	var holder string
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		lease, err := f.Client.CoordinationV1().Leases(manager.DefaultLeaseNamespace).Get(ctx, manager.DefaultLeaseName, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		if lease.Spec.HolderIdentity == nil {
			seen.State("the Lease has no holder")
			return false, nil
		}
		holder = *lease.Spec.HolderIdentity
		return holder != "", nil
	})
	require.NoError(t, err, "the controllers hosted by kruntimes-apiserver elect a leader (Lease %s/%s)", manager.DefaultLeaseNamespace, manager.DefaultLeaseName)
	client, err := versioned.NewForConfig(f.AdminConfig)
	require.NoError(t, err)
	return client
}

// newTestRuntime returns a Runtime running the built-in bash Runtime Server.
func newTestRuntime(name string, replicas, capacity int32) *v1alpha1.Runtime {
	return &v1alpha1.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RuntimeSpec{
			Replicas:      ptr.To(replicas),
			Capacity:      v1alpha1.RuntimeCapacity{Runs: capacity},
			RuntimedImage: "kruntimes.io/runtimed:dev",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers: []corev1.Container{{
					Name:  runtimepod.ContainerRuntime,
					Image: "kruntimes.io/kruntimes-runtime:dev",
					Args:  []string{"--language=bash", "--listen=" + runtimepod.RuntimeSocket},
				}},
			}},
		},
	}
}

func newTaskRun(name, runtime string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RunSpec{
			Runtime: runtime,
			Source:  v1alpha1.RunSource{Inline: "echo hello", InlinePath: "main.sh"},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Entrypoint: "main.sh"}},
		},
	}
}

// fakeRuntimePods makes the Deployment the runtime controller keeps for
// runtime run n e2e-testserver Pods, standing in for Runtime Pods whose
// runtimed the test plays itself, and returns them once all are Ready: the
// scheduler takes only Pods of the Runtime's own Deployment. The Runtime is
// set to n replicas of Pods no scheduler binds, and once the controller has
// written that to the Deployment the test swaps the Deployment's template
// for e2e-testserver's; the controller leaves the template alone while the
// Runtime's hash annotation and replicas still match.
func fakeRuntimePods(ctx context.Context, t *testing.T, f *framework.Framework, client versioned.Interface, ns, runtime string, n int32) []corev1.Pod {
	t.Helper()
	const nowhere = "kruntimes-e2e-unbound"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rt, err := client.KruntimesV1alpha1().Runtimes(ns).Get(ctx, runtime, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rt.Spec.Replicas = ptr.To(n)
		rt.Spec.Template.Spec.SchedulerName = nowhere
		_, err = client.KruntimesV1alpha1().Runtimes(ns).Update(ctx, rt, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err, "Runtime %s: %d replicas no scheduler binds", runtime, n)
	deployments := f.Client.AppsV1().Deployments(ns)
	name := runtimepod.DeploymentName(runtime)
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		seen.State("replicas %v, schedulerName %q", ptr.Deref(d.Spec.Replicas, -1), d.Spec.Template.Spec.SchedulerName)
		return ptr.Deref(d.Spec.Replicas, -1) == n && d.Spec.Template.Spec.SchedulerName == nowhere, nil
	})
	require.NoError(t, err, "the runtime controller writes the Runtime's replicas to Deployment %s", name)
	fake := testServerDeployment("fake-" + runtime).Spec.Template
	fake.Labels[lifecycle.LabelRuntime] = runtime
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template = fake
		_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err, "Deployment %s: e2e-testserver Pods", name)
	var pods []corev1.Pod
	err = framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=fake-" + runtime})
		if seen.Err(err) {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podIsReady(&p) {
				pods = append(pods, p)
			}
		}
		seen.State("%d of %d Pods Ready", len(pods), n)
		return len(pods) == int(n), nil
	})
	require.NoError(t, err, "%d Ready Pods of Deployment %s", n, name)
	d, err := deployments.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "fake-"+runtime, d.Spec.Template.Labels["app"], "the runtime controller left Deployment %s's template alone", name)
	return pods
}

// labelledPods runs n e2e-testserver Pods of a Deployment of the test's own
// (named name) that carry runtime's label: Pods that pose as Runtime Pods.
func labelledPods(ctx context.Context, t *testing.T, f *framework.Framework, ns, name, runtime string, n int32) []corev1.Pod {
	t.Helper()
	deploy := testServerDeployment(name)
	deploy.Spec.Replicas = ptr.To(n)
	deploy.Spec.Selector.MatchLabels[lifecycle.LabelRuntime] = runtime
	deploy.Spec.Template.Labels[lifecycle.LabelRuntime] = runtime
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
	require.NoError(t, err)
	var pods []corev1.Pod
	err = framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if seen.Err(err) {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podIsReady(&p) {
				pods = append(pods, p)
			}
		}
		seen.State("%d of %d Pods Ready", len(pods), n)
		return len(pods) == int(n), nil
	})
	require.NoError(t, err, "%d Ready Pods labelled %s=%s", n, lifecycle.LabelRuntime, runtime)
	return pods
}

func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// heartbeat renews a runtimed-style heartbeat Lease for each Pod, as
// runtimed would, until the test ends.
func heartbeat(t *testing.T, f *framework.Framework, pods []corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	renew := func() {
		for _, pod := range pods {
			leases := f.Client.CoordinationV1().Leases(pod.Namespace)
			now := metav1.NowMicro()
			lease, err := leases.Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = leases.Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: runtimepod.LeaseName(pod.Name)},
					Spec: coordinationv1.LeaseSpec{
						HolderIdentity:       ptr.To(string(pod.UID)),
						LeaseDurationSeconds: ptr.To(int32(runtimepod.HeartbeatLeaseDuration.Seconds())),
						AcquireTime:          &now,
						RenewTime:            &now,
					},
				}, metav1.CreateOptions{})
			} else if err == nil {
				lease.Spec.RenewTime = &now
				_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
			}
			if err != nil && ctx.Err() == nil {
				t.Logf("renewing heartbeat of Pod %s: %v", pod.Name, err)
			}
		}
	}
	renew()
	wg.Go(func() {
		wait.UntilWithContext(ctx, func(context.Context) { renew() }, runtimepod.HeartbeatRenewInterval)
	})
}
