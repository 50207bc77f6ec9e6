package scheduler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// bind assigns run to pod with one status update carrying the Run's
// resourceVersion; a conflict means the Run changed meanwhile and is
// retried from the informer's newer copy.
func (s *Scheduler) bind(ctx context.Context, run *v1alpha1.Run, pod *corev1.Pod) error {
	now := metav1.NowMicro()
	update := bindingUpdate(run, pod, now)
	start := s.clock.Now()
	_, err := s.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
	bindingDuration.Observe(s.clock.Since(start).Seconds())
	if err != nil {
		if apierrors.IsConflict(err) {
			// Routine: the retry starts from the newer copy. The Run keeps
			// its place in line meanwhile, so a younger one does not take
			// the slot.
			s.join(run)
		}
		if definitelyNotApplied(err) {
			s.assumed.forget(run.UID)
		} else {
			s.assumed.finishBinding(run.UID, s.clock.Now(), false)
		}
		if apierrors.IsConflict(err) {
			observeAttempt(resultConflict)
		} else {
			observeAttempt(resultError)
		}
		return fmt.Errorf("binding Run %s/%s to Pod %s: %w", run.Namespace, run.Name, pod.Name, err)
	}
	s.assumed.finishBinding(run.UID, s.clock.Now(), true)
	observeAttempt(resultScheduled)
	if run.Status.Attempt <= 1 {
		pendingDuration.Observe(now.Sub(run.CreationTimestamp.Time).Seconds())
	}
	// No Event: a routine bind, thousands a minute, would go to the
	// cluster's etcd; the Scheduled condition and assignedPod say it.
	klog.FromContext(ctx).V(2).Info("Bound Run", "pod", klog.KObj(pod), "podUID", pod.UID)
	return nil
}

// definitelyNotApplied reports whether the server refused the write, as
// opposed to an outcome the scheduler cannot know (a timeout, a lost
// connection), after which the reservation is kept until it expires.
func definitelyNotApplied(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) ||
		apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsUnauthorized(err)
}

// cancel moves a Pending Run that asked for cancellation to Cancelled.
func (s *Scheduler) cancel(ctx context.Context, run *v1alpha1.Run) error {
	update := cancelUpdate(run, metav1.NowMicro())
	if _, err := s.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("cancelling Pending Run %s/%s: %w", run.Namespace, run.Name, err)
	}
	observeAttempt(resultCancelled)
	klog.FromContext(ctx).V(2).Info("Cancelled Pending Run")
	s.recorder.Event(run, corev1.EventTypeNormal, eventCancelled, cancelledMessage)
	return nil
}
