package runstatus

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func runningRun(policy *v1alpha1.RetryPolicy, attempt int32) *v1alpha1.Run {
	start := metav1.NewMicroTime(now.Add(-time.Second))
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "uid-1", Generation: 1},
		Spec:       v1alpha1.RunSpec{Runtime: "bash", Mode: v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}}, RetryPolicy: policy},
		Status: v1alpha1.RunStatus{
			Phase: lifecycle.Running, Attempt: attempt, AssignedPod: "pod", AssignedPodUID: "pod-uid", StartTime: &start,
			Conditions: []metav1.Condition{{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionTrue, Reason: "Scheduled",
				LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}},
		},
	}
}

func TestExecutionIDRoundTrips(t *testing.T) {
	id := ExecutionID("0b4a7e8e-0000-4000-8000-000000000001", 3)
	assert.Equal(t, "0b4a7e8e-0000-4000-8000-000000000001-3", id)
	uid, attempt, ok := ParseExecutionID(id)
	require.True(t, ok)
	assert.Equal(t, "0b4a7e8e-0000-4000-8000-000000000001", string(uid))
	assert.Equal(t, int32(3), attempt)
	for _, foreign := range []string{"task", "x-0", "x-01", "x-abc", "-1"} {
		_, _, ok := ParseExecutionID(foreign)
		assert.False(t, ok, "%q is not runtimed's", foreign)
	}
}

func TestClaimKeepsAttemptAndAssignment(t *testing.T) {
	run := runningRun(nil, 2)
	run.Status.Phase = lifecycle.Scheduled
	run.Status.StartTime = nil
	claimed := Claim(run, metav1.NewMicroTime(now))
	assert.Equal(t, lifecycle.Running, claimed.Status.Phase)
	assert.Equal(t, int32(2), claimed.Status.Attempt)
	assert.Equal(t, "pod", claimed.Status.AssignedPod)
	require.NotNil(t, claimed.Status.StartTime)
	assert.True(t, claimed.Status.StartTime.Time.Equal(now))
	assert.Equal(t, lifecycle.Scheduled, run.Status.Phase, "the input is not modified")
}

func TestFinish(t *testing.T) {
	exit1 := ptr.To[int32](1)
	cases := []struct {
		name        string
		run         *v1alpha1.Run
		outcome     Outcome
		wantPhase   lifecycle.Phase
		wantRetried bool
		wantAttempt int32
		wantReason  string
	}{
		{
			name:      "success is terminal with Completed=True reason Succeeded",
			run:       runningRun(nil, 1),
			outcome:   Outcome{Phase: lifecycle.Succeeded, Reason: lifecycle.ReasonSucceeded, ExitCode: ptr.To[int32](0), Outputs: map[string]string{"a": "1"}},
			wantPhase: lifecycle.Succeeded, wantAttempt: 1, wantReason: lifecycle.ReasonSucceeded,
		},
		{
			name:      "a failure without retries left is Failed",
			run:       runningRun(nil, 1),
			outcome:   Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonNonZeroExit, ExitCode: exit1, Message: "exit 1"},
			wantPhase: lifecycle.Failed, wantAttempt: 1, wantReason: lifecycle.ReasonNonZeroExit,
		},
		{
			name:      "a failure with attempts left goes back to Pending with attempt+1",
			run:       runningRun(&v1alpha1.RetryPolicy{MaxAttempts: 2}, 1),
			outcome:   Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonNonZeroExit, ExitCode: exit1},
			wantPhase: lifecycle.Pending, wantRetried: true, wantAttempt: 2, wantReason: lifecycle.ReasonRetrying,
		},
		{
			name:      "a lost execution is retryable",
			run:       runningRun(&v1alpha1.RetryPolicy{MaxAttempts: 3}, 2),
			outcome:   Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonExecutionLost},
			wantPhase: lifecycle.Pending, wantRetried: true, wantAttempt: 3, wantReason: lifecycle.ReasonRetrying,
		},
		{
			name:      "a reason outside retryableReasons is not retried",
			run:       runningRun(&v1alpha1.RetryPolicy{MaxAttempts: 3, RetryableReasons: []string{lifecycle.ReasonExecutionLost}}, 1),
			outcome:   Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonNonZeroExit, ExitCode: exit1},
			wantPhase: lifecycle.Failed, wantAttempt: 1, wantReason: lifecycle.ReasonNonZeroExit,
		},
		{
			name:      "a timeout is never retried",
			run:       runningRun(&v1alpha1.RetryPolicy{MaxAttempts: 3}, 1),
			outcome:   Outcome{Phase: lifecycle.Timeout, Reason: lifecycle.ReasonTimeout},
			wantPhase: lifecycle.Timeout, wantAttempt: 1, wantReason: lifecycle.ReasonTimeout,
		},
		{
			name:      "a cancellation is never retried",
			run:       runningRun(&v1alpha1.RetryPolicy{MaxAttempts: 3}, 1),
			outcome:   Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled},
			wantPhase: lifecycle.Cancelled, wantAttempt: 1, wantReason: lifecycle.ReasonCancelled,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, retried := Finish(tc.run, tc.outcome, now)
			assert.Equal(t, tc.wantRetried, retried)
			assert.Equal(t, tc.wantPhase, out.Status.Phase)
			assert.Equal(t, tc.wantAttempt, out.Status.Attempt)
			require.NoError(t, lifecycle.CheckTransition(lifecycle.ModeTask, tc.run.Status.Phase, out.Status.Phase), "the phase table allows it")
			if retried {
				assert.Empty(t, out.Status.AssignedPod)
				assert.Empty(t, out.Status.AssignedPodUID)
				assert.Nil(t, out.Status.ExitCode)
				c := meta.FindStatusCondition(out.Status.Conditions, lifecycle.ConditionScheduled)
				require.NotNil(t, c)
				assert.Equal(t, metav1.ConditionFalse, c.Status)
				assert.Equal(t, tc.wantReason, c.Reason)
				assert.True(t, c.LastTransitionTime.Time.Equal(now), "the backoff counts from now")
				assert.Equal(t, now.Add(retry.Delay(tc.run.Spec.RetryPolicy, tc.run.Status.Attempt)), retry.NotBefore(out),
					"the scheduler waits the backoff of the failed attempt")
				return
			}
			require.NotNil(t, out.Status.CompletionTime)
			assert.True(t, out.Status.CompletionTime.Time.Equal(now))
			c := meta.FindStatusCondition(out.Status.Conditions, lifecycle.ConditionCompleted)
			require.NotNil(t, c)
			assert.Equal(t, metav1.ConditionTrue, c.Status)
			assert.Equal(t, tc.wantReason, c.Reason)
			assert.Equal(t, "pod", out.Status.AssignedPod, "a finished Run keeps the Pod it ran on")
		})
	}
}

func TestFinishDoesNotRetryPastTheTimeout(t *testing.T) {
	run := runningRun(&v1alpha1.RetryPolicy{MaxAttempts: 3}, 1)
	run.Spec.Timeout = &metav1.Duration{Duration: time.Second}
	out, retried := Finish(run, Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonNonZeroExit}, now.Add(time.Minute))
	assert.False(t, retried)
	assert.Equal(t, lifecycle.Failed, out.Status.Phase)
}

func TestStderrTail(t *testing.T) {
	cases := []struct {
		name         string
		msg          string
		stderr       string
		wantContains []string
		wantMissing  []string
	}{
		{name: "short stderr is appended whole", msg: "exited 1", stderr: "boom\n", wantContains: []string{"exited 1; stderr tail:\nboom"}},
		{name: "no stderr leaves the message alone", msg: "exited 1", stderr: "", wantContains: []string{"exited 1"}, wantMissing: []string{"stderr tail"}},
		{
			name: "long stderr keeps its end", msg: "exited 1",
			stderr:       "FIRST\n" + strings.Repeat("x", 10000) + "\nLAST\n",
			wantContains: []string{"exited 1; stderr tail:\n…", "LAST"}, wantMissing: []string{"FIRST"},
		},
		{
			name: "multi-byte runes are never split", msg: "m",
			stderr:       strings.Repeat("é", 5000),
			wantContains: []string{"é"}, wantMissing: []string{"\uFFFD"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := StderrTail(tc.msg, []byte(tc.stderr))
			assert.LessOrEqual(t, len(got), validation.MaxMessageBytes)
			for _, s := range tc.wantContains {
				assert.Contains(t, got, s)
			}
			for _, s := range tc.wantMissing {
				assert.NotContains(t, got, s)
			}
		})
	}
}

func TestBoundMessage(t *testing.T) {
	assert.Equal(t, "short", validation.BoundMessage("short"))
	long := validation.BoundMessage(strings.Repeat("ü", validation.MaxMessageBytes))
	assert.LessOrEqual(t, len(long), validation.MaxMessageBytes)
	assert.True(t, strings.HasSuffix(long, "…"))
}

func TestCheckOutputs(t *testing.T) {
	ok := Outcome{Phase: lifecycle.Succeeded, Outputs: map[string]string{"a": "1"}}
	assert.Equal(t, ok, CheckOutputs(ok))
	tooMany := map[string]string{}
	for i := range validation.MaxOutputs + 1 {
		tooMany[strings.Repeat("k", i+1)] = "v"
	}
	got := CheckOutputs(Outcome{Phase: lifecycle.Succeeded, Outputs: tooMany, ExitCode: ptr.To[int32](0)})
	assert.Equal(t, lifecycle.Failed, got.Phase)
	assert.Equal(t, lifecycle.ReasonOutputsTooLarge, got.Reason)
	assert.Nil(t, got.Outputs, "outputs the API would reject are dropped")
	got = CheckOutputs(Outcome{Phase: lifecycle.Succeeded, Outputs: map[string]string{"": "v"}})
	assert.Equal(t, lifecycle.ReasonOutputsInvalid, got.Reason)
}
