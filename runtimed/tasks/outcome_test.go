package tasks

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

func TestOutcomeOf(t *testing.T) {
	ended := func(state runtimev1.TaskState, exit int32, reason string) *runtimev1.TaskStatus {
		return &runtimev1.TaskStatus{State: state, ExitCode: exit, Reason: reason, Stderr: []byte("oops\n")}
	}
	cancelRequested := &v1alpha1.Run{Spec: v1alpha1.RunSpec{CancelRequested: true}}
	cases := []struct {
		name       string
		run        *v1alpha1.Run
		status     *runtimev1.TaskStatus
		stop       stopReason
		passed     bool
		wantPhase  lifecycle.Phase
		wantReason string
		wantExit   *int32
	}{
		{name: "success", status: ended(runtimev1.TaskState_TASK_STATE_SUCCEEDED, 0, ""), wantPhase: lifecycle.Succeeded, wantReason: lifecycle.ReasonSucceeded, wantExit: new(int32(0))},
		{name: "non-zero exit keeps the code", status: ended(runtimev1.TaskState_TASK_STATE_FAILED, 2, "NonZeroExit"), wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonNonZeroExit, wantExit: new(int32(2))},
		{name: "invalid outputs keep the server's reason", status: ended(runtimev1.TaskState_TASK_STATE_FAILED, 0, lifecycle.ReasonOutputsInvalid), wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonOutputsInvalid, wantExit: new(int32(0))},
		{name: "a custom server's CamelCase reason is kept", status: ended(runtimev1.TaskState_TASK_STATE_FAILED, 1, "QuotaExceeded"), wantPhase: lifecycle.Failed, wantReason: "QuotaExceeded", wantExit: new(int32(1))},
		{name: "a reason that is not CamelCase becomes NonZeroExit", status: ended(runtimev1.TaskState_TASK_STATE_FAILED, 1, "no such thing!"), wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonNonZeroExit, wantExit: new(int32(1))},
		{name: "a reason longer than 64 bytes becomes NonZeroExit", status: ended(runtimev1.TaskState_TASK_STATE_FAILED, 1, strings.Repeat("A", 65)), wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonNonZeroExit, wantExit: new(int32(1))},
		{name: "a program that never started has no exit code", status: ended(runtimev1.TaskState_TASK_STATE_FAILED, -1, lifecycle.ReasonStartFailed), wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonStartFailed},
		{name: "a lost execution", status: nil, wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonExecutionLost},
		{name: "runtimed's timeout wins over the exit it caused", status: ended(runtimev1.TaskState_TASK_STATE_CANCELLED, -1, "Cancelled"), stop: stopTimeout, wantPhase: lifecycle.Timeout, wantReason: lifecycle.ReasonTimeout},
		{name: "the Runtime Server's own timeout", status: ended(runtimev1.TaskState_TASK_STATE_TIMED_OUT, -1, "Timeout"), wantPhase: lifecycle.Timeout, wantReason: lifecycle.ReasonTimeout},
		{name: "cancelled on request", status: ended(runtimev1.TaskState_TASK_STATE_CANCELLED, -1, "Cancelled"), stop: stopCancelled, wantPhase: lifecycle.Cancelled, wantReason: lifecycle.ReasonCancelled},
		{name: "cancelled before a restart, decided from cancelRequested", run: cancelRequested, status: ended(runtimev1.TaskState_TASK_STATE_CANCELLED, -1, "Cancelled"), wantPhase: lifecycle.Cancelled, wantReason: lifecycle.ReasonCancelled},
		{name: "cancelled before a restart, decided from the deadline", status: ended(runtimev1.TaskState_TASK_STATE_CANCELLED, -1, "Cancelled"), passed: true, wantPhase: lifecycle.Timeout, wantReason: lifecycle.ReasonTimeout},
		{name: "cancelled by nobody is a lost attempt", status: ended(runtimev1.TaskState_TASK_STATE_CANCELLED, -1, "Cancelled"), wantPhase: lifecycle.Failed, wantReason: lifecycle.ReasonExecutionLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := tc.run
			if run == nil {
				run = &v1alpha1.Run{}
			}
			o := outcomeOf(run, tc.status, tc.stop, tc.passed)
			assert.Equal(t, tc.wantPhase, o.Phase)
			assert.Equal(t, tc.wantReason, o.Reason)
			if tc.wantExit == nil {
				assert.Nil(t, o.ExitCode)
			} else {
				require.NotNil(t, o.ExitCode)
				assert.Equal(t, *tc.wantExit, *o.ExitCode)
			}
			if tc.wantPhase == lifecycle.Failed && tc.status != nil && tc.wantReason != lifecycle.ReasonExecutionLost {
				assert.Contains(t, o.Message, "oops", "the stderr tail explains a failure")
			}
		})
	}
}
