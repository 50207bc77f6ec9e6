package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

func pendingRun(mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	run := &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "uid-r", Generation: 3, ResourceVersion: "7"},
		Spec:       v1alpha1.RunSpec{Runtime: "bash", Mode: v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}}},
		Status:     v1alpha1.RunStatus{Phase: lifecycle.Pending, Attempt: 1},
	}
	for _, m := range mutate {
		m(run)
	}
	return run
}

func asFunction(run *v1alpha1.Run) {
	run.Spec.Mode = v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "main.handler"}}
}

func withCondition(typ string, status metav1.ConditionStatus, reason string, at time.Time) func(*v1alpha1.Run) {
	return func(run *v1alpha1.Run) {
		apimeta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: "earlier", LastTransitionTime: metav1.NewTime(at),
		})
	}
}

func withMessage(msg string) func(*v1alpha1.Run) {
	return func(run *v1alpha1.Run) { run.Status.Message = msg }
}

// requireCondition returns the condition of typ, which must be there.
func requireCondition(t *testing.T, run *v1alpha1.Run, typ string) *metav1.Condition {
	t.Helper()
	cond := apimeta.FindStatusCondition(run.Status.Conditions, typ)
	require.NotNil(t, cond, "condition %s in %v", typ, run.Status.Conditions)
	return cond
}

func TestBindingUpdate(t *testing.T) {
	pod := readyPod("a")
	now := metav1.NewMicroTime(testNow)
	cases := []struct {
		name  string
		run   *v1alpha1.Run
		check func(t *testing.T, got *v1alpha1.Run)
	}{
		{
			name: "task Run is Scheduled on the Pod, with a Scheduled=True condition and no Ready condition",
			run:  pendingRun(withMessage("no Runtime Pod can take the Run")),
			check: func(t *testing.T, got *v1alpha1.Run) {
				assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
				assert.Equal(t, pod.Name, got.Status.AssignedPod)
				assert.Equal(t, pod.UID, got.Status.AssignedPodUID)
				assert.Equal(t, &now, got.Status.ScheduledTime)
				assert.Empty(t, got.Status.Message, "why it waited is over")
				cond := requireCondition(t, got, lifecycle.ConditionScheduled)
				assert.Equal(t, metav1.ConditionTrue, cond.Status)
				assert.Equal(t, lifecycle.ReasonScheduled, cond.Reason)
				assert.Equal(t, "Assigned to Pod a", cond.Message)
				assert.Equal(t, int64(3), cond.ObservedGeneration)
				assert.Equal(t, testNow, cond.LastTransitionTime.Time)
				assert.Nil(t, apimeta.FindStatusCondition(got.Status.Conditions, lifecycle.ConditionReady))
			},
		},
		{
			name: "Scheduled=False NoCapacity turns True at the binding",
			run:  pendingRun(withCondition(lifecycle.ConditionScheduled, metav1.ConditionFalse, lifecycle.ReasonNoCapacity, testNow.Add(-time.Hour))),
			check: func(t *testing.T, got *v1alpha1.Run) {
				cond := requireCondition(t, got, lifecycle.ConditionScheduled)
				assert.Equal(t, metav1.ConditionTrue, cond.Status)
				assert.Equal(t, lifecycle.ReasonScheduled, cond.Reason)
				assert.Equal(t, testNow, cond.LastTransitionTime.Time)
				assert.Len(t, got.Status.Conditions, 1)
			},
		},
		{
			name: "function Run gets Ready=False Scheduling",
			run:  pendingRun(asFunction),
			check: func(t *testing.T, got *v1alpha1.Run) {
				cond := requireCondition(t, got, lifecycle.ConditionReady)
				assert.Equal(t, metav1.ConditionFalse, cond.Status)
				assert.Equal(t, lifecycle.ReasonScheduling, cond.Reason)
				assert.Contains(t, cond.Message, "Pod a")
				assert.Equal(t, int64(3), cond.ObservedGeneration)
			},
		},
		{
			name: "retried function Run's OwnerLost Ready condition is replaced, keeping its transition time",
			run: pendingRun(asFunction, func(r *v1alpha1.Run) { r.Status.Attempt = 2 },
				withCondition(lifecycle.ConditionReady, metav1.ConditionFalse, lifecycle.ReasonOwnerLost, testNow.Add(-time.Minute))),
			check: func(t *testing.T, got *v1alpha1.Run) {
				cond := requireCondition(t, got, lifecycle.ConditionReady)
				assert.Equal(t, lifecycle.ReasonScheduling, cond.Reason)
				assert.Equal(t, testNow.Add(-time.Minute), cond.LastTransitionTime.Time, "still not Ready since then")
				assert.Equal(t, int32(2), got.Status.Attempt, "binding is no new attempt")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.run.DeepCopy()
			got := bindingUpdate(tc.run, pod, now)
			assert.Equal(t, before, tc.run, "the informer's copy is not modified")
			assert.Equal(t, tc.run.ObjectMeta, got.ObjectMeta, "written with the Run's resourceVersion")
			assert.Equal(t, tc.run.Spec, got.Spec)
			tc.check(t, got)
		})
	}
}

func TestCancelUpdate(t *testing.T) {
	now := metav1.NewMicroTime(testNow)
	run := pendingRun(func(r *v1alpha1.Run) { r.Spec.CancelRequested = true },
		withCondition(lifecycle.ConditionScheduled, metav1.ConditionFalse, lifecycle.ReasonNoCapacity, testNow.Add(-time.Hour)),
		withMessage("no Runtime Pod can take the Run"))
	before := run.DeepCopy()

	got := cancelUpdate(run, now)
	assert.Equal(t, before, run, "the informer's copy is not modified")
	assert.Equal(t, lifecycle.Cancelled, got.Status.Phase)
	assert.Equal(t, &now, got.Status.CompletionTime)
	assert.Equal(t, cancelledMessage, got.Status.Message)
	assert.Empty(t, got.Status.AssignedPod)
	assert.Nil(t, got.Status.ScheduledTime)

	completed := requireCondition(t, got, lifecycle.ConditionCompleted)
	assert.Equal(t, metav1.ConditionTrue, completed.Status)
	assert.Equal(t, lifecycle.ReasonCancelled, completed.Reason)
	assert.Equal(t, cancelledMessage, completed.Message)
	assert.Equal(t, testNow, completed.LastTransitionTime.Time)
	assert.Equal(t, int64(3), completed.ObservedGeneration)

	scheduled := requireCondition(t, got, lifecycle.ConditionScheduled)
	assert.Equal(t, metav1.ConditionFalse, scheduled.Status)
	assert.Equal(t, lifecycle.ReasonCancelled, scheduled.Reason, "it will never be scheduled, and says why")
	assert.Equal(t, testNow.Add(-time.Hour), scheduled.LastTransitionTime.Time, "not scheduled since then")
}

func TestUnschedulableUpdate(t *testing.T) {
	const full = "no Runtime Pod can take the Run: of 1 Pods, 1 are full"
	earlier := testNow.Add(-time.Hour)
	cases := []struct {
		name           string
		run            *v1alpha1.Run
		reason, msg    string
		wantChanged    bool
		wantTransition time.Time
	}{
		{
			name:   "first word on a new Run is a change",
			run:    pendingRun(),
			reason: lifecycle.ReasonNoCapacity, msg: full,
			wantChanged: true, wantTransition: testNow,
		},
		{
			name: "saying the same again is no change",
			run: pendingRun(withMessage(full), func(r *v1alpha1.Run) {
				apimeta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
					Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonNoCapacity,
					Message: full, ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(earlier),
				})
			}),
			reason: lifecycle.ReasonNoCapacity, msg: full,
			wantChanged: false, wantTransition: earlier,
		},
		{
			name:   "a new reason is a change; the Run is unschedulable since earlier",
			run:    pendingRun(withMessage(full), withCondition(lifecycle.ConditionScheduled, metav1.ConditionFalse, lifecycle.ReasonNoCapacity, earlier)),
			reason: lifecycle.ReasonRuntimeNotFound, msg: `Runtime "bash" does not exist`,
			wantChanged: true, wantTransition: earlier,
		},
		{
			name: "a retried Run's Retrying condition is replaced",
			run: pendingRun(func(r *v1alpha1.Run) { r.Status.Attempt = 2 },
				withCondition(lifecycle.ConditionScheduled, metav1.ConditionFalse, lifecycle.ReasonRetrying, earlier)),
			reason: lifecycle.ReasonNoCapacity, msg: full,
			wantChanged: true, wantTransition: earlier,
		},
		{
			name: "a newer generation is a change",
			run: pendingRun(withMessage(full), func(r *v1alpha1.Run) {
				apimeta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
					Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonNoCapacity,
					Message: full, ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(earlier),
				})
			}),
			reason: lifecycle.ReasonNoCapacity, msg: full,
			wantChanged: true, wantTransition: earlier,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.run.DeepCopy()
			got, changed := unschedulableUpdate(tc.run, tc.reason, tc.msg, testNow)
			assert.Equal(t, before, tc.run, "the informer's copy is not modified")
			assert.Equal(t, tc.wantChanged, changed)
			assert.Equal(t, lifecycle.Pending, got.Status.Phase)
			assert.Equal(t, tc.msg, got.Status.Message)
			cond := requireCondition(t, got, lifecycle.ConditionScheduled)
			assert.Equal(t, metav1.ConditionFalse, cond.Status)
			assert.Equal(t, tc.reason, cond.Reason)
			assert.Equal(t, tc.msg, cond.Message)
			assert.Equal(t, int64(3), cond.ObservedGeneration)
			assert.Equal(t, tc.wantTransition, cond.LastTransitionTime.Time)
		})
	}
}
