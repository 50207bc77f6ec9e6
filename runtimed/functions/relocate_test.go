package functions

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

const sleepPython = "import time\ndef handle(event, context):\n    time.sleep(event)\n    return 'slept'\n"

// TestRelocateGivesBackEveryFunctionAtTheSameAttempt is SIGTERM on a Pod
// holding two Ready functions, one with an invocation in flight: that
// invocation finishes inside the drain, then both Runs are Pending at
// attempt 1 with reason Relocating, without assignment or finalizer;
// nothing of them is left on the Runtime Server; invokes are refused as
// not admitted; and a Run bound afterwards is not claimed.
func TestRelocateGivesBackEveryFunctionAtTheSameAttempt(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "busy", sleepPython, "handler.handle")
	h.scheduled(t, "idle", echoPython, "handler.handle")
	busy := h.waitFor(t, "busy", "Ready", phaseIs(lifecycle.Ready))
	idle := h.waitFor(t, "idle", "Ready", phaseIs(lifecycle.Ready))

	id, err := h.controller.Admit(busy.UID, 1, testPodUID)
	require.NoError(t, err)
	type answer struct {
		resp *runtimev1.InvokeFunctionResponse
		err  error
	}
	inFlight := make(chan answer, 1)
	go func() {
		resp, err := h.functions.InvokeFunction(t.Context(), &runtimev1.InvokeFunctionRequest{RunUid: string(busy.UID), RegistrationId: id,
			InvocationId: "in-flight", Input: []byte(`1`)})
		inFlight <- answer{resp, err}
	}()
	require.Eventually(t, func() bool {
		return h.registrations(t)[busy.UID].GetInFlight() > 0
	}, 10*time.Second, 10*time.Millisecond, "the invocation is in flight")

	started := time.Now()
	h.controller.Relocate(t.Context(), 5*time.Second)
	select {
	case got := <-inFlight:
		require.NoError(t, got.err, "the invocation in flight finished inside the drain")
		assert.JSONEq(t, `"slept"`, string(got.resp.GetOutput()))
	case <-time.After(5 * time.Second):
		// Its answer is on the wire when Relocate returns: the slot was
		// free, so the handler had returned.
		t.Fatal("the invocation in flight did not answer")
	}
	assert.Less(t, time.Since(started), 5*time.Second, "a one-second invocation does not take the whole drain")

	for _, before := range []*v1alpha1.Run{busy, idle} {
		run := h.get(t, before.Name)
		assert.Equal(t, lifecycle.Pending, run.Status.Phase, "%s goes back to Pending", run.Name)
		assert.Equal(t, int32(1), run.Status.Attempt, "%s spends no attempt", run.Name)
		assert.Empty(t, run.Status.AssignedPod, "%s has no assignment", run.Name)
		assert.Empty(t, run.Status.AssignedPodUID)
		assert.False(t, slices.Contains(run.Finalizers, lifecycle.FinalizerRegistrationCleanup), "%s keeps nothing on this Pod", run.Name)
		ready := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, lifecycle.ReasonRelocating, ready.Reason)
		assert.Contains(t, run.Status.Message, testPodName, "the message names the Pod")
		_, err := h.controller.Admit(before.UID, 1, testPodUID)
		assert.True(t, errors.Is(err, ErrNotAdmitted), "%s is refused as not admitted: %v", run.Name, err)
	}
	assert.Empty(t, h.registrations(t), "nothing is registered on the Runtime Server")
	assert.Zero(t, h.slots.Used(), "every slot is free")

	late := h.scheduled(t, "late", echoPython, "handler.handle")
	// The workers are stopped and the slots closed: a bound Run stays
	// Scheduled for recovery to place elsewhere.
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		run, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Get(ctx, late.Name, metav1.GetOptions{})
		return err == nil && run.Status.Phase != lifecycle.Scheduled, nil
	})
	assert.True(t, wait.Interrupted(err), "a Run bound to a Pod shutting down is not claimed: %v", err)
	assert.False(t, h.slots.Acquire(late.UID, lifecycle.ModeFunction), "the slots are closed")
}

// heartbeatState is a heartbeat whose freshness the test sets.
type heartbeatState struct{ err error }

func (h *heartbeatState) Fresh() error { return h.err }

// TestLapsedHeartbeatFencesInvokes: once the Pod's own heartbeat Lease has
// lapsed, runtimed admits no invocation (not started, so the apiserver
// answers 503): recovery may be moving its functions; once renewed, it
// serves again.
func TestLapsedHeartbeatFencesInvokes(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "fenced", echoPython, "handler.handle")
	run := h.waitFor(t, "fenced", "Ready", phaseIs(lifecycle.Ready))
	beat := &heartbeatState{err: errors.New("the heartbeat Lease was last renewed 12s ago")}
	h.controller.heartbeat = beat
	_, err := h.controller.Admit(run.UID, 1, testPodUID)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrNotAdmitted), "refused as not started: %v", err)
	assert.Contains(t, err.Error(), "heartbeat has lapsed")
	beat.err = nil
	_, err = h.controller.Admit(run.UID, 1, testPodUID)
	assert.NoError(t, err, "a renewed heartbeat serves again")
}

// TestRelocateCancelsWhatOutlastsTheDrain: an invocation still running when
// the drain ends is cancelled before the Run is given back, so nothing of
// it runs on when the function is placed elsewhere.
func TestRelocateCancelsWhatOutlastsTheDrain(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "slow", sleepPython, "handler.handle")
	run := h.waitFor(t, "slow", "Ready", phaseIs(lifecycle.Ready))
	id, err := h.controller.Admit(run.UID, 1, testPodUID)
	require.NoError(t, err)
	inFlight := make(chan error, 1)
	go func() {
		_, err := h.functions.InvokeFunction(t.Context(), &runtimev1.InvokeFunctionRequest{RunUid: string(run.UID), RegistrationId: id,
			InvocationId: "too-long", Input: []byte(`30`)})
		inFlight <- err
	}()
	require.Eventually(t, func() bool {
		return h.registrations(t)[run.UID].GetInFlight() > 0
	}, 10*time.Second, 10*time.Millisecond, "the invocation is in flight")

	started := time.Now()
	h.controller.Relocate(t.Context(), 300*time.Millisecond)
	assert.Less(t, time.Since(started), 15*time.Second, "the drain bounds the relocation, not the 30 s invocation")
	select {
	case err := <-inFlight:
		assert.Error(t, err, "the invocation that outlasted the drain was cancelled")
	case <-time.After(5 * time.Second):
		t.Fatal("the invocation that outlasted the drain did not end")
	}
	given := h.get(t, "slow")
	assert.Equal(t, lifecycle.Pending, given.Status.Phase)
	assert.Equal(t, int32(1), given.Status.Attempt)
	assert.Empty(t, h.registrations(t))
}
