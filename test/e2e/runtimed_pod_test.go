package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	runtimecontroller "kruntimes.io/kruntimes/controllers/runtime"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// Images of a Runtime Pod on the local node.
const (
	runtimedImage      = "kruntimes.io/runtimed:dev"
	runtimeServerImage = "kruntimes.io/kruntimes-runtime:dev"
)

// runtimedTestAccount names the ServiceAccount, Role and RoleBinding of the
// test's Runtime Pod: the bash Runtime's, so the apiserver narrows runtimed
// to its Pod as in a real Runtime. The tests' Runtime "bash" has no
// replicas; the runtime controller creates the same objects for it.
var runtimedTestAccount = runtimepod.ServiceAccountName("bash")

// createRuntimedRBAC grants runtimedTestAccount exactly what the runtime
// controller grants runtimed. The controller may have created the same
// objects first for the test's Runtime "bash"; either way the Role must hold
// exactly the controller's rules.
func createRuntimedRBAC(ctx context.Context, t *testing.T, f *framework.Framework, ns string) {
	t.Helper()
	created := func(err error) { require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err) }
	_, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: runtimedTestAccount}}, metav1.CreateOptions{})
	created(err)
	_, err = f.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: runtimedTestAccount},
		// The runtime controller's own rules, so the test cannot drift from
		// what runtimed gets in a real Runtime.
		Rules: runtimecontroller.RuntimedPolicyRules(),
	}, metav1.CreateOptions{})
	created(err)
	_, err = f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: runtimedTestAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: runtimedTestAccount},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runtimedTestAccount, Namespace: ns}},
	}, metav1.CreateOptions{})
	created(err)
	role, err := f.Client.RbacV1().Roles(ns).Get(ctx, runtimedTestAccount, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, runtimecontroller.RuntimedPolicyRules(), role.Rules)
}

// startRuntimePod creates, in ns, a Runtime "bash" with no replicas (so Runs
// name one that exists, and its Pods, if a runtime controller runs, never
// carry the test's Runs) and a Runtime Pod of capacity slots with runtimed's
// RBAC; it waits for the Pod to be Ready and logs runtimed's tail if the test
// fails.
func startRuntimePod(ctx context.Context, t *testing.T, f *framework.Framework, ns string, capacity int) *corev1.Pod {
	t.Helper()
	_, err := f.KubectlWithInput(ctx, runtimeManifest, "create", "-n", ns, "-f", "-")
	require.NoError(t, err)
	createRuntimedRBAC(ctx, t, f, ns)
	_, err = f.Client.CoreV1().Pods(ns).Create(ctx, runtimePod("runtime-pod", capacity), metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitForReadyPod(ctx, t, f, ns, "app=runtime-pod", "")
	t.Logf("Runtime Pod %s (UID %s) Ready at %s", pod.Name, pod.UID, pod.Status.PodIP)
	t.Cleanup(func() {
		if t.Failed() {
			out, err := f.Kubectl(context.Background(), "logs", "-n", ns, pod.Name, "-c", runtimepod.ContainerRuntimed, "--tail=200")
			t.Logf("runtimed logs (err %v):\n%s", err, out)
		}
	})
	return pod
}

// runtimePod is a Runtime Pod as the runtime controller builds it: the bash
// Runtime Server and runtimed sharing /workspace and /run/kruntimes, runtimed
// with exactly the controller's flags and downward-API environment, and the
// Pod's token mounted into runtimed alone.
func runtimePod(name string, capacity int) *corev1.Pod {
	mounts := []corev1.VolumeMount{
		{Name: runtimepod.VolumeWorkspace, MountPath: runtimepod.WorkspacePath},
		{Name: runtimepod.VolumeSocket, MountPath: runtimepod.SocketDir},
	}
	runtimedMounts := append(slices.Clone(mounts), corev1.VolumeMount{
		Name: runtimepod.VolumeRuntimedAPIAccess, MountPath: runtimepod.ServiceAccountDir, ReadOnly: true,
	})
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			ServiceAccountName:            runtimedTestAccount,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Volumes: []corev1.Volume{
				{Name: runtimepod.VolumeWorkspace, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: runtimepod.VolumeSocket, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				runtimecontroller.RuntimedAPIAccessVolume(),
			},
			Containers: []corev1.Container{
				{
					Name:         runtimepod.ContainerRuntime,
					Image:        runtimeServerImage,
					Args:         []string{"--language=bash", "--listen=" + runtimepod.RuntimeSocket},
					VolumeMounts: mounts,
				},
				{
					Name:  runtimepod.ContainerRuntimed,
					Image: runtimedImage,
					Args: []string{
						"--runtime-socket=" + runtimepod.RuntimeSocket,
						"--workspace-dir=" + runtimepod.WorkspacePath,
						"--capacity=" + strconv.Itoa(capacity),
					},
					Env: []corev1.EnvVar{
						fieldEnv(runtimepod.EnvPodName, "metadata.name"),
						fieldEnv(runtimepod.EnvPodNamespace, "metadata.namespace"),
						fieldEnv(runtimepod.EnvPodUID, "metadata.uid"),
						fieldEnv(runtimepod.EnvPodIP, "status.podIP"),
					},
					Ports:        []corev1.ContainerPort{{Name: "health", ContainerPort: runtimepod.RuntimedHealthPort}},
					VolumeMounts: runtimedMounts,
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("health")}},
						PeriodSeconds: 1,
					},
				},
			},
		},
	}
}

// taskRun is a bash task Run of the Runtime "bash" with inline source.
func taskRun(name, script string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RunSpec{
			Runtime: "bash",
			Source:  v1alpha1.RunSource{Inline: script},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
		},
	}
}

// bindRun does what the scheduler does: bind a Pending Run to pod with an
// optimistic status update.
func bindRun(ctx context.Context, t *testing.T, runs versioned.Interface, ns, name string, pod *corev1.Pod) {
	t.Helper()
	err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if run.Status.Phase != lifecycle.Pending {
			return fmt.Errorf("run %s is %s, not Pending", name, run.Status.Phase)
		}
		now := metav1.NowMicro()
		run.Status.Phase = lifecycle.Scheduled
		run.Status.AssignedPod, run.Status.AssignedPodUID = pod.Name, pod.UID
		run.Status.ScheduledTime = &now
		meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type: lifecycle.ConditionScheduled, Status: metav1.ConditionTrue,
			Reason: lifecycle.ConditionScheduled, Message: "bound by the e2e test to " + pod.Name,
		})
		_, err = runs.KruntimesV1alpha1().Runs(ns).UpdateStatus(ctx, run, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err, "bind Run %s to Pod %s", name, pod.Name)
}

// createAndBind creates run and binds it to pod.
func createAndBind(ctx context.Context, t *testing.T, runs versioned.Interface, ns string, run *v1alpha1.Run, pod *corev1.Pod) *v1alpha1.Run {
	t.Helper()
	created, err := runs.KruntimesV1alpha1().Runs(ns).Create(ctx, run, metav1.CreateOptions{})
	require.NoError(t, err)
	bindRun(ctx, t, runs, ns, run.Name, pod)
	return created
}

// waitForRun polls the Run until done says yes, and returns it.
func waitForRun(ctx context.Context, t *testing.T, runs versioned.Interface, ns, name string, timeout time.Duration, what string, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	t.Helper()
	var last *v1alpha1.Run
	err := framework.Poll(ctx, framework.PollInterval, timeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		last = run
		return done(run), nil
	})
	require.NoError(t, err, "waiting for Run %s: %s; last status: %+v", name, what, statusOf(last))
	return last
}

func statusOf(run *v1alpha1.Run) any {
	if run == nil {
		return nil
	}
	return run.Status
}

func inPhase(phase lifecycle.Phase) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool { return r.Status.Phase == phase }
}

// pidScript runs forever after recording its own PID and its child's in
// dir, so the test can check that cancelling killed both.
func pidScript(dir string) string {
	return fmt.Sprintf("echo $$ > %[1]s/pid.tmp && mv %[1]s/pid.tmp %[1]s/pid\nsleep 3600 &\necho $! > %[1]s/child.tmp && mv %[1]s/child.tmp %[1]s/child\nwait\n", dir)
}

// waitForPIDs waits until the script of pidScript has recorded its PIDs.
func waitForPIDs(ctx context.Context, t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		pids = pids[:0]
		for _, name := range []string{"pid", "child"} {
			raw, err := os.ReadFile(dir + "/" + name)
			if seen.Err(err) {
				return false, nil
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
			if seen.Err(err) {
				return false, nil
			}
			pids = append(pids, pid)
		}
		return true, nil
	})
	require.NoError(t, err, "the task records its PIDs")
	for _, pid := range pids {
		require.True(t, processAlive(pid), "process %d runs", pid)
	}
	return pids
}

// waitForProcessesGone waits until none of pids runs any more.
func waitForProcessesGone(ctx context.Context, t *testing.T, pids []int) {
	t.Helper()
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		for _, pid := range pids {
			if processAlive(pid) {
				seen.State("process %d still runs", pid)
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "processes %v are gone", pids)
}

// processAlive reports whether pid runs; a zombie has already exited.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// runtimedPID finds the runtimed process of the Pod with UID podUID on the
// local node: the node agent runs it as bin/runtimed with POD_UID set.
func runtimedPID(t *testing.T, podUID string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !strings.HasSuffix(exe, "/runtimed") {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(environ), "\x00") {
			if kv == runtimepod.EnvPodUID+"="+podUID {
				return pid
			}
		}
	}
	return 0
}

// watchForRun watches the Run from resourceVersion on and returns the first
// version that done accepts. Unlike polling, it sees a state even when
// another writer (a scheduler) changes the Run right after.
func watchForRun(ctx context.Context, t *testing.T, runs versioned.Interface, ns, name, resourceVersion string, timeout time.Duration, what string, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := runs.KruntimesV1alpha1().Runs(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: resourceVersion,
	})
	require.NoError(t, err)
	var last *v1alpha1.Run
	event, err := watchtools.UntilWithoutRetry(ctx, w, func(e watch.Event) (bool, error) {
		if e.Type == watch.Error {
			// A 410 Gone or a 403 ends the watch; say so, not "timed out".
			return false, fmt.Errorf("watch error: %w", apierrors.FromObject(e.Object))
		}
		run, ok := e.Object.(*v1alpha1.Run)
		if !ok {
			return false, fmt.Errorf("watch sent a %T, not a Run", e.Object)
		}
		last = run
		return done(run), nil
	})
	require.NoError(t, err, "watching Run %s for %s; last status: %+v", name, what, statusOf(last))
	return event.Object.(*v1alpha1.Run)
}
