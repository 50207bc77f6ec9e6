package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// runOutcomeTimeout bounds a short task from bind to terminal status.
const runOutcomeTimeout = 45 * time.Second

// TestRuntimedTasks runs task Runs on one Runtime Pod built as the runtime
// controller builds it, with the test standing in for the scheduler, so it
// depends on neither.
func TestRuntimedTasks(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "runtimed")
	ctx := framework.Context(t, 8*time.Minute)
	runs, err := versioned.NewForConfig(f.AdminConfig)
	require.NoError(t, err)

	pod := startRuntimePod(ctx, t, f, ns, 2)

	t.Run("a task succeeds with exit code 0 and its outputs", func(t *testing.T) {
		run := createAndBind(ctx, t, runs, ns, taskRun("hello", "echo hi; echo answer=42 >> $KRUNTIMES_OUTPUTS"), pod)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "Succeeded", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		require.Equal(t, lifecycle.Succeeded, done.Status.Phase, "message: %s", done.Status.Message)
		require.NotNil(t, done.Status.ExitCode)
		assert.Equal(t, int32(0), *done.Status.ExitCode)
		assert.Equal(t, map[string]string{"answer": "42"}, done.Status.Outputs)
		assert.Equal(t, int32(1), done.Status.Attempt)
		require.NotNil(t, done.Status.StartTime)
		require.NotNil(t, done.Status.CompletionTime)
		assert.False(t, done.Status.CompletionTime.Before(done.Status.StartTime), "completion after start")
		completed := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, metav1.ConditionTrue, completed.Status)
		assert.Equal(t, lifecycle.ReasonSucceeded, completed.Reason)
	})

	t.Run("a failing task fails with NonZeroExit and the stderr tail", func(t *testing.T) {
		script := "echo 'first line' >&2\nfor i in $(seq 1 2000); do echo \"noise $i\" >&2; done\necho 'the last word' >&2\nexit 3\n"
		run := createAndBind(ctx, t, runs, ns, taskRun("fails", script), pod)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "terminal", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		require.Equal(t, lifecycle.Failed, done.Status.Phase)
		require.NotNil(t, done.Status.ExitCode)
		assert.Equal(t, int32(3), *done.Status.ExitCode)
		assert.Contains(t, done.Status.Message, "the last word", "the tail of stderr is kept")
		assert.NotContains(t, done.Status.Message, "first line", "the start of a long stderr is dropped")
		assert.LessOrEqual(t, len(done.Status.Message), 4096)
		completed := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonNonZeroExit, completed.Reason)
	})

	t.Run("a failed attempt is retried, and the last attempt fails", func(t *testing.T) {
		run := taskRun("retried", "echo attempt failed >&2; exit 1")
		// A long backoff: a scheduler, if one runs, leaves the Run alone
		// while it lasts; the test binds the retry itself.
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2, Backoff: &v1alpha1.RetryBackoff{Initial: &metav1.Duration{Duration: time.Minute}}}
		created := createAndBind(ctx, t, runs, ns, run, pod)
		pending := watchForRun(ctx, t, runs, ns, run.Name, created.ResourceVersion, runOutcomeTimeout, "Pending at attempt 2", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2
		})
		assert.Empty(t, pending.Status.AssignedPod, "assignment cleared")
		assert.Empty(t, pending.Status.AssignedPodUID)
		scheduled := meta.FindStatusCondition(pending.Status.Conditions, lifecycle.ConditionScheduled)
		require.NotNil(t, scheduled)
		assert.Equal(t, metav1.ConditionFalse, scheduled.Status)
		assert.Equal(t, lifecycle.ReasonRetrying, scheduled.Reason)
		assert.Contains(t, scheduled.Message, "attempt 1 of 2")

		bindRun(ctx, t, runs, ns, run.Name, pod)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "terminal", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		assert.Equal(t, lifecycle.Failed, done.Status.Phase)
		assert.Equal(t, int32(2), done.Status.Attempt)
		assert.Contains(t, done.Status.Message, "attempt failed")
	})

	t.Run("spec.timeout kills the process and ends the Run as Timeout", func(t *testing.T) {
		dir := t.TempDir()
		run := taskRun("times-out", pidScript(dir))
		run.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Second}
		// Timeouts are never retried, whatever the policy.
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 3}
		createAndBind(ctx, t, runs, ns, run, pod)
		pids := waitForPIDs(ctx, t, dir)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "Timeout", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		require.Equal(t, lifecycle.Timeout, done.Status.Phase, "message: %s", done.Status.Message)
		assert.Equal(t, int32(1), done.Status.Attempt)
		completed := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonTimeout, completed.Reason)
		waitForProcessesGone(ctx, t, pids)
	})

	t.Run("cancelRequested while running ends the Run as Cancelled", func(t *testing.T) {
		dir := t.TempDir()
		run := createAndBind(ctx, t, runs, ns, taskRun("cancelled", pidScript(dir)), pod)
		pids := waitForPIDs(ctx, t, dir)
		waitForRun(ctx, t, runs, ns, run.Name, framework.ShortTimeout, "Running", inPhase(lifecycle.Running))
		_, err := f.Kubectl(ctx, "patch", "run", run.Name, "-n", ns, "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "Cancelled", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		assert.Equal(t, lifecycle.Cancelled, done.Status.Phase, "message: %s", done.Status.Message)
		waitForProcessesGone(ctx, t, pids)
	})

	t.Run("deleting a running Run kills its process", func(t *testing.T) {
		dir := t.TempDir()
		run := createAndBind(ctx, t, runs, ns, taskRun("deleted", pidScript(dir)), pod)
		pids := waitForPIDs(ctx, t, dir)
		waitForRun(ctx, t, runs, ns, run.Name, framework.ShortTimeout, "Running", inPhase(lifecycle.Running))
		require.NoError(t, runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, run.Name, metav1.DeleteOptions{}))
		waitForProcessesGone(ctx, t, pids)
		_, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, run.Name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "a task Run has no finalizer: %v", err)
	})

	t.Run("capacity is never exceeded", func(t *testing.T) {
		dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
		var names []string
		for i, dir := range dirs {
			name := fmt.Sprintf("slot-%d", i)
			names = append(names, name)
			createAndBind(ctx, t, runs, ns, taskRun(name, pidScript(dir)), pod)
		}
		// Two of three hold the Pod's two slots; the third stays Scheduled.
		var running, scheduled []string
		err := framework.Poll(ctx, framework.PollInterval, runOutcomeTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			running, scheduled = nil, nil
			for _, name := range names {
				r, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
				if seen.Err(err) {
					return false, nil
				}
				switch r.Status.Phase {
				case lifecycle.Running:
					running = append(running, name)
				case lifecycle.Scheduled:
					scheduled = append(scheduled, name)
				}
			}
			return len(running) == 2 && len(scheduled) == 1, nil
		})
		require.NoError(t, err, "running %v, scheduled %v", running, scheduled)
		// Freeing a slot lets the waiting Run in.
		_, err = f.Kubectl(ctx, "patch", "run", running[0], "-n", ns, "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err)
		waitForRun(ctx, t, runs, ns, scheduled[0], runOutcomeTimeout, "Running once a slot is free", inPhase(lifecycle.Running))
		for _, name := range names {
			_ = runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
	})

	t.Run("a Running Run whose execution is gone is lost and retried", func(t *testing.T) {
		pid := runtimedPID(t, string(pod.UID))
		require.NotZero(t, pid, "runtimed of Pod %s runs on this machine", pod.Name)
		// Stop runtimed, and play a runtimed that claimed the Run and died
		// before it executed anything.
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		run := taskRun("lost", "echo never runs")
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2, Backoff: &v1alpha1.RetryBackoff{Initial: &metav1.Duration{Duration: time.Minute}}}
		created := createAndBind(ctx, t, runs, ns, run, pod)
		claimed, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, run.Name, metav1.GetOptions{})
		require.NoError(t, err)
		now := metav1.NowMicro()
		claimed.Status.Phase, claimed.Status.StartTime = lifecycle.Running, &now
		_, err = runs.KruntimesV1alpha1().Runs(ns).UpdateStatus(ctx, claimed, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

		pending := watchForRun(ctx, t, runs, ns, run.Name, created.ResourceVersion, runOutcomeTimeout, "Pending at attempt 2", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2
		})
		scheduled := meta.FindStatusCondition(pending.Status.Conditions, lifecycle.ConditionScheduled)
		require.NotNil(t, scheduled)
		assert.Equal(t, lifecycle.ReasonRetrying, scheduled.Reason)
		assert.Contains(t, scheduled.Message, lifecycle.ReasonExecutionLost)
	})

	t.Run("a restarted runtimed re-adopts the execution it left running", func(t *testing.T) {
		dir := t.TempDir()
		run := createAndBind(ctx, t, runs, ns, taskRun("adopted", pidScript(dir)), pod)
		pids := waitForPIDs(ctx, t, dir)
		waitForRun(ctx, t, runs, ns, run.Name, framework.ShortTimeout, "Running", inPhase(lifecycle.Running))
		old := runtimedPID(t, string(pod.UID))
		require.NotZero(t, old)
		require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
		// The node agent restarts the container; wait for the new runtimed to be Ready.
		err := framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			p, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if seen.Err(err) {
				return false, nil
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == runtimepod.ContainerRuntimed {
					return cs.RestartCount > 0 && cs.Ready, nil
				}
			}
			return false, nil
		})
		require.NoError(t, err, "runtimed restarts and becomes Ready")
		for _, pid := range pids {
			assert.True(t, processAlive(pid), "the task survived runtimed's restart")
		}
		current, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, run.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, lifecycle.Running, current.Status.Phase, "the execution was adopted, not lost: %s", current.Status.Message)
		// Only a runtimed that adopted the execution can cancel it.
		_, err = f.Kubectl(ctx, "patch", "run", run.Name, "-n", ns, "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "Cancelled", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		assert.Equal(t, lifecycle.Cancelled, done.Status.Phase, "message: %s", done.Status.Message)
		waitForProcessesGone(ctx, t, pids)
	})

	t.Run("the heartbeat Lease is held by the Pod and renewed", func(t *testing.T) {
		leases := f.Client.CoordinationV1().Leases(ns)
		lease, err := leases.Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, lease.Spec.HolderIdentity)
		assert.Equal(t, string(pod.UID), *lease.Spec.HolderIdentity)
		assert.Equal(t, int32(runtimepod.HeartbeatLeaseDuration/time.Second), *lease.Spec.LeaseDurationSeconds)
		require.Len(t, lease.OwnerReferences, 1)
		assert.Equal(t, pod.UID, lease.OwnerReferences[0].UID)
		first := lease.Spec.RenewTime.Time
		err = framework.Poll(ctx, framework.PollInterval, 3*runtimepod.HeartbeatRenewInterval, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			l, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
			if seen.Err(err) {
				return false, nil
			}
			return l.Spec.RenewTime.After(first), nil
		})
		require.NoError(t, err, "renewTime moves forward within a few renew intervals")
	})

	t.Run("metrics and readiness are served on the Pod IP", func(t *testing.T) {
		run := createAndBind(ctx, t, runs, ns, taskRun("counted", "true"), pod)
		waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "Succeeded", inPhase(lifecycle.Succeeded))
		base := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(runtimepod.RuntimedHealthPort))
		assert.Contains(t, httpGet(ctx, t, base+"/readyz"), "[+]runtime-server ok")
		metrics := map[string]string{}
		for _, line := range strings.Split(httpGet(ctx, t, base+"/metrics"), "\n") {
			if name, value, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "kruntimes_runtimed_") {
				metrics[name] = value
			}
		}
		assert.Equal(t, "2", metrics["kruntimes_runtimed_capacity"])
		assert.NotEmpty(t, metrics[`kruntimes_runtimed_executions_total{phase="Succeeded",reason="Succeeded"}`], "runtimed metrics: %v", metrics)
		assert.NotEmpty(t, metrics[`kruntimes_runtimed_heartbeat_renewals_total{result="ok"}`], "runtimed metrics: %v", metrics)
	})

	t.Run("Events on the Run tell the user what went wrong, and only that", func(t *testing.T) {
		want := map[string]string{"fails": lifecycle.ReasonNonZeroExit, "retried": lifecycle.ReasonRetrying}
		for run, reason := range want {
			err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
				events, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + run})
				if seen.Err(err) {
					return false, nil
				}
				for _, e := range events.Items {
					if e.Reason == reason && e.Source.Component == "runtimed" {
						return true, nil
					}
				}
				return false, nil
			})
			assert.NoError(t, err, "an Event with reason %s on Run %s", reason, run)
		}
		// A routine success writes no Event (Events live in the cluster's
		// etcd); by now the Events of the later Runs have arrived.
		events, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hello"})
		require.NoError(t, err)
		for _, e := range events.Items {
			assert.NotEqual(t, "runtimed", e.Source.Component, "Event %s/%s on a Run that succeeded", e.Reason, e.Message)
		}
	})

	t.Run("runtimed logs one JSON line per execution event", func(t *testing.T) {
		out, err := f.Kubectl(ctx, "logs", "-n", ns, pod.Name, "-c", runtimepod.ContainerRuntimed)
		require.NoError(t, err)
		var completed []map[string]any
		for _, line := range strings.Split(out, "\n") {
			var entry map[string]any
			if json.Unmarshal([]byte(line), &entry) != nil {
				continue
			}
			if entry["msg"] == "Run completed" {
				completed = append(completed, entry)
			}
		}
		require.NotEmpty(t, completed, "runtimed logs:\n%s", out)
		t.Logf("for example: %v", completed[0])
		for _, entry := range completed {
			for _, key := range []string{"namespace", "run", "runUID", "attempt", "phase"} {
				assert.Contains(t, entry, key, "log line %v", entry)
			}
		}
	})
}
