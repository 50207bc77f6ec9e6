package runstatus

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
	kruntimesclient "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/tombstone"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

// ExecutionID is the Runtime Server task ID of one attempt of a Run. Execute
// is idempotent per ID, and a new attempt must never be mistaken for an old
// one, so the ID names both.
func ExecutionID(uid types.UID, attempt int32) string {
	return fmt.Sprintf("%s-%d", uid, attempt)
}

// ParseExecutionID is the inverse of ExecutionID; ok is false for task IDs
// that runtimed did not choose.
func ParseExecutionID(id string) (uid types.UID, attempt int32, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, false
	}
	var n int32
	if _, err := fmt.Sscanf(id[i+1:], "%d", &n); err != nil || n < 1 || fmt.Sprint(n) != id[i+1:] {
		return "", 0, false
	}
	return types.UID(id[:i]), n, true
}

// DeadlinePassed reports whether run's spec.timeout has ended it at now.
func DeadlinePassed(run *v1alpha1.Run, now time.Time) bool {
	d := Deadline(run)
	return !d.IsZero() && !now.Before(d)
}

// Deadline is when spec.timeout ends the Run, counted from status.startTime;
// zero when the Run has no timeout or has not started.
func Deadline(run *v1alpha1.Run) time.Time { return retry.Deadline(run) }

// Claim returns the status of run claimed by this Pod at now: Running with a
// fresh startTime, same attempt and assignment. A function is not Ready
// while it registers (condition Ready=False reason Registering).
func Claim(run *v1alpha1.Run, now metav1.MicroTime) *v1alpha1.Run {
	out := run.DeepCopy()
	out.Status.Phase = lifecycle.Running
	out.Status.StartTime = &now
	out.Status.CompletionTime = nil
	out.Status.ExitCode = nil
	out.Status.Outputs = nil
	out.Status.Message = ""
	if run.Spec.Mode.Function != nil {
		setReady(out, metav1.ConditionFalse, lifecycle.ReasonRegistering,
			fmt.Sprintf("registering attempt %d on Pod %s", run.Status.Attempt, run.Status.AssignedPod), now.Time)
	}
	return out
}

// Ready returns the status of a function Run whose registration is live on
// its Pod at now: phase Ready, readyTime, an endpoint and condition
// Ready=True reason FunctionRegistered. The endpoint only says that the Run
// has one: kruntimes-apiserver's runs/status strategy writes its URL and CA
// (its --invoke-endpoint flags), whatever a writer sends.
func Ready(run *v1alpha1.Run, now time.Time) *v1alpha1.Run {
	out := run.DeepCopy()
	ready := metav1.NewMicroTime(now)
	out.Status.Phase = lifecycle.Ready
	out.Status.ReadyTime = &ready
	out.Status.Endpoint = &v1alpha1.RunEndpoint{Protocol: v1alpha1.RunEndpointProtocolHTTPS}
	out.Status.Message = ""
	setReady(out, metav1.ConditionTrue, lifecycle.ReasonFunctionRegistered,
		fmt.Sprintf("attempt %d is registered on Pod %s and accepts invokes", run.Status.Attempt, run.Status.AssignedPod), now)
	return out
}

// Reregister returns the status of a Ready function Run whose registration
// was lost, for the retry d decided: back to Running on the same Pod with
// attempt d.NextAttempt, not Ready (reason Registering) until it registered
// again. The lifetime still counts from the first claim's startTime.
func Reregister(run *v1alpha1.Run, d retry.Decision, now time.Time) *v1alpha1.Run {
	out := run.DeepCopy()
	out.Status.Phase = lifecycle.Running
	out.Status.Attempt = d.NextAttempt
	out.Status.Message = validation.BoundMessage(d.Failure.Message)
	setReady(out, metav1.ConditionFalse, lifecycle.ReasonRegistering,
		fmt.Sprintf("%s; registering attempt %d on Pod %s", d.Why, d.NextAttempt, run.Status.AssignedPod), now)
	return out
}

// Relocate returns the status of a claimed function Run (Running or Ready)
// that this Pod gave back because it is shutting down gracefully: Pending
// at the same attempt, the assignment and the times of the attempt's
// placement cleared, conditions Scheduled and Ready False with reason
// Relocating, so the scheduler places it again at once (no backoff) and no
// attempt is spent. The caller has stopped the function on this Pod first.
func Relocate(run *v1alpha1.Run, why string, now time.Time) *v1alpha1.Run {
	out := run.DeepCopy()
	st := &out.Status
	st.Phase = lifecycle.Pending
	st.AssignedPod, st.AssignedPodUID = "", ""
	st.ScheduledTime, st.StartTime, st.ReadyTime, st.CompletionTime = nil, nil, nil, nil
	st.Endpoint = nil
	msg := fmt.Sprintf("%s; attempt %d was stopped there and is placed on another Pod", why, run.Status.Attempt)
	st.Message = validation.BoundMessage(msg)
	for _, typ := range []string{lifecycle.ConditionScheduled, lifecycle.ConditionReady} {
		meta.RemoveStatusCondition(&st.Conditions, typ)
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:               typ,
			Status:             metav1.ConditionFalse,
			Reason:             lifecycle.ReasonRelocating,
			Message:            validation.BoundMessage(msg),
			ObservedGeneration: run.Generation,
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	return out
}

func setReady(run *v1alpha1.Run, status metav1.ConditionStatus, reason, message string, now time.Time) {
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type:               lifecycle.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            validation.BoundMessage(message),
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// Outcome is how one execution ended, as runtimed saw it.
type Outcome struct {
	// Phase is the terminal phase the execution asks for: Succeeded, Failed,
	// Timeout or Cancelled. Failed may still become a retry.
	Phase lifecycle.Phase
	// Reason is the CamelCase reason: NonZeroExit, ExecutionLost, Timeout …
	Reason string
	// Message explains the outcome to a human; it is bounded by Finish.
	Message string
	// ExitCode is the program's exit status, nil when it never exited.
	ExitCode *int32
	// Outputs are the task's KEY=VALUE outputs.
	Outputs map[string]string
}

// CheckOutputs turns outputs that the API would reject into a failed
// outcome, so a misbehaving Runtime Server cannot wedge the Run with a
// status update that fails validation forever.
func CheckOutputs(o Outcome) Outcome {
	errs := validation.ValidateOutputs(o.Outputs, field.NewPath("status", "outputs"))
	if len(errs) == 0 {
		return o
	}
	reason := lifecycle.ReasonOutputsInvalid
	for _, e := range errs {
		if e.Type == field.ErrorTypeTooLong || e.Type == field.ErrorTypeTooMany {
			reason = lifecycle.ReasonOutputsTooLarge
		}
	}
	return Outcome{
		Phase:    lifecycle.Failed,
		Reason:   reason,
		Message:  "the task's outputs are out of bounds: " + errs.ToAggregate().Error(),
		ExitCode: o.ExitCode,
	}
}

// Finish returns the status that records o on run at now: a terminal phase,
// or, for a failure that retry.Decide retries, the retry.Requeue of it.
// retried says which.
func Finish(run *v1alpha1.Run, o Outcome, now time.Time) (out *v1alpha1.Run, retried bool) {
	if o.Phase == lifecycle.Failed {
		d := retry.Decide(run.Spec.RetryPolicy, run.Status.Attempt, retry.Failure{Reason: o.Reason, Message: o.Message}, Deadline(run), now)
		if d.Retry {
			return retry.Requeue(run, d, now), true
		}
	}
	out = run.DeepCopy()
	st := &out.Status
	completed := metav1.NewMicroTime(now)
	st.Phase = o.Phase
	st.CompletionTime = &completed
	st.ExitCode = o.ExitCode
	st.Outputs = o.Outputs
	st.Message = validation.BoundMessage(o.Message)
	reason := o.Reason
	if reason == "" {
		reason = string(o.Phase)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               lifecycle.ConditionCompleted,
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		Message:            validation.BoundMessage(conditionMessage(o)),
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
	if run.Spec.Mode.Function != nil {
		setReady(out, metav1.ConditionFalse, reason, conditionMessage(o), now)
	}
	return out, false
}

func conditionMessage(o Outcome) string {
	if o.Message != "" {
		// The first line only: the stderr tail belongs in status.message.
		line, _, _ := strings.Cut(o.Message, "\n")
		return line
	}
	return "the task " + strings.ToLower(string(o.Phase))
}

// StderrTail appends the end of stderr to msg so the whole stays within
// validation.MaxMessageBytes: the last lines of stderr are what explain a
// failure, so the tail is kept and its start is dropped.
func StderrTail(msg string, stderr []byte) string {
	tail := strings.TrimRight(strings.ToValidUTF8(string(stderr), "\uFFFD"), "\n")
	if tail == "" {
		return validation.BoundMessage(msg)
	}
	const header, marker = "; stderr tail:\n", "…"
	room := validation.MaxMessageBytes - len(msg) - len(header)
	if room <= len(marker) {
		return validation.BoundMessage(msg)
	}
	if len(tail) > room {
		start := len(tail) - (room - len(marker))
		for start < len(tail) && !utf8.RuneStart(tail[start]) {
			start++
		}
		tail = marker + tail[start:]
	}
	return msg + header + tail
}

// ReportWorkspaceNotRemoved logs and records as an Event on the Run that its
// workspace could not be removed. Callers release the slot regardless: what
// a program left behind (a directory it made read-only past repair, a busy
// mount) must not keep the Pod's capacity; the workspace keeps its marker,
// so runtimed's startup sweep tries again.
func ReportWorkspaceNotRemoved(logger klog.Logger, recorder record.EventRecorder, key string, uid types.UID, err error) {
	logger.Error(err, "Could not remove the Run's workspace; its slot is released anyway and the startup sweep retries")
	namespace, name, splitErr := cache.SplitMetaNamespaceKey(key)
	if splitErr != nil || recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Run", Namespace: namespace, Name: name, UID: uid}
	recorder.Eventf(ref, corev1.EventTypeWarning, lifecycle.ReasonWorkspaceNotRemoved,
		"The workspace could not be removed (%v); the slot was released and runtimed will retry at its next start", err)
}

// MaxReasonBytes bounds a reason runtimed accepts from a Runtime Server,
// tighter than a condition's 1024 bytes: a reason is a word, not a message.
const MaxReasonBytes = 64

// InvalidReason says why a reason reported by a Runtime Server cannot be a
// Run's reason, or "" when it can: CamelCase as condition reasons are, and at
// most MaxReasonBytes.
func InvalidReason(reason string) string {
	if len(reason) > MaxReasonBytes {
		return fmt.Sprintf("is longer than %d bytes", MaxReasonBytes)
	}
	if msgs := metav1validation.IsValidConditionReason(reason); len(msgs) > 0 {
		return strings.Join(msgs, "; ")
	}
	return ""
}

// IsTask reports whether obj, an informer's Run or the tombstone of one, is
// a task Run; event handlers use it to pick their mode's Runs.
func IsTask(obj any) bool {
	run, ok := tombstone.As[*v1alpha1.Run](obj)
	return ok && run.Spec.Mode.Task != nil
}

// IsFunction reports whether obj, an informer's Run or the tombstone of
// one, is a function Run.
func IsFunction(obj any) bool {
	run, ok := tombstone.As[*v1alpha1.Run](obj)
	return ok && run.Spec.Mode.Function != nil
}

// Logger is the logger of ctx with the Run's identity and attempt.
func Logger(ctx context.Context, run *v1alpha1.Run) klog.Logger {
	return klog.FromContext(ctx).WithValues("namespace", run.Namespace, "run", run.Name, "runUID", run.UID, "attempt", run.Status.Attempt)
}

// Update writes run's status through runs/status with its resourceVersion,
// counting the result; a conflict means the caller's copy was stale.
func Update(ctx context.Context, runs kruntimesclient.RunsGetter, run *v1alpha1.Run) (*v1alpha1.Run, error) {
	updated, err := runs.Runs(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
	switch {
	case err == nil:
		metrics.StatusUpdates.WithLabelValues("ok").Inc()
	case apierrors.IsConflict(err):
		metrics.StatusUpdates.WithLabelValues("conflict").Inc()
	default:
		metrics.StatusUpdates.WithLabelValues("error").Inc()
	}
	return updated, err
}
