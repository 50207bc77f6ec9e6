package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
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
