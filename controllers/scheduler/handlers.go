package scheduler

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/tombstone"
)

// wantsScheduling reports whether the scheduler has work for run: placing
// it, or cancelling it.
func wantsScheduling(run *v1alpha1.Run) bool {
	return run.Status.Phase == lifecycle.Pending && run.DeletionTimestamp == nil
}

func (s *Scheduler) enqueueRun(run *v1alpha1.Run) {
	s.queue.Add(run.Namespace + "/" + run.Name)
}

// observe drops the reservation of a Run the informer shows past Pending:
// from now on it is counted where the informer shows it.
func (s *Scheduler) observe(run *v1alpha1.Run) {
	if run.Status.Phase != lifecycle.Pending {
		s.assumed.forget(run.UID)
	}
}

func (s *Scheduler) addRun(obj any) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok {
		return
	}
	s.arrivals.see(run.UID)
	s.observe(run)
	if !wantsScheduling(run) {
		return
	}
	if !run.Spec.CancelRequested && !retry.NotBefore(run).After(s.clock.Now()) {
		// In line from the start, so that the oldest of the Runs listed
		// when the scheduler starts takes the first free slot, whichever
		// is tried first.
		s.join(run)
	}
	s.enqueueRun(run)
}

func (s *Scheduler) updateRun(oldObj, newObj any) {
	old, okOld := oldObj.(*v1alpha1.Run)
	run, ok := newObj.(*v1alpha1.Run)
	if !ok || !okOld {
		return
	}
	s.observe(run)
	key := run.Namespace + "/" + run.Name
	switch {
	case !wantsScheduling(run):
		s.lines.leave(key)
	case schedulingChanged(old, run) || !s.lines.isParked(key):
		s.enqueueRun(run)
	case s.noteWanted(key):
		// A parked Run changed in nothing the scheduler decides on (its
		// labels, the note just written); a note that lost a race to this
		// copy is written from it.
		s.notes.Add(key)
	}
	released := holdsCapacity(old) && !(holdsCapacity(run) && run.Status.AssignedPodUID == old.Status.AssignedPodUID)
	// A Run that leaves the line without taking a slot (cancelled, being
	// deleted) may have been the one a younger Run left a free slot to.
	leftLine := wantsScheduling(old) && !wantsScheduling(run) && run.Status.Phase != lifecycle.Scheduled
	if released || leftLine {
		s.wakeRuntime(run.Namespace, run.Spec.Runtime)
	}
}

// schedulingChanged reports whether a Pending Run changed in something the
// scheduler decides on: a parked Run that changed in nothing else stays
// parked.
func schedulingChanged(old, run *v1alpha1.Run) bool {
	return old.Spec.Runtime != run.Spec.Runtime ||
		old.Spec.CancelRequested != run.Spec.CancelRequested ||
		old.Status.Phase != run.Status.Phase ||
		old.Status.Attempt != run.Status.Attempt ||
		(old.DeletionTimestamp == nil) != (run.DeletionTimestamp == nil) ||
		!retry.NotBefore(old).Equal(retry.NotBefore(run))
}

func (s *Scheduler) deleteRun(obj any) {
	run, ok := tombstone.As[*v1alpha1.Run](obj)
	if !ok {
		return
	}
	key := run.Namespace + "/" + run.Name
	s.lines.leave(key)
	s.forgetNote(key)
	s.assumed.forget(run.UID)
	s.arrivals.forget(run.UID)
	if holdsCapacity(run) || wantsScheduling(run) {
		s.wakeRuntime(run.Namespace, run.Spec.Runtime)
	}
}

func (s *Scheduler) runtimeChanged(obj any) {
	if rt, ok := tombstone.As[*v1alpha1.Runtime](obj); ok {
		s.wakeAll(rt.Namespace, rt.Name)
	}
}

func (s *Scheduler) runtimeUpdated(oldObj, newObj any) {
	old, okOld := oldObj.(*v1alpha1.Runtime)
	rt, ok := newObj.(*v1alpha1.Runtime)
	if !ok || !okOld {
		return
	}
	switch {
	case old.UID != rt.UID || (old.DeletionTimestamp == nil) != (rt.DeletionTimestamp == nil):
		s.wakeAll(rt.Namespace, rt.Name)
	case old.Spec.Capacity != rt.Spec.Capacity:
		s.wakeRuntime(rt.Namespace, rt.Name)
	}
}

func (s *Scheduler) podChanged(obj any) {
	if pod, ok := tombstone.As[*corev1.Pod](obj); ok {
		s.wakeRuntime(pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
	}
}

// ownerAdded wakes the parked Runs of the Runtime whose label a new
// ReplicaSet or Deployment carries: its Pods may have become candidates.
func (s *Scheduler) ownerAdded(obj any) {
	if o, err := meta.Accessor(obj); err == nil && o.GetLabels()[lifecycle.LabelRuntime] != "" {
		s.wakeRuntime(o.GetNamespace(), o.GetLabels()[lifecycle.LabelRuntime])
	}
}

// podUpdated wakes the Runtime's parked Runs when a Pod may have become a
// candidate; status churn that changes nothing of that is ignored.
func (s *Scheduler) podUpdated(oldObj, newObj any) {
	old, okOld := oldObj.(*corev1.Pod)
	pod, ok := newObj.(*corev1.Pod)
	if !ok || !okOld {
		return
	}
	if old.Status.Phase != pod.Status.Phase || podReady(old) != podReady(pod) ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) ||
		old.Labels[lifecycle.LabelRuntime] != pod.Labels[lifecycle.LabelRuntime] ||
		!apiequality.Semantic.DeepEqual(metav1.GetControllerOf(old), metav1.GetControllerOf(pod)) {
		s.wakeRuntime(pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
	}
}

// leaseUpdated wakes the parked Runs of a Pod's Runtime when its heartbeat
// turns fresh; the renewals of a fresh heartbeat change nothing.
func (s *Scheduler) leaseUpdated(oldObj, newObj any) {
	lease, ok := newObj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	now := s.clock.Now()
	if !runtimepod.HeartbeatFresh(lease, now) {
		return
	}
	if old, ok := oldObj.(*coordinationv1.Lease); ok && runtimepod.HeartbeatFresh(old, now) &&
		apiequality.Semantic.DeepEqual(old.Spec.HolderIdentity, lease.Spec.HolderIdentity) {
		return
	}
	pod, err := s.pods.Pods(lease.Namespace).Get(lease.Name)
	if err != nil {
		return
	}
	s.wakeRuntime(pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
}
