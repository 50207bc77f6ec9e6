package nodeagent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// computeStatus derives the Pod's status from what runs here, keeping
// fields other writers own (PodScheduled, QOS class) and transition times of
// unchanged conditions from current.
func (r *podRunner) computeStatus(current *corev1.Pod) *corev1.PodStatus {
	r.mu.Lock()
	podIP := r.podIP
	initialized := r.initialized
	setupMessage := r.setupMessage
	startTime := r.startTime
	r.mu.Unlock()

	s := current.Status.DeepCopy()
	s.HostIP = "127.0.0.1"
	s.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	if podIP != "" {
		s.PodIP = podIP
		s.PodIPs = []corev1.PodIP{{IP: podIP}}
	}
	s.StartTime = &startTime

	s.InitContainerStatuses = nil
	for _, c := range r.initContainers {
		s.InitContainerStatuses = append(s.InitContainerStatuses, c.status())
	}
	s.ContainerStatuses = nil
	allReady, allRunning := true, true
	anyFailed, allTerminated, pulling := false, true, false
	for _, c := range r.containers {
		cs := c.status()
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
		allReady = allReady && cs.Ready
		allRunning = allRunning && cs.State.Running != nil
		if t := cs.State.Terminated; t != nil {
			anyFailed = anyFailed || t.ExitCode != 0
		} else {
			allTerminated = false
		}
		if w := cs.State.Waiting; w != nil && w.Reason == reasonImagePullBackOff {
			pulling = true
		}
	}
	for _, cs := range s.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason == reasonImagePullBackOff {
			pulling = true
		}
	}

	policy := current.Spec.RestartPolicy
	switch {
	case !initialized || pulling:
		s.Phase = corev1.PodPending
	case allTerminated && len(r.containers) > 0 && policy != corev1.RestartPolicyAlways &&
		(policy == corev1.RestartPolicyNever || !anyFailed):
		s.Phase = corev1.PodSucceeded
		if anyFailed {
			s.Phase = corev1.PodFailed
		}
	case allRunning || anyStarted(s.ContainerStatuses):
		s.Phase = corev1.PodRunning
	default:
		s.Phase = corev1.PodPending
	}
	s.Message = setupMessage
	s.Reason = ""

	ready := allReady && initialized && s.Phase == corev1.PodRunning
	conds := []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: boolCondition(podIP != "" && setupMessage == "")},
		{Type: corev1.PodInitialized, Status: boolCondition(initialized)},
		{Type: corev1.ContainersReady, Status: boolCondition(ready)},
		{Type: corev1.PodReady, Status: boolCondition(ready)},
	}
	if !ready {
		conds[2].Reason, conds[3].Reason = "ContainersNotReady", "ContainersNotReady"
	}
	if s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed {
		conds[2].Reason, conds[3].Reason = "PodCompleted", "PodCompleted"
	}
	s.Conditions = mergeConditions(current.Status.Conditions, conds)
	return s
}

func anyStarted(statuses []corev1.ContainerStatus) bool {
	for _, cs := range statuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 {
			return true
		}
	}
	return false
}

func boolCondition(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// mergeConditions keeps conditions this agent does not own and the
// transition time of those whose status did not change.
func mergeConditions(existing, owned []corev1.PodCondition) []corev1.PodCondition {
	now := metav1.Now()
	byType := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range existing {
		byType[c.Type] = c
	}
	var out []corev1.PodCondition
	ownedTypes := map[corev1.PodConditionType]bool{}
	for _, c := range owned {
		ownedTypes[c.Type] = true
		c.LastTransitionTime = now
		if old, ok := byType[c.Type]; ok && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
			c.LastProbeTime = old.LastProbeTime
		}
		out = append(out, c)
	}
	for _, c := range existing {
		if !ownedTypes[c.Type] {
			out = append(out, c)
		}
	}
	return out
}
