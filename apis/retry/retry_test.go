package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	three := &v1alpha1.RetryPolicy{MaxAttempts: 3}
	onlyLost := &v1alpha1.RetryPolicy{MaxAttempts: 3, RetryableReasons: []string{"ExecutionLost"}}
	cases := []struct {
		name      string
		policy    *v1alpha1.RetryPolicy
		attempt   int32
		failure   Failure
		deadline  time.Time
		retry     bool
		nextDelay time.Duration
	}{
		{"no policy means a single attempt", nil, 1, Failure{Reason: "NonZeroExit"}, time.Time{}, false, 0},
		{"first failure of three is retried after the initial delay", three, 1, Failure{Reason: "NonZeroExit"}, time.Time{}, true, time.Second},
		{"second failure waits twice as long", three, 2, Failure{Reason: "NonZeroExit"}, time.Time{}, true, 2 * time.Second},
		{"the last attempt is not retried", three, 3, Failure{Reason: "NonZeroExit"}, time.Time{}, false, 0},
		{"cancelled is never retried", three, 1, Failure{Reason: "Cancelled", Cancelled: true}, time.Time{}, false, 0},
		{"a passed deadline is never retried", three, 1, Failure{Reason: "NonZeroExit"}, now.Add(-time.Second), false, 0},
		{"a retry that would start after the deadline is not made", three, 1, Failure{Reason: "NonZeroExit"}, now.Add(500 * time.Millisecond), false, 0},
		{"a listed reason is retried", onlyLost, 1, Failure{Reason: "ExecutionLost"}, time.Time{}, true, time.Second},
		{"an unlisted reason is not", onlyLost, 1, Failure{Reason: "NonZeroExit"}, time.Time{}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.policy, tc.attempt, tc.failure, tc.deadline, now)
			assert.Equal(t, tc.retry, d.Retry, d.Why)
			assert.Equal(t, tc.nextDelay, d.Delay)
			assert.NotEmpty(t, d.Why)
			if tc.retry {
				assert.Equal(t, tc.attempt+1, d.NextAttempt)
			}
		})
	}
}

func TestDelayIsCapped(t *testing.T) {
	policy := &v1alpha1.RetryPolicy{MaxAttempts: 100, Backoff: &v1alpha1.RetryBackoff{
		Initial: &metav1.Duration{Duration: 100 * time.Millisecond},
		Max:     &metav1.Duration{Duration: 3 * time.Second},
		Factor:  "3",
	}}
	assert.Equal(t, 100*time.Millisecond, Delay(policy, 1))
	assert.Equal(t, 300*time.Millisecond, Delay(policy, 2))
	assert.Equal(t, 900*time.Millisecond, Delay(policy, 3))
	assert.Equal(t, 2700*time.Millisecond, Delay(policy, 4))
	assert.Equal(t, 3*time.Second, Delay(policy, 5), "capped at max")
	assert.Equal(t, 3*time.Second, Delay(policy, 99), "no overflow at large attempts")
	assert.Equal(t, DefaultMaxDelay, Delay(nil, 100))
}

func TestNotBefore(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	retrying := func(attempt int32) *v1alpha1.Run {
		return &v1alpha1.Run{
			Spec: v1alpha1.RunSpec{RetryPolicy: &v1alpha1.RetryPolicy{MaxAttempts: 5}},
			Status: v1alpha1.RunStatus{Phase: "Pending", Attempt: attempt, Conditions: []metav1.Condition{{
				Type: "Scheduled", Status: metav1.ConditionFalse, Reason: "Retrying", LastTransitionTime: metav1.NewTime(at),
			}}},
		}
	}
	assert.Equal(t, at.Add(time.Second), NotBefore(retrying(2)), "after attempt 1: the initial delay")
	assert.Equal(t, at.Add(4*time.Second), NotBefore(retrying(4)), "after attempt 3: 1s×2²")
	fresh := retrying(1)
	assert.True(t, NotBefore(fresh).IsZero(), "a first attempt is never delayed")
	running := retrying(2)
	running.Status.Phase = "Running"
	assert.True(t, NotBefore(running).IsZero())
}

func TestRequeue(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	start := metav1.NewMicroTime(now.Add(-time.Minute))
	exit := int32(1)
	running := func(function bool) *v1alpha1.Run {
		run := &v1alpha1.Run{
			ObjectMeta: metav1.ObjectMeta{Name: "r", Generation: 1},
			Spec:       v1alpha1.RunSpec{RetryPolicy: &v1alpha1.RetryPolicy{MaxAttempts: 3}},
			Status: v1alpha1.RunStatus{
				Phase: lifecycle.Running, Attempt: 1, AssignedPod: "pod", AssignedPodUID: "pod-uid",
				ScheduledTime: &start, StartTime: &start, ExitCode: &exit, Outputs: map[string]string{"a": "1"},
				Conditions: []metav1.Condition{{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionTrue, Reason: lifecycle.ReasonScheduled}},
			},
		}
		if function {
			run.Spec.Mode.Function = &v1alpha1.FunctionMode{Handler: "h.main"}
			run.Status.Phase = lifecycle.Ready
			run.Status.ReadyTime = &start
			run.Status.Conditions = append(run.Status.Conditions, metav1.Condition{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: lifecycle.ReasonFunctionRegistered})
		} else {
			run.Spec.Mode.Task = &v1alpha1.TaskMode{}
		}
		return run
	}

	t.Run("a failed task goes back to Pending with attempt+1 and no assignment", func(t *testing.T) {
		run := running(false)
		d := Decide(run.Spec.RetryPolicy, 1, Failure{Reason: lifecycle.ReasonNonZeroExit, Message: "exit 1"}, time.Time{}, now)
		require.True(t, d.Retry)
		out := Requeue(run, d, now)
		assert.Equal(t, lifecycle.Pending, out.Status.Phase)
		assert.Equal(t, int32(2), out.Status.Attempt)
		assert.Empty(t, out.Status.AssignedPod)
		assert.Empty(t, out.Status.AssignedPodUID)
		assert.Nil(t, out.Status.ScheduledTime)
		assert.Nil(t, out.Status.StartTime)
		assert.Nil(t, out.Status.ExitCode)
		assert.Nil(t, out.Status.Outputs)
		assert.Contains(t, out.Status.Message, "exit 1", "the failure's own message is kept")
		c := meta.FindStatusCondition(out.Status.Conditions, lifecycle.ConditionScheduled)
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, lifecycle.ReasonRetrying, c.Reason)
		assert.Nil(t, meta.FindStatusCondition(out.Status.Conditions, lifecycle.ConditionReady), "a task has no Ready condition")
		assert.Equal(t, now.Add(time.Second), NotBefore(out), "the backoff counts from now")
		assert.Equal(t, lifecycle.Running, run.Status.Phase, "the input is not modified")
	})

	t.Run("a Ready function is no longer Ready once requeued", func(t *testing.T) {
		run := running(true)
		d := Decide(run.Spec.RetryPolicy, 1, Failure{Reason: "RegistrationFailed"}, time.Time{}, now)
		out := Requeue(run, d, now)
		ready := meta.FindStatusCondition(out.Status.Conditions, lifecycle.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, lifecycle.ReasonRetrying, ready.Reason)
		assert.Nil(t, out.Status.ReadyTime)
	})

	t.Run("a Run whose owner was lost is placed again without backoff", func(t *testing.T) {
		run := running(true)
		d := Decide(run.Spec.RetryPolicy, 1, Failure{Reason: lifecycle.ReasonOwnerLost}, time.Time{}, now)
		out := Requeue(run, d, now)
		c := meta.FindStatusCondition(out.Status.Conditions, lifecycle.ConditionScheduled)
		require.NotNil(t, c)
		assert.Equal(t, lifecycle.ReasonOwnerLost, c.Reason)
		assert.True(t, NotBefore(out).IsZero())
	})
}

func TestDeadline(t *testing.T) {
	start := metav1.NewMicroTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cases := []struct {
		name    string
		timeout *metav1.Duration
		start   *metav1.MicroTime
		want    time.Time
	}{
		{"no timeout has no deadline", nil, &start, time.Time{}},
		{"a Run that has not started has no deadline yet", &metav1.Duration{Duration: time.Minute}, nil, time.Time{}},
		{"the timeout counts from startTime", &metav1.Duration{Duration: time.Minute}, &start, start.Add(time.Minute)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := &v1alpha1.Run{Spec: v1alpha1.RunSpec{Timeout: tc.timeout}, Status: v1alpha1.RunStatus{StartTime: tc.start}}
			assert.Equal(t, tc.want, Deadline(run))
		})
	}
}
