package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// Why a Runtime Pod is not a candidate; bounded, they also count Pods in the
// message of an unschedulable Run.
const (
	excludedNotRunning     = "not running"
	excludedNotReady       = "not Ready"
	excludedDeleting       = "deleting"
	excludedNoHeartbeat    = "no runtimed heartbeat"
	excludedStaleHeartbeat = "stale runtimed heartbeat"
)

// excludedReason returns why pod cannot take Runs now, or "" when it can: it
// must be Running, Ready, not deleting, and its runtimed must have renewed
// its heartbeat Lease (held by this Pod's UID, so a Lease left by an earlier
// Pod of the same name does not count) within the Lease's duration.
func excludedReason(pod *corev1.Pod, lease *coordinationv1.Lease, now time.Time) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return excludedDeleting
	case pod.Status.Phase != corev1.PodRunning:
		return excludedNotRunning
	case !podReady(pod):
		return excludedNotReady
	case lease == nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != string(pod.UID) || lease.Spec.RenewTime == nil:
		return excludedNoHeartbeat
	case !runtimepod.HeartbeatFresh(lease, now):
		return excludedStaleHeartbeat
	}
	return ""
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// holdsCapacity reports whether run occupies a slot of its assigned Pod:
// while in a phase that holds capacity, and while being deleted until its
// finalizer is gone (runtimed is still cleaning up on that Pod).
func holdsCapacity(run *v1alpha1.Run) bool {
	if run.Status.AssignedPod == "" {
		return false
	}
	if run.DeletionTimestamp != nil && len(run.Finalizers) > 0 {
		return true
	}
	return lifecycle.HoldsCapacity(run.Status.Phase)
}

// onPod reports whether run is assigned to this incarnation of pod: a Run
// bound to an earlier Pod of the same name does not use the new one's slots.
func onPod(run *v1alpha1.Run, pod *corev1.Pod) bool {
	return run.Status.AssignedPod == pod.Name &&
		(run.Status.AssignedPodUID == "" || run.Status.AssignedPodUID == pod.UID)
}

// podLoad is a candidate Pod and the Runs that occupy it, by Run UID.
type podLoad struct {
	pod  *corev1.Pod
	used int
}

// placement is the outcome of choosing a Pod for one Run.
type placement struct {
	// pod is the chosen Pod, nil when none fits.
	pod *corev1.Pod
	// reason and message say why no Pod fits; result is the attempt's
	// result in kruntimes_scheduler_attempts_total.
	reason, message, result string
}

// capacityOf is how many Runs each Pod of rt takes at once.
func capacityOf(rt *v1alpha1.Runtime) int32 {
	return max(rt.Spec.Capacity.Runs, 1)
}

// freeSlots counts the slots left on the candidate Pods.
func freeSlots(loads []podLoad, rt *v1alpha1.Runtime) int {
	free := 0
	for _, l := range loads {
		free += max(int(capacityOf(rt))-l.used, 0)
	}
	return free
}

// choosePod returns the least-loaded candidate with a free slot; ties go to
// the Pod whose name sorts first, so the choice does not depend on cache
// order. excluded counts the Pods that were no candidates, by reason.
func choosePod(loads []podLoad, capacity int32, excluded map[string]int) placement {
	var best *podLoad
	for i := range loads {
		l := &loads[i]
		if l.used >= int(capacity) {
			continue
		}
		if best == nil || l.used < best.used || (l.used == best.used && l.pod.Name < best.pod.Name) {
			best = l
		}
	}
	if best != nil {
		return placement{pod: best.pod}
	}
	return noCapacity(len(loads), capacity, excluded)
}

func noCapacity(full int, capacity int32, excluded map[string]int) placement {
	return placement{
		reason:  lifecycle.ReasonNoCapacity,
		message: noCapacityMessage(full, capacity, excluded),
		result:  resultNoCapacity,
	}
}

func noCapacityMessage(full int, capacity int32, excluded map[string]int) string {
	total := full
	for _, n := range excluded {
		total += n
	}
	if total == 0 {
		return "the Runtime has no Pods yet; waiting for its Deployment to create them (check spec.replicas and the Runtime's status)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no Runtime Pod can take the Run: of %d Pods, %d are full (capacity %d Runs per Pod)", total, full, capacity)
	reasons := make([]string, 0, len(excluded))
	for r := range excluded {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(&b, ", %d %s", excluded[r], r)
	}
	b.WriteString("; the Run waits for a slot to be released")
	return b.String()
}

// usage counts the Runs occupying pod: those the informer shows on it and
// the scheduler's own assumed reservations, counted once per Run UID.
func usage(pod *corev1.Pod, runs []*v1alpha1.Run, assumed []types.UID) int {
	seen := make(map[types.UID]struct{}, len(runs)+len(assumed))
	for _, run := range runs {
		if onPod(run, pod) && holdsCapacity(run) {
			seen[run.UID] = struct{}{}
		}
	}
	for _, uid := range assumed {
		seen[uid] = struct{}{}
	}
	return len(seen)
}

// place chooses a Pod for run among its Runtime's candidates and reserves
// the slot, taking run out of its line; or parks run on its line. Free
// slots go to the oldest Runs of the line: a Run with as many older ones
// in line as there are free slots leaves them the slots, and wakes those
// of them that are parked.
func (s *Scheduler) place(run *v1alpha1.Run) (placement, error) {
	key, lineKey := run.Namespace+"/"+run.Name, run.Namespace+"/"+run.Spec.Runtime
	s.placing.Lock()
	defer s.placing.Unlock()
	// A reservation left by an earlier attempt of this Run is not a load.
	s.assumed.forget(run.UID)
	rt, err := s.runtimes.Runtimes(run.Namespace).Get(run.Spec.Runtime)
	if err != nil && !apierrors.IsNotFound(err) {
		return placement{}, err
	}
	if rt == nil || rt.DeletionTimestamp != nil {
		msg := fmt.Sprintf("Runtime %q does not exist in namespace %s; create it, or recreate this Run naming an existing Runtime", run.Spec.Runtime, run.Namespace)
		if rt != nil {
			msg = fmt.Sprintf("Runtime %q is being deleted; the Run waits for a Runtime of that name", run.Spec.Runtime)
		}
		s.park(key, lineKey)
		return placement{reason: lifecycle.ReasonRuntimeNotFound, message: msg, result: resultRuntimeNotFound}, nil
	}
	now := s.clock.Now()
	loads, excluded, err := s.loads(run.Namespace, rt, now)
	if err != nil {
		return placement{}, err
	}
	capacity := capacityOf(rt)
	if free := freeSlots(loads, rt); free > 0 && s.lines.ahead(key, free) {
		// The older Runs take every free slot, as if the Pods were full.
		s.park(key, lineKey)
		for _, k := range s.lines.wake(lineKey, free, key) {
			s.queue.Add(k)
		}
		return noCapacity(len(loads), capacity, excluded), nil
	}
	p := choosePod(loads, capacity, excluded)
	if p.pod == nil {
		s.park(key, lineKey)
		return p, nil
	}
	s.assumed.assume(run.UID, p.pod.UID)
	s.lines.leave(key)
	return p, nil
}

// park parks the Run of key on lineKey and queues the line's recheck if
// it has none queued.
func (s *Scheduler) park(key, lineKey string) {
	if s.lines.park(key) {
		s.checks.AddAfter(lineKey, parkedRecheck)
	}
}

// loads returns rt's candidate Pods with their usage, and counts the other
// Pods by why they are no candidates. Only Pods of rt's own Deployment are
// candidates; a Pod that merely carries rt's label is counted as
// excludedNotOwned.
func (s *Scheduler) loads(namespace string, rt *v1alpha1.Runtime, now time.Time) ([]podLoad, map[string]int, error) {
	pods, err := s.pods.Pods(namespace).List(labels.SelectorFromSet(labels.Set{lifecycle.LabelRuntime: rt.Name}))
	if err != nil {
		return nil, nil, err
	}
	excluded := map[string]int{}
	loads := make([]podLoad, 0, len(pods))
	for _, pod := range pods {
		if !s.trustLabels {
			if err := s.owners.check(pod, rt); err != nil {
				excluded[excludedNotOwned]++
				continue
			}
		}
		lease, err := s.leases.Leases(pod.Namespace).Get(runtimepod.LeaseName(pod.Name))
		if err != nil {
			lease = nil
		}
		if why := excludedReason(pod, lease, now); why != "" {
			excluded[why]++
			continue
		}
		loads = append(loads, podLoad{pod: pod, used: usage(pod, s.runsOn(pod), s.assumed.reservedOn(pod.UID, now))})
	}
	return loads, excluded, nil
}

func (s *Scheduler) runsOn(pod *corev1.Pod) []*v1alpha1.Run {
	return s.indexed(AssignedPodIndex, pod.Namespace+"/"+pod.Name)
}
