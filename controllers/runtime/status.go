package runtime

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// desiredStatus is rt's status as deployment (nil when not created yet)
// reports it; problem, when set, says why the pool cannot be reconciled. Ready is True when every desired replica is ready on the
// current template, so a rollout in progress is not Ready.
func desiredStatus(rt *v1alpha1.Runtime, deployment *appsv1.Deployment, problem string, now time.Time) v1alpha1.RuntimeStatus {
	status := *rt.Status.DeepCopy()
	status.ObservedGeneration = rt.Generation
	status.Replicas, status.ReadyReplicas = 0, 0
	var updated int32
	observed := false
	if deployment != nil {
		status.Replicas = deployment.Status.Replicas
		status.ReadyReplicas = min(deployment.Status.ReadyReplicas, deployment.Status.Replicas)
		updated = deployment.Status.UpdatedReplicas
		observed = deployment.Status.ObservedGeneration >= deployment.Generation
	}
	want := *replicas(rt)
	cond := metav1.Condition{Type: lifecycle.ConditionReady, ObservedGeneration: rt.Generation}
	switch {
	case problem != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, lifecycle.ReasonResourceConflict, problem
	case want == 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, lifecycle.ReasonScaledToZero, "spec.replicas is 0: no Pods can run Runs"
	case observed && status.ReadyReplicas >= want && updated >= want:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, lifecycle.ReasonPodsReady, fmt.Sprintf("%d of %d Runtime Pods are ready", status.ReadyReplicas, want)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, lifecycle.ReasonPodsNotReady, fmt.Sprintf("%d of %d Runtime Pods are ready", status.ReadyReplicas, want)
	}
	cond.LastTransitionTime = metav1.NewTime(now)
	apimeta.SetStatusCondition(&status.Conditions, cond)
	return status
}
