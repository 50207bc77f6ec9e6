package functions

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

func twoAttempts(r *v1alpha1.Run) {
	r.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2}
}

// TestRestartReadoptsWithoutAStatusWrite: a restarted runtimed finds the
// registration the Runtime Server kept, serves it under the same ID and
// attempt, and writes nothing.
func TestRestartReadoptsWithoutAStatusWrite(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "kept", echoPython, "handler.handle")
	before := h.waitFor(t, "kept", "Ready", phaseIs(lifecycle.Ready))
	id, err := h.controller.Admit(before.UID, 1, testPodUID)
	require.NoError(t, err)

	h.stopController()
	h.startController(t)
	var readopted string
	err = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		readopted, err = h.controller.Admit(before.UID, 1, testPodUID)
		return err == nil, nil
	})
	require.NoError(t, err, "the restarted controller admits invokes again: %v", err)
	assert.Equal(t, id, readopted, "the same registration, not a new one")
	after := h.get(t, "kept")
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "no status write when nothing changed")
	assert.Equal(t, 1, h.slots.Used(), "the adopted registration holds its slot")
	resp := h.invoke(t, after, `1`)
	assert.JSONEq(t, `{"echo":1}`, string(resp.GetOutput()))
}

// TestRuntimeServerRestartRegistersTheNextAttempt: the registration is gone
// with the Runtime Server; the Run is not Ready until it registered again,
// as attempt 2, on the same Pod.
func TestRuntimeServerRestartRegistersTheNextAttempt(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "survivor", echoPython, "handler.handle", twoAttempts)
	run := h.waitFor(t, "survivor", "Ready", phaseIs(lifecycle.Ready))

	h.stopRuntimeServer()
	h.stopRuntimeServer = h.startRuntimeServer(t, nil)
	again := h.waitFor(t, "survivor", "Ready at attempt 2", readyAt(2))
	assert.Equal(t, run.Status.AssignedPodUID, again.Status.AssignedPodUID, "on the same Pod")
	regs := h.registrations(t)
	require.Contains(t, regs, run.UID)
	assert.Equal(t, int64(2), regs[run.UID].GetRegistrationAttempt())
	resp := h.invoke(t, again, `2`)
	assert.JSONEq(t, `{"echo":2}`, string(resp.GetOutput()))
}

// TestWorkerDeathRegistersTheNextAttempt kills the Python worker of a Ready
// function: Ready=False, then Ready again with attempt 2.
func TestWorkerDeathRegistersTheNextAttempt(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "fragile", echoPython, "handler.handle", twoAttempts)
	run := h.waitFor(t, "fragile", "Ready", phaseIs(lifecycle.Ready))

	pid := workerPID(t, h.workspace.RunDir(run.UID))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	notReady := h.waitFor(t, "fragile", "not Ready", func(r *v1alpha1.Run) bool { return r.Status.Attempt == 2 })
	if notReady.Status.Phase == lifecycle.Running {
		cond := meta.FindStatusCondition(notReady.Status.Conditions, lifecycle.ConditionReady)
		require.NotNil(t, cond)
		assert.Equal(t, metav1.ConditionFalse, cond.Status)
		assert.Equal(t, lifecycle.ReasonRegistering, cond.Reason)
	}
	again := h.waitFor(t, "fragile", "Ready at attempt 2", readyAt(2))
	assert.Contains(t, h.registrations(t), run.UID)
	_, err := h.controller.Admit(run.UID, 1, testPodUID)
	assert.ErrorIs(t, err, ErrNotAdmitted, "the lost attempt is fenced off")
	resp := h.invoke(t, again, `3`)
	assert.JSONEq(t, `{"echo":3}`, string(resp.GetOutput()))
}

// TestWorkerDeathWithoutAttemptsLeftFails: with no attempt left, a lost
// registration ends the Run as Failed with reason RegistrationLost.
func TestWorkerDeathWithoutAttemptsLeftFails(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "once", echoPython, "handler.handle")
	run := h.waitFor(t, "once", "Ready", phaseIs(lifecycle.Ready))
	require.NoError(t, syscall.Kill(workerPID(t, h.workspace.RunDir(run.UID)), syscall.SIGKILL))
	failed := h.waitFor(t, "once", "Failed", phaseIs(lifecycle.Failed))
	completed := meta.FindStatusCondition(failed.Status.Conditions, lifecycle.ConditionCompleted)
	require.NotNil(t, completed)
	assert.Equal(t, lifecycle.ReasonRegistrationLost, completed.Reason)
	assert.Contains(t, failed.Status.Message, "died while idle")
}

// workerPID finds the Python worker serving the function in dir: it works
// in that directory.
func workerPID(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		entries, _ := filepath.Glob("/proc/[0-9]*/cwd")
		for _, e := range entries {
			if cwd, err := os.Readlink(e); err == nil && cwd == dir {
				pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(e)))
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "no worker process serves %s", dir)
	return pid
}

// TestIdleTimeoutFollowsTheRuntimeServersClock: with one fake clock for
// runtimed and the Runtime Server, an invocation postpones the idle
// deadline, and the Run expires exactly when idleTimeoutSeconds passed
// without one.
func TestIdleTimeoutFollowsTheRuntimeServersClock(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	h := start(t, harnessOptions{clock: clk})
	h.scheduled(t, "idle", echoPython, "handler.handle", func(r *v1alpha1.Run) {
		r.Spec.Mode.Function.IdleTimeoutSeconds = ptr.To[int32](30)
	})
	run := h.waitFor(t, "idle", "Ready", phaseIs(lifecycle.Ready))
	registered := time.Unix(0, h.registrations(t)[run.UID].GetRegisteredUnixNano())

	// An invocation 29 s in moves the deadline to 59 s.
	clk.SetTime(registered.Add(29 * time.Second))
	h.invoke(t, run, `{}`)
	clk.SetTime(registered.Add(31 * time.Second))
	h.waitForIdleDeadline(t, run, registered.Add(59*time.Second))
	assert.Equal(t, lifecycle.Ready, h.get(t, "idle").Status.Phase, "activity postponed the idle timeout")
	_, err := h.controller.Admit(run.UID, 1, testPodUID)
	assert.NoError(t, err, "still accepting")

	clk.SetTime(registered.Add(60 * time.Second))
	expired := h.waitFor(t, "idle", "Timeout", phaseIs(lifecycle.Timeout))
	completed := meta.FindStatusCondition(expired.Status.Conditions, lifecycle.ConditionCompleted)
	require.NotNil(t, completed)
	assert.Equal(t, lifecycle.ReasonIdleTimeout, completed.Reason)
	assert.NotContains(t, h.registrations(t), run.UID)
}

// waitForIdleDeadline waits until the controller saw the Runtime Server's
// idle deadline move to want, stepping nothing: the watch ticks on the
// fake clock's last step.
func (h *harness) waitForIdleDeadline(t *testing.T, run *v1alpha1.Run, want time.Time) {
	t.Helper()
	var seen time.Time
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		h.controller.mu.RLock()
		defer h.controller.mu.RUnlock()
		if reg := h.controller.byUID[run.UID]; reg != nil {
			seen = reg.idleDeadline
		}
		return seen.Equal(want), nil
	})
	require.NoError(t, err, "idle deadline seen: %s, want %s", seen, want)
}
