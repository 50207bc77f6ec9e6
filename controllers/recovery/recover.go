package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
)

// recover takes run, whose Pod is lost as l says, through the three steps
// in order: make its assignment unroutable, make sure a fence holds, then
// retry, fail, or (when it is being deleted) release it. Each step reads the
// result of the one before; a failed write returns, and the next sync picks
// up where the Run's stored state says.
func (c *Controller) recover(ctx context.Context, run *v1alpha1.Run, l *loss, now time.Time) error {
	logger := klog.FromContext(ctx)
	det, first := c.detections.start(run, now)
	if first {
		logger.Info("Run's Pod is lost", "reason", l.reason, "detail", l.detail)
	}

	// 1. Unroutable: a claimed function's Ready condition turns False
	// before anything else, so the invoke path stops routing to the old
	// owner. A Scheduled Run was never claimed, so nothing of it is on the
	// Pod, and tasks are never routable: they get the Event alone.
	claimed := run.Status.Phase == lifecycle.Running || run.Status.Phase == lifecycle.Ready
	if run.Spec.Mode.Function != nil && claimed && !markedOwnerLost(run) {
		marked, err := c.markUnroutable(ctx, run, l, now)
		if err != nil {
			return err
		}
		run = marked
		c.recorder.Eventf(run, corev1.EventTypeWarning, EventOwnerLost,
			"%s; attempt %d is not routable and will be recovered", l.detail, run.Status.Attempt)
	} else if first && !markedOwnerLost(run) {
		c.recorder.Eventf(run, corev1.EventTypeWarning, EventOwnerLost,
			"%s; attempt %d will be recovered", l.detail, run.Status.Attempt)
	}

	// 2. Fence: a silent Pod is deleted, as the node lifecycle controller
	// evicts the Pods of an unreachable Node; its deletion is the fence.
	fence := l.fence
	if fence == "" {
		var err error
		if fence, err = c.deleteSilentPod(ctx, run, l); err != nil {
			return err
		}
	}
	if since, ok := c.detections.fence(run.UID, c.clock.Now()); ok {
		fenceDuration.WithLabelValues(l.reason).Observe(since.Seconds())
	}

	// 3. Recover.
	outcome, err := c.release(ctx, run, l, fence, now)
	if apierrors.IsNotFound(err) {
		// The Run is gone: another sync removed its last finalizer, or
		// its user deleted it. Nothing is left to recover.
		c.detections.forget(run.UID)
		return nil
	}
	if err != nil {
		return err
	}
	recoveries.WithLabelValues(l.reason, outcome).Inc()
	if d, ok := c.detections.finish(run.UID); ok {
		recoveryDuration.WithLabelValues(l.reason).Observe(c.clock.Since(d.at).Seconds())
	} else {
		recoveryDuration.WithLabelValues(l.reason).Observe(c.clock.Since(det.at).Seconds())
	}
	return nil
}

// markUnroutable writes condition Ready=False reason OwnerLost on a function
// Run, keeping its phase and assignment.
func (c *Controller) markUnroutable(ctx context.Context, run *v1alpha1.Run, l *loss, now time.Time) (*v1alpha1.Run, error) {
	out := run.DeepCopy()
	msg := fmt.Sprintf("%s; attempt %d is not routable until it is recovered", l.detail, run.Status.Attempt)
	out.Status.Message = validation.BoundMessage(msg)
	meta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
		Type:               lifecycle.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             lifecycle.ReasonOwnerLost,
		Message:            validation.BoundMessage(msg),
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
	updated, err := c.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("marking Run %s/%s not routable (OwnerLost): %w", run.Namespace, run.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Marked Run not routable", "reason", l.reason)
	return updated, nil
}

// deleteSilentPod deletes the Pod run holds, whose heartbeat is lost, with
// its UID as a precondition so a newer Pod of the same name is never hit,
// and returns the fence that holds afterwards.
func (c *Controller) deleteSilentPod(ctx context.Context, run *v1alpha1.Run, l *loss) (string, error) {
	st := run.Status
	podRef := fmt.Sprintf("Pod %s (uid %s)", st.AssignedPod, st.AssignedPodUID)
	uid := st.AssignedPodUID
	fence := fmt.Sprintf("fence: %s is deleting: recovery deleted it because %s", podRef, l.detail)
	if _, deleted := c.deletedPods.Load(uid); deleted {
		return fence, nil // for another of its Runs, a moment ago
	}
	err := c.kube.CoreV1().Pods(run.Namespace).Delete(ctx, st.AssignedPod, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	switch {
	case apierrors.IsNotFound(err):
		return gone(podRef, "it no longer exists").fence, nil
	case apierrors.IsConflict(err):
		// The UID precondition failed: the name belongs to another Pod.
		return gone(podRef, "the name now belongs to another Pod").fence, nil
	case err != nil:
		return "", fmt.Errorf("deleting Pod %s/%s, whose runtimed heartbeat is lost: %w", run.Namespace, st.AssignedPod, err)
	}
	c.deletedPods.Store(uid, struct{}{})
	podDeletions.Inc()
	klog.FromContext(ctx).Info("Deleted Runtime Pod whose runtimed heartbeat is lost", "gracePeriod", c.grace, "detail", l.detail)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: st.AssignedPod, UID: uid}}
	c.recorder.Eventf(pod, corev1.EventTypeWarning, reasonHeartbeatLost,
		"Deleted by kruntimes recovery: %s; its Runs go to other Pods", l.detail)
	return fence, nil
}

// release ends run's hold on its lost Pod once fence holds: a deleting Run
// loses its registration-cleanup finalizer; any other goes back to Pending
// for its next attempt through retry, or ends (Failed, or Cancelled when the
// user asked for that). It returns the outcome.
func (c *Controller) release(ctx context.Context, run *v1alpha1.Run, l *loss, fence string, now time.Time) (string, error) {
	logger := klog.FromContext(ctx)
	if run.DeletionTimestamp != nil {
		if _, err := c.removeFinalizer(ctx, run); err != nil {
			return "", err
		}
		logger.Info("Removed the finalizer of a deleting Run whose Pod is lost", "fence", fence)
		c.recorder.Eventf(run, corev1.EventTypeNormal, EventRecovered,
			"%s; nothing of attempt %d can still serve, so %s is removed", fence, run.Status.Attempt, lifecycle.FinalizerRegistrationCleanup)
		return outcomeFinalized, nil
	}
	// Nothing of the attempt may outlive the fence in the Run's metadata
	// either: with the finalizer gone first, a Run deleted while it waits
	// to be placed again goes at once.
	run, err := c.removeFinalizer(ctx, run)
	if err != nil {
		return "", err
	}

	failure := retry.Failure{Reason: lifecycle.ReasonOwnerLost, Message: l.detail}
	var d retry.Decision
	switch {
	case run.Spec.CancelRequested:
		return outcomeCancelled, c.write(ctx, run, ended(run, lifecycle.Cancelled, lifecycle.ReasonCancelled,
			fmt.Sprintf("cancelled; attempt %d ended with its Pod (%s)", run.Status.Attempt, fence), now), corev1.EventTypeNormal, EventRecovered)
	case run.Status.Phase == lifecycle.Scheduled:
		// Never claimed: the attempt did not start, so it is not spent.
		d = retry.Decision{Retry: true, NextAttempt: run.Status.Attempt, Failure: failure,
			Why: fmt.Sprintf("attempt %d was lost with its Pod before it started (%s); it is placed again at once", run.Status.Attempt, fence)}
	default:
		d = retry.Decide(run.Spec.RetryPolicy, run.Status.Attempt, failure, retry.Deadline(run), now)
		if !d.Retry {
			msg := fmt.Sprintf("attempt %d was lost with its Pod (%s) and is not retried: %s", run.Status.Attempt, fence, d.Why)
			return outcomeFailed, c.write(ctx, run, ended(run, lifecycle.Failed, lifecycle.ReasonOwnerLost, msg, now), corev1.EventTypeWarning, EventRecoveryFailed)
		}
		d.Why = fmt.Sprintf("attempt %d was lost with its Pod (%s); attempt %d is placed again at once", run.Status.Attempt, fence, d.NextAttempt)
	}
	return outcomeRequeued, c.write(ctx, run, retry.Requeue(run, d, now), corev1.EventTypeNormal, EventRecovered)
}

// write stores the recovered status of a Run and tells its user.
func (c *Controller) write(ctx context.Context, run, out *v1alpha1.Run, eventType, reason string) error {
	if _, err := c.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("recovering Run %s/%s (%s → %s): %w", run.Namespace, run.Name, run.Status.Phase, out.Status.Phase, err)
	}
	klog.FromContext(ctx).Info("Recovered Run", "phase", out.Status.Phase, "nextAttempt", out.Status.Attempt, "message", out.Status.Message)
	c.recorder.Event(run, eventType, reason, out.Status.Message)
	return nil
}

// ended returns run in a terminal phase with reason, as runtimed records an
// end: completionTime, condition Completed=True, and for a function
// Ready=False with the same reason. The assignment stays, as a record.
func ended(run *v1alpha1.Run, phase lifecycle.Phase, reason, msg string, now time.Time) *v1alpha1.Run {
	out := run.DeepCopy()
	completed := metav1.NewMicroTime(now)
	out.Status.Phase = phase
	out.Status.CompletionTime = &completed
	out.Status.Message = validation.BoundMessage(msg)
	conditions := []string{lifecycle.ConditionCompleted}
	if run.Spec.Mode.Function != nil {
		conditions = append(conditions, lifecycle.ConditionReady)
	}
	for _, typ := range conditions {
		status := metav1.ConditionTrue
		if typ == lifecycle.ConditionReady {
			status = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
			Type:               typ,
			Status:             status,
			Reason:             reason,
			Message:            validation.BoundMessage(msg),
			ObservedGeneration: run.Generation,
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	return out
}

// removeFinalizer removes registration-cleanup from run, whose Pod is
// fenced: nothing of it can still serve there.
func (c *Controller) removeFinalizer(ctx context.Context, run *v1alpha1.Run) (*v1alpha1.Run, error) {
	if !slices.Contains(run.Finalizers, lifecycle.FinalizerRegistrationCleanup) {
		return run, nil
	}
	// A merge patch with the resourceVersion, not an update: it conflicts
	// as an update would, and needs no more of the Run than the informer
	// keeps (the controllers' informers drop a Run's code and env).
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": run.ResourceVersion,
		"finalizers":      slices.DeleteFunc(slices.Clone(run.Finalizers), func(f string) bool { return f == lifecycle.FinalizerRegistrationCleanup }),
	}})
	if err != nil {
		return nil, err
	}
	updated, err := c.client.KruntimesV1alpha1().Runs(run.Namespace).Patch(ctx, run.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("removing finalizer %s from Run %s/%s: %w", lifecycle.FinalizerRegistrationCleanup, run.Namespace, run.Name, err)
	}
	return updated, nil
}
