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

// fakeRuntimePods runs n e2e-testserver Pods labelled as Pods of runtime,
// standing in for Runtime Pods whose runtimed the test plays itself, and
// returns them once all are Ready.
func fakeRuntimePods(ctx context.Context, t *testing.T, f *framework.Framework, ns, runtime string, n int32) []corev1.Pod {
	t.Helper()
	deploy := testServerDeployment("fake-" + runtime)
	deploy.Spec.Replicas = ptr.To(n)
	deploy.Spec.Selector.MatchLabels[lifecycle.LabelRuntime] = runtime
	deploy.Spec.Template.Labels[lifecycle.LabelRuntime] = runtime
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
	require.NoError(t, err)
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
