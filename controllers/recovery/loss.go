package recovery

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// What was lost; bounded, they label the metrics.
const (
	// reasonPodGone: the assigned Pod UID no longer exists (NotFound, or
	// the name now belongs to another Pod).
	reasonPodGone = "PodGone"
	// reasonPodDeleting: the assigned Pod is being deleted, and the Run
	// was never claimed there: nothing of it runs on the Pod.
	reasonPodDeleting = "PodDeleting"
	// reasonHeartbeatLost: the Pod is there, but its runtimed has not
	// renewed its heartbeat for longer than the grace period.
	reasonHeartbeatLost = "HeartbeatLost"
)

// loss says why the Pod a Run holds is lost, and whether a fence holds yet.
type loss struct {
	// reason is one of the reason constants.
	reason string
	// fence names the fence that holds, for the Run's conditions and
	// message; empty while none does (a silent Pod not yet deleted).
	fence string
	// detail says what was observed, for status.message.
	detail string
}

// assess returns how run's Pod is lost, or nil when it is not (or not yet:
// then the Run is queued again for the moment its heartbeat would be lost).
// A Pod the informer does not show is looked up in the API first: the
// informer may be behind, and it only shows Runtime Pods.
func (c *Controller) assess(ctx context.Context, run *v1alpha1.Run, now time.Time) (*loss, error) {
	st := run.Status
	podRef := fmt.Sprintf("Pod %s (uid %s)", st.AssignedPod, st.AssignedPodUID)
	pod, err := c.pods.Pods(run.Namespace).Get(st.AssignedPod)
	switch {
	case apierrors.IsNotFound(err):
		live, err := c.kube.CoreV1().Pods(run.Namespace).Get(ctx, st.AssignedPod, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return gone(podRef, "it no longer exists"), nil
		case err != nil:
			return nil, fmt.Errorf("looking up Pod %s/%s of Run %s: %w", run.Namespace, st.AssignedPod, run.Name, err)
		case live.UID != st.AssignedPodUID:
			return gone(podRef, "the name now belongs to Pod uid "+string(live.UID)), nil
		case live.DeletionTimestamp != nil:
			return c.assessDeleting(run, podRef, live, now), nil
		case live.Labels[lifecycle.LabelRuntime] == "":
			// Not a Runtime Pod (a test's, or one taken out of its pool by
			// removing the label): its Runs are not recovery's to move.
			klog.FromContext(ctx).V(2).Info("The Run's Pod is no Runtime Pod (no label " + lifecycle.LabelRuntime + "); leaving it alone")
			return nil, nil
		}
		// The informer has not shown the Pod yet; its event comes.
		return nil, nil
	case err != nil:
		return nil, err
	case pod.UID != st.AssignedPodUID:
		// Names are unique among existing Pods: the assigned one was
		// deleted before this one was created.
		return gone(podRef, "the name now belongs to Pod uid "+string(pod.UID)), nil
	case pod.DeletionTimestamp != nil:
		return c.assessDeleting(run, podRef, pod, now), nil
	}
	renewed, lostAt := c.heartbeatLostAt(pod, now)
	if !markedOwnerLost(run) && now.Before(lostAt) {
		c.queue.AddAfter(run.Namespace+"/"+run.Name, lostAt.Sub(now))
		return nil, nil
	}
	detail := fmt.Sprintf("the runtimed heartbeat of %s was not renewed for longer than %s past its Lease", podRef, c.grace)
	if !renewed.IsZero() {
		detail = fmt.Sprintf("the runtimed heartbeat of %s was last renewed at %s, more than %s past its Lease", podRef, renewed.UTC().Format(time.RFC3339), c.grace)
	}
	// A Run already marked unroutable stays lost even if the heartbeat
	// came back: the decision was made, and the Pod must go.
	return &loss{reason: reasonHeartbeatLost, detail: detail}, nil
}

// assessDeleting says whether run, which holds pod, a Pod being deleted, is
// lost. A graceful deletion is a planned disruption: the Pod's runtimed
// gives its functions back itself (Pending, same attempt, reason
// Relocating) once it stopped them, and a task ends or is lost with the
// Pod. Deleting alone proves nothing stopped, so recovery waits — for the
// release, for the Pod to be gone (an unplanned loss then: an attempt), or
// for its heartbeat to be lost, as for a live Pod. Only a Run the Pod never
// claimed (Scheduled) goes at once: nothing of it runs there.
func (c *Controller) assessDeleting(run *v1alpha1.Run, podRef string, pod *corev1.Pod, now time.Time) *loss {
	if run.Status.Phase == lifecycle.Scheduled && run.DeletionTimestamp == nil {
		return deleting(podRef, pod)
	}
	renewed, lostAt := c.heartbeatLostAt(pod, now)
	if !markedOwnerLost(run) && now.Before(lostAt) {
		// runtimed lives and relocates; its write (or the Pod's removal)
		// wakes the Run, the timer only a runtimed that went silent.
		c.queue.AddAfter(run.Namespace+"/"+run.Name, lostAt.Sub(now))
		return nil
	}
	detail := fmt.Sprintf("%s is being deleted and its runtimed heartbeat was not renewed for longer than %s past its Lease", podRef, c.grace)
	if !renewed.IsZero() {
		detail = fmt.Sprintf("%s is being deleted and its runtimed heartbeat was last renewed at %s, more than %s past its Lease",
			podRef, renewed.UTC().Format(time.RFC3339), c.grace)
	}
	return &loss{
		reason: reasonHeartbeatLost,
		fence: fmt.Sprintf("fence: %s is deleting since %s and its runtimed heartbeat is lost",
			podRef, pod.DeletionTimestamp.UTC().Format(time.RFC3339)),
		detail: detail,
	}
}

func gone(podRef, why string) *loss {
	return &loss{
		reason: reasonPodGone,
		fence:  fmt.Sprintf("fence: %s no longer exists (%s)", podRef, why),
		detail: fmt.Sprintf("%s is gone: %s", podRef, why),
	}
}

func deleting(podRef string, pod *corev1.Pod) *loss {
	return &loss{
		reason: reasonPodDeleting,
		fence:  fmt.Sprintf("fence: %s is deleting since %s", podRef, pod.DeletionTimestamp.UTC().Format(time.RFC3339)),
		detail: podRef + " is being deleted",
	}
}

// heartbeatLostAt returns when pod counts as lost unless its runtimed renews
// its heartbeat: the Lease's renewTime plus its duration plus the grace
// period. A Pod with no Lease of its own (none, or one held by another Pod
// UID) counts from when this controller first saw it so; renewed is then
// zero.
func (c *Controller) heartbeatLostAt(pod *corev1.Pod, now time.Time) (renewed, lostAt time.Time) {
	lease, err := c.leases.Leases(pod.Namespace).Get(runtimepod.LeaseName(pod.Name))
	if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == string(pod.UID) && lease.Spec.RenewTime != nil {
		c.silentMu.Lock()
		delete(c.silentSince, pod.UID)
		c.silentMu.Unlock()
		d := runtimepod.HeartbeatLeaseDuration
		if s := lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
			d = time.Duration(*s) * time.Second
		}
		return lease.Spec.RenewTime.Time, lease.Spec.RenewTime.Add(d + c.grace)
	}
	c.silentMu.Lock()
	defer c.silentMu.Unlock()
	since, ok := c.silentSince[pod.UID]
	if !ok {
		since = now
		c.silentSince[pod.UID] = now
	}
	return time.Time{}, since.Add(c.grace)
}

// markedOwnerLost reports whether recovery already made run's current
// assignment unroutable: a function Run that runtimed claimed (Running or
// Ready) whose Ready condition is False with reason OwnerLost. Claiming
// sets reason Registering, so on a claimed Run only recovery's mark for this
// assignment carries OwnerLost, and it survives a leader change. A Scheduled
// Run may still carry the OwnerLost of the attempt recovery sent back to
// Pending: that one says nothing about its new Pod.
func markedOwnerLost(run *v1alpha1.Run) bool {
	if run.Spec.Mode.Function == nil || (run.Status.Phase != lifecycle.Running && run.Status.Phase != lifecycle.Ready) {
		return false
	}
	c := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lifecycle.ReasonOwnerLost
}

// detection is when this controller first saw an attempt's Pod lost, and
// when it confirmed a fence for it; for the metrics and the OwnerLost Event.
type detection struct {
	attempt int32
	at      time.Time
	fenced  bool
}

// detections holds a detection per Run UID, until the Run is recovered.
type detections struct {
	mu    sync.Mutex
	byRun map[types.UID]detection
}

func newDetections() *detections {
	return &detections{byRun: map[types.UID]detection{}}
}

// start records that run's attempt was found lost at now, unless it was
// already; first says whether this is the first time. A function marked
// unroutable by an earlier leader counts from when it was marked.
func (d *detections) start(run *v1alpha1.Run, now time.Time) (det detection, first bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	det, ok := d.byRun[run.UID]
	if ok && det.attempt == run.Status.Attempt {
		return det, false
	}
	det = detection{attempt: run.Status.Attempt, at: now}
	if markedOwnerLost(run) {
		if c := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady); c.LastTransitionTime.Time.Before(now) {
			det.at = c.LastTransitionTime.Time
		}
	}
	d.byRun[run.UID] = det
	return det, true
}

// fence records that a fence holds for run's attempt and returns how long
// after the detection; first says whether it was the first time.
func (d *detections) fence(uid types.UID, now time.Time) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	det, ok := d.byRun[uid]
	if !ok || det.fenced {
		return 0, false
	}
	det.fenced = true
	d.byRun[uid] = det
	return now.Sub(det.at), true
}

// finish drops the detection of a recovered Run and returns it.
func (d *detections) finish(uid types.UID) (detection, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	det, ok := d.byRun[uid]
	delete(d.byRun, uid)
	return det, ok
}

func (d *detections) forget(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byRun, uid)
}
