package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// endsWithin is how much past spec.timeout a Run that tries to hold its
// slot may take to end, as docs/api.md promises.
const endsWithin = 10 * time.Second

// TestTasksCannotHoldTheirSlot runs, one after the other on a Runtime Pod
// with a single slot, tasks that try to keep it: each must end within
// spec.timeout + 10 s, and the next one can only run if the slot was freed.
// A last task then checks that a terminal Run's status cannot be rewritten.
func TestTasksCannotHoldTheirSlot(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "bounds")
	ctx := framework.Context(t, 8*time.Minute)
	runs, err := versioned.NewForConfig(f.AdminConfig)
	require.NoError(t, err)

	pod := startRuntimePod(ctx, t, f, ns, 1)

	const timeout = 5 * time.Second
	// The escapee leaves the process group and the session through a
	// double fork, ignores SIGTERM and holds stdout and stderr open.
	escapee := func(pidFile string) string {
		return fmt.Sprintf(`(trap '' TERM; setsid bash -c 'trap "" TERM; echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 3600' &)
sleep 3600
`, pidFile)
	}
	cases := []struct {
		name       string
		script     func(dir string) string
		cancel     bool
		wantPhase  lifecycle.Phase
		wantReason string
		// escapes says the script records the PID of an escapee in dir/pid.
		escapes bool
	}{
		{name: "an escaped descendant that ignores SIGTERM is killed at the timeout",
			script: func(dir string) string { return escapee(filepath.Join(dir, "pid")) }, escapes: true,
			wantPhase: lifecycle.Timeout, wantReason: lifecycle.ReasonTimeout},
		{name: "an escaped descendant that ignores SIGTERM is killed on cancel",
			script: func(dir string) string { return escapee(filepath.Join(dir, "pid")) }, escapes: true, cancel: true,
			wantPhase: lifecycle.Cancelled, wantReason: lifecycle.ReasonCancelled},
		{name: "an outputs file that is a FIFO fails the Run",
			script:    func(string) string { return `rm -f "$KRUNTIMES_OUTPUTS"; mkfifo "$KRUNTIMES_OUTPUTS"` },
			wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonOutputsInvalid},
		{name: "outputs that are not UTF-8 fail the Run",
			script:    func(string) string { return `printf 'A=\xff\xfe\n' > "$KRUNTIMES_OUTPUTS"` },
			wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonOutputsInvalid},
		{name: "a workspace entry that cannot be removed does not keep the slot",
			// Run as root on the local node, the task can make a file
			// immutable, which not even runtimed can remove.
			script: func(dir string) string {
				return fmt.Sprintf(`touch stuck && chattr +i stuck && echo "$PWD/stuck" > %s/stuck`, dir)
			},
			wantPhase: lifecycle.Succeeded, wantReason: lifecycle.ReasonSucceeded},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			run := taskRun(fmt.Sprintf("hold-%d", i), tc.script(dir))
			run.Spec.Timeout = &metav1.Duration{Duration: timeout}
			created := createAndBind(ctx, t, runs, ns, run, pod)
			t.Cleanup(func() {
				// Let the namespace's deletion remove what the task made
				// immutable.
				if stuck, err := readTrimmed(filepath.Join(dir, "stuck")); err == nil {
					_ = exec.Command("chattr", "-i", stuck).Run()
				}
			})
			var pids []int
			if tc.escapes {
				pids = []int{waitForPID(ctx, t, filepath.Join(dir, "pid"))}
			}
			if tc.cancel {
				_, err := runs.KruntimesV1alpha1().Runs(ns).Patch(ctx, run.Name, "application/merge-patch+json", []byte(`{"spec":{"cancelRequested":true}}`), metav1.PatchOptions{})
				require.NoError(t, err)
			}
			// The slot is the Pod's only one: a Run still holding it would
			// keep this one from being claimed at all.
			done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout+timeout+endsWithin, "terminal", func(r *v1alpha1.Run) bool {
				return lifecycle.IsTerminal(r.Status.Phase)
			})
			require.Equal(t, tc.wantPhase, done.Status.Phase, "message: %s", done.Status.Message)
			assert.Equal(t, tc.wantReason, completedReason(done))
			require.NotNil(t, done.Status.StartTime)
			require.NotNil(t, done.Status.CompletionTime)
			assert.LessOrEqual(t, done.Status.CompletionTime.Sub(done.Status.StartTime.Time), timeout+endsWithin,
				"the Run ends within spec.timeout + %s of its start", endsWithin)
			waitForProcessesGone(ctx, t, pids)
			if tc.name == cases[len(cases)-1].name {
				waitForEvent(ctx, t, f, ns, created, lifecycle.ReasonWorkspaceNotRemoved)
			}
		})
	}

	t.Run("the slot is free for the next Run, whose terminal status is final", func(t *testing.T) {
		run := createAndBind(ctx, t, runs, ns, taskRun("after", "echo answer=42 >> $KRUNTIMES_OUTPUTS"), pod)
		done := waitForRun(ctx, t, runs, ns, run.Name, runOutcomeTimeout, "terminal", func(r *v1alpha1.Run) bool {
			return lifecycle.IsTerminal(r.Status.Phase)
		})
		require.Equal(t, lifecycle.Succeeded, done.Status.Phase, "message: %s", done.Status.Message)

		forged := done.DeepCopy()
		forged.Status.Outputs = map[string]string{"answer": "43"}
		_, err := runs.KruntimesV1alpha1().Runs(ns).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
		require.True(t, apierrors.IsInvalid(err), "want 422, got %v", err)
		assert.Contains(t, causeFields(err), "status.outputs")
		after, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, run.Name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"answer": "42"}, after.Status.Outputs)
	})
}

func completedReason(run *v1alpha1.Run) string {
	for _, c := range run.Status.Conditions {
		if c.Type == lifecycle.ConditionCompleted {
			return c.Reason
		}
	}
	return ""
}

func causeFields(err error) []string {
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		return nil
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field)
	}
	return out
}

// waitForPID waits until a task wrote a PID to path, and returns it.
func waitForPID(ctx context.Context, t *testing.T, path string) int {
	t.Helper()
	var pid int
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		s, err := readTrimmed(path)
		if seen.Err(err) {
			return false, nil
		}
		_, err = fmt.Sscan(s, &pid)
		return !seen.Err(err), nil
	})
	require.NoError(t, err, "the task records the PID of its escapee in %s", path)
	return pid
}

// waitForEvent waits for an Event with reason on run.
func waitForEvent(ctx context.Context, t *testing.T, f *framework.Framework, ns string, run *v1alpha1.Run, reason string) {
	t.Helper()
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		events, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": run.Name, "reason": reason}.String(),
		})
		if seen.Err(err) {
			return false, nil
		}
		return len(events.Items) > 0, nil
	})
	require.NoError(t, err, "an Event %s on Run %s", reason, run.Name)
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}
