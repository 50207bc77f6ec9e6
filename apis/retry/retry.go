package retry

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// Backoff defaults, used where the policy leaves a field unset.
const (
	DefaultInitialDelay = time.Second
	DefaultMaxDelay     = 5 * time.Minute
	DefaultFactor       = 2.0
)

// Failure describes why an attempt ended.
type Failure struct {
	// Reason is a CamelCase reason such as ExecutionLost or NonZeroExit.
	Reason string
	// Cancelled is set when the user asked for cancellation: never retried.
	Cancelled bool
	// Message says what went wrong, for the Run's status.message.
	Message string
}

// Decision is what to do after a failed attempt.
type Decision struct {
	// Retry says whether another attempt starts.
	Retry bool
	// Delay is how long to wait before the next attempt; zero when !Retry.
	Delay time.Duration
	// NextAttempt is the attempt number of the retry.
	NextAttempt int32
	// Why explains the decision for the Run's message.
	Why string
	// Failure is the failure the decision is about.
	Failure Failure
}

// Decide returns whether attempt (1-based) of a Run with policy is retried
// after failure, given the Run's deadline (zero when it has none) and now.
// A cancelled Run and a Run whose deadline has passed are never retried.
func Decide(policy *v1alpha1.RetryPolicy, attempt int32, failure Failure, deadline, now time.Time) Decision {
	maxAttempts := int32(1)
	if policy != nil && policy.MaxAttempts > 0 {
		maxAttempts = policy.MaxAttempts
	}
	switch {
	case failure.Cancelled || failure.Reason == lifecycle.ReasonCancelled:
		return Decision{Failure: failure, Why: "cancelled Runs are not retried"}
	case !deadline.IsZero() && !now.Before(deadline):
		return Decision{Failure: failure, Why: "the Run's timeout has passed"}
	case attempt >= maxAttempts:
		return Decision{Failure: failure, Why: fmt.Sprintf("attempt %d of %d failed (%s); no attempts left", attempt, maxAttempts, failure.Reason)}
	case policy != nil && len(policy.RetryableReasons) > 0 && !slices.Contains(policy.RetryableReasons, failure.Reason):
		return Decision{Failure: failure, Why: fmt.Sprintf("reason %s is not in retryPolicy.retryableReasons", failure.Reason)}
	}
	delay := Delay(policy, attempt)
	if !deadline.IsZero() && now.Add(delay).After(deadline) {
		return Decision{Failure: failure, Why: fmt.Sprintf("the next attempt would start after the Run's timeout (backoff %s)", delay)}
	}
	return Decision{
		Retry:       true,
		Delay:       delay,
		NextAttempt: attempt + 1,
		Failure:     failure,
		Why:         fmt.Sprintf("attempt %d of %d failed (%s); retrying in %s", attempt, maxAttempts, failure.Reason, delay),
	}
}

// Requeue returns run sent back to Pending for the retry d decided: attempt
// d.NextAttempt, the assignment and the previous attempt's results cleared,
// and condition Scheduled=False, whose transition time (now) starts the
// backoff NotBefore waits. The reason is Retrying, except for a Run whose
// owner was lost (reason OwnerLost): the failure was its Pod's, so it is
// placed again at once. A function Run's Ready condition turns False with
// the same reason. run itself is not modified.
func Requeue(run *v1alpha1.Run, d Decision, now time.Time) *v1alpha1.Run {
	out := run.DeepCopy()
	st := &out.Status
	st.Phase = lifecycle.Pending
	st.Attempt = d.NextAttempt
	st.AssignedPod, st.AssignedPodUID = "", ""
	st.ScheduledTime, st.StartTime, st.ReadyTime, st.CompletionTime = nil, nil, nil, nil
	st.ExitCode, st.Outputs = nil, nil
	message := d.Why
	if d.Failure.Message != "" {
		message += "; " + d.Failure.Message
	}
	st.Message = validation.BoundMessage(message)
	reason := lifecycle.ReasonRetrying
	if d.Failure.Reason == lifecycle.ReasonOwnerLost {
		reason = lifecycle.ReasonOwnerLost
	}
	// Remove first, so the transition time is now even when the condition
	// was already False: NotBefore counts from it.
	meta.RemoveStatusCondition(&st.Conditions, lifecycle.ConditionScheduled)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               lifecycle.ConditionScheduled,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            validation.BoundMessage(d.Why),
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
	if run.Spec.Mode.Function != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:               lifecycle.ConditionReady,
			Status:             metav1.ConditionFalse,
			Reason:             reason,
			Message:            validation.BoundMessage(d.Why),
			ObservedGeneration: run.Generation,
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	return out
}

// Deadline is when spec.timeout ends run, counted from status.startTime;
// zero when the Run has no timeout or has not started. Decide takes it, so
// no attempt is retried past the Run's lifetime.
func Deadline(run *v1alpha1.Run) time.Time {
	if run.Spec.Timeout == nil || run.Status.StartTime == nil {
		return time.Time{}
	}
	return run.Status.StartTime.Add(run.Spec.Timeout.Duration)
}

// Delay is the exponential backoff before the attempt after attempt:
// initial × factor^(attempt-1), capped at max.
func Delay(policy *v1alpha1.RetryPolicy, attempt int32) time.Duration {
	initial, maxDelay, factor := DefaultInitialDelay, DefaultMaxDelay, DefaultFactor
	if policy != nil && policy.Backoff != nil {
		b := policy.Backoff
		if b.Initial != nil {
			initial = b.Initial.Duration
		}
		if b.Max != nil {
			maxDelay = b.Max.Duration
		}
		if f, err := strconv.ParseFloat(b.Factor, 64); err == nil && f >= 1 {
			factor = f
		}
	}
	if attempt < 1 {
		attempt = 1
	}
	d := float64(initial) * math.Pow(factor, float64(attempt-1))
	if d >= float64(maxDelay) || math.IsInf(d, 0) || math.IsNaN(d) {
		return maxDelay
	}
	return time.Duration(d)
}

// NotBefore is the earliest time the scheduler may bind a Pending Run: a Run
// sent back to Pending for a retry carries the condition Scheduled=False with
// reason Retrying, and waits the backoff of its previous attempt from that
// condition's transition. Any other Run may be bound at once (zero time).
func NotBefore(run *v1alpha1.Run) time.Time {
	if run.Status.Phase != lifecycle.Pending || run.Status.Attempt < 2 {
		return time.Time{}
	}
	for _, c := range run.Status.Conditions {
		if c.Type == lifecycle.ConditionScheduled && c.Reason == lifecycle.ReasonRetrying {
			return c.LastTransitionTime.Add(Delay(run.Spec.RetryPolicy, run.Status.Attempt-1))
		}
	}
	return time.Time{}
}
