package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	runtimecontroller "kruntimes.io/kruntimes/controllers/runtime"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

func TestRuntimeControllerCreatesPool(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "pool")
	ctx := framework.Context(t, 4*time.Minute)

	rt, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("bash", 2, 4), metav1.CreateOptions{})
	require.NoError(t, err)
	name := runtimepod.DeploymentName("bash")

	var deploy *appsv1.Deployment
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		deploy, err = f.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return !seen.Err(err), nil
	})
	require.NoError(t, err, "Deployment %s is created", name)

	t.Run("Deployment has both containers, the shared volumes and an owner reference", func(t *testing.T) {
		assertOwnedBy(t, rt, deploy.ObjectMeta)
		assert.Equal(t, "bash", deploy.Labels[lifecycle.LabelRuntime])
		assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, deploy.Spec.Selector.MatchLabels)
		assert.Equal(t, "bash", deploy.Spec.Template.Labels[lifecycle.LabelRuntime])
		assert.Equal(t, int32(2), *deploy.Spec.Replicas)
		spec := deploy.Spec.Template.Spec
		assert.Equal(t, runtimepod.ServiceAccountName("bash"), spec.ServiceAccountName)
		containers := map[string]corev1.Container{}
		for _, c := range spec.Containers {
			containers[c.Name] = c
		}
		require.Contains(t, containers, runtimepod.ContainerRuntime)
		require.Contains(t, containers, runtimepod.ContainerRuntimed)
		runtimed := containers[runtimepod.ContainerRuntimed]
		assert.Equal(t, "kruntimes.io/runtimed:dev", runtimed.Image)
		assert.Equal(t, []string{"--runtime-socket=unix:///run/kruntimes/runtime.sock", "--workspace-dir=/workspace", "--capacity=4",
			// The test Runtime's grace of 5 s shrinks runtimed's shutdown bounds.
			"--shutdown-drain-timeout=800ms", "--shutdown-timeout=2.5s",
			// Nothing of the cluster's --invoke-endpoint-base: status.endpoint
			// is kruntimes-apiserver's to write. The cluster runs runtimed
			// reaching it directly (--runtimed-api=direct).
			"--kruntimes-api-server=" + f.Cluster.KruntimesURL,
			"--invoke-tls-cert-file=/etc/kruntimes/runtimed-tls/tls.crt", "--invoke-tls-key-file=/etc/kruntimes/runtimed-tls/tls.key",
			"--invoke-client-ca-file=/etc/kruntimes/runtimed-tls/ca.crt"}, runtimed.Args)
		var apiCA string
		for _, e := range runtimed.Env {
			if e.Name == runtimepod.EnvKruntimesAPICA {
				apiCA = e.Value
			}
		}
		assert.Contains(t, apiCA, "-----BEGIN CERTIFICATE-----", "runtimed gets the CA of kruntimes-apiserver's serving certificate")
		require.NotNil(t, runtimed.ReadinessProbe)
		assert.Equal(t, "/readyz", runtimed.ReadinessProbe.HTTPGet.Path)
		for _, c := range []corev1.Container{runtimed, containers[runtimepod.ContainerRuntime]} {
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			assert.Equal(t, runtimepod.WorkspacePath, mounts[runtimepod.VolumeWorkspace], c.Name)
			assert.Equal(t, runtimepod.SocketDir, mounts[runtimepod.VolumeSocket], c.Name)
		}
	})

	t.Run("ServiceAccount, Role and RoleBinding give runtimed least privilege", func(t *testing.T) {
		sa, err := f.Client.CoreV1().ServiceAccounts(ns).Get(ctx, runtimepod.ServiceAccountName("bash"), metav1.GetOptions{})
		require.NoError(t, err)
		assertOwnedBy(t, rt, sa.ObjectMeta)
		role, err := f.Client.RbacV1().Roles(ns).Get(ctx, runtimepod.ServiceAccountName("bash"), metav1.GetOptions{})
		require.NoError(t, err)
		assertOwnedBy(t, rt, role.ObjectMeta)
		assert.Equal(t, runtimecontroller.RuntimedPolicyRules(), role.Rules)
		binding, err := f.Client.RbacV1().RoleBindings(ns).Get(ctx, runtimepod.ServiceAccountName("bash"), metav1.GetOptions{})
		require.NoError(t, err)
		assertOwnedBy(t, rt, binding.ObjectMeta)
		require.Len(t, binding.Subjects, 1)
		assert.Equal(t, sa.Name, binding.Subjects[0].Name)
		assert.Equal(t, role.Name, binding.RoleRef.Name)
	})

	t.Run("status reflects the Deployment", func(t *testing.T) {
		var last string
		err := framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			got, err := client.KruntimesV1alpha1().Runtimes(ns).Get(ctx, "bash", metav1.GetOptions{})
			if seen.Err(err) {
				return false, nil
			}
			d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if seen.Err(err) {
				return false, nil
			}
			ready := apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionReady)
			last = fmt.Sprintf("runtime status %+v; deployment replicas=%d ready=%d", got.Status, d.Status.Replicas, d.Status.ReadyReplicas)
			return ready != nil && got.Status.ObservedGeneration == got.Generation &&
				got.Status.Replicas == d.Status.Replicas && got.Status.Replicas == 2 &&
				got.Status.ReadyReplicas == d.Status.ReadyReplicas &&
				(ready.Status == metav1.ConditionTrue) == (d.Status.ReadyReplicas == 2), nil
		})
		require.NoError(t, err, last)
	})

	t.Run("with runtimed the pool becomes Ready", func(t *testing.T) {
		var last string
		err := framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			got, err := client.KruntimesV1alpha1().Runtimes(ns).Get(ctx, "bash", metav1.GetOptions{})
			if seen.Err(err) {
				return false, nil
			}
			last = fmt.Sprintf("%+v", got.Status)
			return got.Status.ReadyReplicas == 2 && apimeta.IsStatusConditionTrue(got.Status.Conditions, lifecycle.ConditionReady), nil
		})
		require.NoError(t, err, "last status: %s", last)
	})

	t.Run("deleting the Runtime removes its pool", func(t *testing.T) {
		require.NoError(t, client.KruntimesV1alpha1().Runtimes(ns).Delete(ctx, "bash", metav1.DeleteOptions{}))
		saName := runtimepod.ServiceAccountName("bash")
		err := framework.Poll(ctx, framework.PollInterval, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			_, errD := f.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			_, errS := f.Client.CoreV1().ServiceAccounts(ns).Get(ctx, saName, metav1.GetOptions{})
			_, errR := f.Client.RbacV1().Roles(ns).Get(ctx, saName, metav1.GetOptions{})
			_, errB := f.Client.RbacV1().RoleBindings(ns).Get(ctx, saName, metav1.GetOptions{})
			var remaining []string
			for kind, err := range map[string]error{"Deployment": errD, "ServiceAccount": errS, "Role": errR, "RoleBinding": errB} {
				if !apierrors.IsNotFound(err) {
					remaining = append(remaining, kind)
					seen.Err(err)
				}
			}
			sort.Strings(remaining)
			seen.State("remaining: %v", remaining)
			return len(remaining) == 0, nil
		})
		require.NoError(t, err, "the garbage collector removes the Deployment, ServiceAccount, Role and RoleBinding")
	})
}

func assertOwnedBy(t *testing.T, rt *v1alpha1.Runtime, meta metav1.ObjectMeta) {
	t.Helper()
	ref := metav1.GetControllerOfNoCopy(&meta)
	if assert.NotNil(t, ref, "%s has a controller reference", meta.Name) {
		assert.Equal(t, rt.UID, ref.UID)
		assert.Equal(t, "Runtime", ref.Kind)
		assert.Equal(t, v1alpha1.SchemeGroupVersion.String(), ref.APIVersion)
	}
}

// TestSchedulerPlacesRunsByCapacity plays runtimed itself: e2e-testserver
// Pods labelled as Runtime Pods, heartbeat Leases written by the test, and
// Runs finished through runs/status.
func TestSchedulerPlacesRunsByCapacity(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sched")
	ctx := framework.Context(t, 4*time.Minute)
	runs := client.KruntimesV1alpha1().Runs(ns)

	const pods, capacity = 2, 2
	// fakeRuntimePods turns the Runtime's own Deployment into e2e-testserver
	// Pods that stand in for Runtime Pods.
	_, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("x", 0, capacity), metav1.CreateOptions{})
	require.NoError(t, err)
	fake := fakeRuntimePods(ctx, t, f, client, ns, "x", pods)

	names := make([]string, pods*capacity+1)
	for i := range names {
		names[i] = fmt.Sprintf("run-%d", i)
		_, err := runs.Create(ctx, newTaskRun(names[i], "x"), metav1.CreateOptions{})
		require.NoError(t, err)
	}

	t.Run("without a heartbeat no Pod is a candidate", func(t *testing.T) {
		waitRuns(ctx, t, client, ns, "every Run Pending with NoCapacity", func(items []v1alpha1.Run) bool {
			for _, r := range items {
				if r.Status.Phase != lifecycle.Pending || scheduledReason(&r) != lifecycle.ReasonNoCapacity {
					return false
				}
			}
			return len(items) == len(names)
		})
	})

	heartbeat(t, f, fake)
	var pending string
	t.Run("pods × capacity Runs are bound, least-loaded first, and one waits", func(t *testing.T) {
		items := waitRuns(ctx, t, client, ns, "4 Scheduled and 1 Pending", func(items []v1alpha1.Run) bool {
			return countPhase(items, lifecycle.Scheduled) == pods*capacity && countPhase(items, lifecycle.Pending) == 1
		})
		perPod := map[string]int{}
		uids := map[string]types.UID{}
		for _, p := range fake {
			uids[p.Name] = p.UID
		}
		for _, r := range items {
			switch r.Status.Phase {
			case lifecycle.Scheduled:
				perPod[r.Status.AssignedPod]++
				assert.Equal(t, uids[r.Status.AssignedPod], r.Status.AssignedPodUID, "assignedPodUID of %s", r.Name)
				assert.NotNil(t, r.Status.ScheduledTime)
				assert.True(t, apimeta.IsStatusConditionTrue(r.Status.Conditions, lifecycle.ConditionScheduled))
			case lifecycle.Pending:
				pending = r.Name
				assert.Equal(t, lifecycle.ReasonNoCapacity, scheduledReason(&r))
				assert.Contains(t, r.Status.Message, "full")
			}
		}
		for _, p := range fake {
			assert.Equal(t, capacity, perPod[p.Name], "Runs on %s", p.Name)
		}
	})
	require.NotEmpty(t, pending)

	t.Run("the waiting Run stays Pending while every slot is held", func(t *testing.T) {
		// Reads use the test's context: the poll's own ends mid-request.
		err := wait.PollUntilContextTimeout(ctx, framework.PollInterval, 3*time.Second, true, func(context.Context) (bool, error) {
			r, err := runs.Get(ctx, pending, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if r.Status.Phase != lifecycle.Pending {
				return false, fmt.Errorf("%s went %s while no slot was free", pending, r.Status.Phase)
			}
			return false, nil
		})
		require.True(t, wait.Interrupted(err), "still Pending after 3s: %v", err)
	})

	t.Run("releasing a slot schedules the waiting Run there", func(t *testing.T) {
		var done *v1alpha1.Run
		for _, n := range names {
			r, err := runs.Get(ctx, n, metav1.GetOptions{})
			require.NoError(t, err)
			if r.Status.Phase == lifecycle.Scheduled {
				done = r
				break
			}
		}
		require.NotNil(t, done)
		finishRun(ctx, t, client, done)
		var last *v1alpha1.Run
		err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			last, err = runs.Get(ctx, pending, metav1.GetOptions{})
			if seen.Err(err) {
				return false, nil
			}
			return last.Status.Phase == lifecycle.Scheduled, nil
		})
		require.NoError(t, err, "last: %+v", last)
		assert.Equal(t, done.Status.AssignedPod, last.Status.AssignedPod, "the freed slot is the only one")
	})

	t.Run("a Pending Run asked to cancel is Cancelled", func(t *testing.T) {
		_, err := runs.Create(ctx, newTaskRun("cancel-me", "x"), metav1.CreateOptions{})
		require.NoError(t, err)
		waitRun(ctx, t, client, ns, "cancel-me", "Pending with NoCapacity", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Pending && scheduledReason(r) == lifecycle.ReasonNoCapacity
		})
		_, err = f.Kubectl(ctx, "patch", "run", "cancel-me", "-n", ns, "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err)
		r := waitRun(ctx, t, client, ns, "cancel-me", "Cancelled", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Cancelled
		})
		assert.NotNil(t, r.Status.CompletionTime)
		assert.Empty(t, r.Status.AssignedPod)
		cond := apimeta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, cond)
		assert.Equal(t, lifecycle.ReasonCancelled, cond.Reason)
	})

	t.Run("a Run of a missing Runtime says so", func(t *testing.T) {
		_, err := runs.Create(ctx, newTaskRun("orphan", "missing"), metav1.CreateOptions{})
		require.NoError(t, err)
		r := waitRun(ctx, t, client, ns, "orphan", "Pending with RuntimeNotFound", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Pending && scheduledReason(r) == lifecycle.ReasonRuntimeNotFound
		})
		assert.Contains(t, r.Status.Message, `"missing"`)
	})
}

// TestSchedulerPlacesRunsOnlyOnPodsOfTheRuntimesDeployment offers the
// scheduler a Ready Pod that carries the Runtime's label and renews a
// heartbeat Lease but belongs to a Deployment of the test's own: it never
// gets a Run, and the Runs waiting say why; a Pod of the Runtime's own
// Deployment gets them.
func TestSchedulerPlacesRunsOnlyOnPodsOfTheRuntimesDeployment(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sched-owned")
	ctx := framework.Context(t, 4*time.Minute)
	runs := client.KruntimesV1alpha1().Runs(ns)

	const capacity = 2
	_, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("x", 0, capacity), metav1.CreateOptions{})
	require.NoError(t, err)
	impostors := labelledPods(ctx, t, f, ns, "impostor", "x", 1)
	heartbeat(t, f, impostors)
	impostor := impostors[0].Name

	names := []string{"run-0", "run-1", "run-2"}
	_, err = runs.Create(ctx, newTaskRun(names[0], "x"), metav1.CreateOptions{})
	require.NoError(t, err)
	r := waitRun(ctx, t, client, ns, names[0], "Pending, the labelled Pod no candidate", func(r *v1alpha1.Run) bool {
		return r.Status.Phase == lifecycle.Pending && scheduledReason(r) == lifecycle.ReasonNoCapacity &&
			strings.Contains(r.Status.Message, "1 not a Pod of the Runtime's Deployment")
	})
	assert.Empty(t, r.Status.AssignedPod)

	owned := fakeRuntimePods(ctx, t, f, client, ns, "x", 1)
	heartbeat(t, f, owned)
	for _, n := range names[1:] {
		_, err := runs.Create(ctx, newTaskRun(n, "x"), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	items := waitRuns(ctx, t, client, ns, "2 Scheduled on the Runtime's Pod, 1 Pending", func(items []v1alpha1.Run) bool {
		return countPhase(items, lifecycle.Scheduled) == capacity && countPhase(items, lifecycle.Pending) == 1
	})
	for _, r := range items {
		switch r.Status.Phase {
		case lifecycle.Scheduled:
			assert.Equal(t, owned[0].Name, r.Status.AssignedPod, "Run %s", r.Name)
			assert.Equal(t, owned[0].UID, r.Status.AssignedPodUID, "Run %s", r.Name)
		case lifecycle.Pending:
			// The impostor's free slots do not count: the Run waits for
			// the Runtime's full Pod.
			waitRun(ctx, t, client, ns, r.Name, "Pending, saying why", func(r *v1alpha1.Run) bool {
				return strings.Contains(r.Status.Message, "1 are full") &&
					strings.Contains(r.Status.Message, "1 not a Pod of the Runtime's Deployment")
			})
		}
	}
	// The impostor stays Ready with a fresh heartbeat all along: for a
	// while longer, no Run lands on it.
	// Reads use the test's context: the poll's own ends mid-request.
	err = wait.PollUntilContextTimeout(ctx, framework.PollInterval, 3*time.Second, true, func(context.Context) (bool, error) {
		list, err := runs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, r := range list.Items {
			if r.Status.AssignedPod == impostor {
				return false, fmt.Errorf("run %s was placed on %s, a Pod not of the Runtime's Deployment", r.Name, impostor)
			}
		}
		return false, nil
	})
	require.True(t, wait.Interrupted(err), "no Run on the impostor: %v", err)
}

func scheduledReason(r *v1alpha1.Run) string {
	if c := apimeta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionScheduled); c != nil {
		return c.Reason
	}
	return ""
}

func countPhase(items []v1alpha1.Run, phase lifecycle.Phase) int {
	n := 0
	for _, r := range items {
		if r.Status.Phase == phase {
			n++
		}
	}
	return n
}

// waitRuns polls the Runs of ns until done holds and returns them.
func waitRuns(ctx context.Context, t *testing.T, client versioned.Interface, ns, what string, done func([]v1alpha1.Run) bool) []v1alpha1.Run {
	t.Helper()
	return waitRunsTimeout(ctx, t, client, ns, what, framework.ShortTimeout, done)
}

func waitRunsTimeout(ctx context.Context, t *testing.T, client versioned.Interface, ns, what string, timeout time.Duration, done func([]v1alpha1.Run) bool) []v1alpha1.Run {
	t.Helper()
	var items []v1alpha1.Run
	err := framework.Poll(ctx, framework.PollInterval, timeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		list, err := client.KruntimesV1alpha1().Runs(ns).List(ctx, metav1.ListOptions{})
		if seen.Err(err) {
			return false, nil
		}
		items = list.Items
		return done(items), nil
	})
	if err != nil {
		sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
		for _, r := range items[:min(len(items), 100)] {
			t.Logf("%s: %s pod=%s reason=%s message=%q", r.Name, r.Status.Phase, r.Status.AssignedPod, scheduledReason(&r), r.Status.Message)
		}
	}
	require.NoError(t, err, "waiting for %s", what)
	return items
}

func waitRun(ctx context.Context, t *testing.T, client versioned.Interface, ns, name, what string, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	t.Helper()
	return waitRunTimeout(ctx, t, client, ns, name, what, framework.ShortTimeout, done)
}

func waitRunTimeout(ctx context.Context, t *testing.T, client versioned.Interface, ns, name, what string, timeout time.Duration, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	t.Helper()
	var last *v1alpha1.Run
	err := framework.Poll(ctx, framework.PollInterval, timeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		r, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		last = r
		return done(r), nil
	})
	require.NoError(t, err, "waiting for Run %s to be %s; last status %+v", name, what, last)
	return last
}

// finishRun moves a Scheduled Run through Running to Succeeded, as runtimed
// does.
func finishRun(ctx context.Context, t *testing.T, client versioned.Interface, run *v1alpha1.Run) {
	t.Helper()
	runs := client.KruntimesV1alpha1().Runs(run.Namespace)
	now := metav1.NowMicro()
	run = run.DeepCopy()
	run.Status.Phase = lifecycle.Running
	run.Status.StartTime = &now
	run, err := runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)
	run.Status.Phase = lifecycle.Succeeded
	run.Status.CompletionTime = &now
	run.Status.ExitCode = ptr.To[int32](0)
	apimeta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: lifecycle.ConditionCompleted, Status: metav1.ConditionTrue, Reason: lifecycle.ReasonSucceeded,
		LastTransitionTime: metav1.NewTime(now.Time),
	})
	_, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// A Runtime whose code runs as a non-root user gets Pods in a namespace that
// enforces Pod Security "restricted": the runtimed sidecar takes that user
// and is itself unprivileged, so kube-apiserver's PodSecurity admission lets
// the ReplicaSet create the Pods.
func TestRuntimePodsMeetPodSecurityRestricted(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "restricted")
	ctx := framework.Context(t, 3*time.Minute)
	_, err := f.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	rt := newTestRuntime("bash", 1, 1)
	rt.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](65532),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	_, err = client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, rt, metav1.CreateOptions{})
	require.NoError(t, err)

	selector := lifecycle.LabelRuntime + "=bash"
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if seen.Err(err) {
			return false, nil
		}
		if len(pods.Items) == 0 {
			// PodSecurity's refusal shows on the ReplicaSet as FailedCreate.
			events, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
			if err == nil && len(events.Items) > 0 {
				seen.State("ReplicaSet could not create a Pod: %s", events.Items[len(events.Items)-1].Message)
			}
			return false, nil
		}
		return true, nil
	})
	require.NoError(t, err, "the Runtime's Pod is created in a namespace enforcing Pod Security restricted")
}
