package tasks

import (
	"fmt"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// stopReason records why runtimed itself cancelled an execution, so that
// the Runtime Server's CANCELLED state can be told apart as a Timeout, a
// user's cancellation, or neither.
type stopReason string

const (
	stopNone      stopReason = ""
	stopTimeout   stopReason = lifecycle.ReasonTimeout
	stopCancelled stopReason = lifecycle.ReasonCancelled
	// stopFenced: the Pod's heartbeat Lease lapsed while the task ran.
	stopFenced stopReason = lifecycle.ReasonOwnerLost
)

// outcomeOf maps how an execution ended to the Run outcome runtimed records.
// ts is nil when the Runtime Server lost the execution.
func outcomeOf(run *v1alpha1.Run, ts *runtimev1.TaskStatus, stop stopReason, deadlinePassed bool) runstatus.Outcome {
	if ts == nil {
		return runstatus.Outcome{
			Phase:  lifecycle.Failed,
			Reason: lifecycle.ReasonExecutionLost,
			Message: fmt.Sprintf("the Runtime Server no longer knows execution %s (it restarted or forgot it); the attempt is lost",
				runstatus.ExecutionID(run.UID, run.Status.Attempt)),
		}
	}
	exitCode := ts.GetExitCode()
	state := ts.GetState()
	// runtimed's own reason for stopping wins: it cancelled the process for
	// exactly that reason, whatever the race with the exit was.
	switch {
	case stop == stopTimeout || state == runtimev1.TaskState_TASK_STATE_TIMED_OUT:
		return runstatus.Outcome{Phase: lifecycle.Timeout, Reason: lifecycle.ReasonTimeout,
			Message: fmt.Sprintf("the task exceeded spec.timeout (%s from startTime) and was killed", timeoutOf(run))}
	case stop == stopCancelled:
		return runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
			Message: "the task was cancelled because spec.cancelRequested is true"}
	case stop == stopFenced:
		// An attempt lost with its owner, as recovery would record it: the
		// retry policy places the next one at once.
		return runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonOwnerLost,
			Message: "the task was killed because this Pod's heartbeat Lease lapsed: past it, recovery may start the Run's next attempt on another Pod, and one attempt must never run on two"}
	}
	switch state {
	case runtimev1.TaskState_TASK_STATE_SUCCEEDED:
		return runstatus.CheckOutputs(runstatus.Outcome{Phase: lifecycle.Succeeded, Reason: lifecycle.ReasonSucceeded,
			ExitCode: &exitCode, Outputs: ts.GetOutputs()})
	case runtimev1.TaskState_TASK_STATE_FAILED:
		reason, message := ts.GetReason(), ts.GetMessage()
		if reason == "" {
			reason = lifecycle.ReasonNonZeroExit
		} else if why := runstatus.InvalidReason(reason); why != "" {
			// A custom Runtime Server's reason lands in a condition, an
			// Event and retryableReasons matching; one the API would
			// refuse would fail every status write of the Run.
			message = fmt.Sprintf("%s (the Runtime Server reported the reason %.64q, which %s)", message, reason, why)
			reason = lifecycle.ReasonNonZeroExit
		}
		o := runstatus.Outcome{Phase: lifecycle.Failed, Reason: reason,
			Message: runstatus.StderrTail(message, ts.GetStderr())}
		if reason != lifecycle.ReasonStartFailed {
			o.ExitCode = &exitCode
		}
		return o
	case runtimev1.TaskState_TASK_STATE_CANCELLED:
		// Cancelled by someone else, or by a runtimed that restarted before
		// it recorded why: decide from the Run itself.
		switch {
		case run.Spec.CancelRequested:
			return outcomeOf(run, ts, stopCancelled, deadlinePassed)
		case deadlinePassed:
			return outcomeOf(run, ts, stopTimeout, deadlinePassed)
		}
		return runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonExecutionLost,
			Message: "the Runtime Server cancelled the execution without runtimed asking; the attempt is lost"}
	}
	return runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonExecutionLost,
		Message: fmt.Sprintf("the Runtime Server reported the unexpected final state %s", state)}
}

func timeoutOf(run *v1alpha1.Run) string {
	if run.Spec.Timeout == nil {
		return "none"
	}
	return run.Spec.Timeout.Duration.String()
}
