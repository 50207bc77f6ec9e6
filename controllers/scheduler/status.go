package scheduler

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// cancelledMessage is the message of a Run cancelled while Pending.
const cancelledMessage = "Cancelled before it was scheduled"

// bindingUpdate returns the copy of run that binds it to pod at now: phase
// Scheduled, the assignment, and a Scheduled=True condition. It reads
// nothing but its arguments, so what a binding writes is tested without a
// client.
func bindingUpdate(run *v1alpha1.Run, pod *corev1.Pod, now metav1.MicroTime) *v1alpha1.Run {
	update := run.DeepCopy()
	update.Status.Phase = lifecycle.Scheduled
	update.Status.AssignedPod = pod.Name
	update.Status.AssignedPodUID = pod.UID
	update.Status.ScheduledTime = &now
	update.Status.Message = ""
	apimeta.SetStatusCondition(&update.Status.Conditions, metav1.Condition{
		Type:   lifecycle.ConditionScheduled,
		Status: metav1.ConditionTrue,
		// The condition type doubles as the reason of a successful
		// binding, as for a Pod's PodScheduled.
		Reason:             lifecycle.ReasonScheduled,
		Message:            "Assigned to Pod " + pod.Name,
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now.Time),
	})
	if run.Spec.Mode.Function != nil {
		// What a previous attempt's Ready condition said (OwnerLost,
		// Retrying) is not about this assignment.
		apimeta.SetStatusCondition(&update.Status.Conditions, metav1.Condition{
			Type:               lifecycle.ConditionReady,
			Status:             metav1.ConditionFalse,
			Reason:             lifecycle.ReasonScheduling,
			Message:            "Assigned to Pod " + pod.Name + "; waiting for its runtimed to register the function",
			ObservedGeneration: run.Generation,
			LastTransitionTime: metav1.NewTime(now.Time),
		})
	}
	return update
}

// cancelUpdate returns the copy of run, Pending and asking for
// cancellation, that is Cancelled at now.
func cancelUpdate(run *v1alpha1.Run, now metav1.MicroTime) *v1alpha1.Run {
	update := run.DeepCopy()
	update.Status.Phase = lifecycle.Cancelled
	update.Status.CompletionTime = &now
	update.Status.Message = cancelledMessage
	for _, cond := range []metav1.Condition{
		{Type: lifecycle.ConditionCompleted, Status: metav1.ConditionTrue},
		{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse},
	} {
		cond.Reason, cond.Message = lifecycle.ReasonCancelled, cancelledMessage
		cond.ObservedGeneration = run.Generation
		cond.LastTransitionTime = metav1.NewTime(now.Time)
		apimeta.SetStatusCondition(&update.Status.Conditions, cond)
	}
	return update
}

// unschedulableUpdate returns the copy of run that says, in status.message
// and a Scheduled=False condition, why it cannot be placed, and whether
// that differs from what run already says. A condition whose status stays
// keeps its transition time, so saying the same again is no change.
func unschedulableUpdate(run *v1alpha1.Run, reason, msg string, now time.Time) (*v1alpha1.Run, bool) {
	update := run.DeepCopy()
	update.Status.Message = msg
	apimeta.SetStatusCondition(&update.Status.Conditions, metav1.Condition{
		Type:               lifecycle.ConditionScheduled,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
	return update, !apiequality.Semantic.DeepEqual(run.Status, update.Status)
}
