package nodeagent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerState is the part of a containerRunner computeStatus reads.
type containerState struct {
	running    bool
	exitCode   *int32
	waiting    string
	ready      bool
	restarts   int32
	notStarted bool
}

func exit(code int32) *int32 { return &code }

func TestComputeStatus(t *testing.T) {
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}
	tests := []struct {
		name        string
		policy      corev1.RestartPolicy
		initialized bool
		containers  []containerState
		wantPhase   corev1.PodPhase
		wantReady   corev1.ConditionStatus
	}{
		{name: "an image that maps to no binary keeps the Pod Pending",
			policy: corev1.RestartPolicyAlways, initialized: false,
			containers: []containerState{{waiting: reasonImagePullBackOff}},
			wantPhase:  corev1.PodPending, wantReady: corev1.ConditionFalse},
		{name: "running and ready containers make a Running, Ready Pod",
			policy: corev1.RestartPolicyAlways, initialized: true,
			containers: []containerState{{running: true, ready: true}, {running: true, ready: true}},
			wantPhase:  corev1.PodRunning, wantReady: corev1.ConditionTrue},
		{name: "a failing readiness probe keeps a Running Pod not Ready",
			policy: corev1.RestartPolicyAlways, initialized: true,
			containers: []containerState{{running: true, ready: true}, {running: true}},
			wantPhase:  corev1.PodRunning, wantReady: corev1.ConditionFalse},
		{name: "restartPolicy Never and every container exited 0 → Succeeded",
			policy: corev1.RestartPolicyNever, initialized: true,
			containers: []containerState{{exitCode: exit(0)}, {exitCode: exit(0)}},
			wantPhase:  corev1.PodSucceeded, wantReady: corev1.ConditionFalse},
		{name: "restartPolicy Never and one container failed → Failed",
			policy: corev1.RestartPolicyNever, initialized: true,
			containers: []containerState{{exitCode: exit(0)}, {exitCode: exit(1)}},
			wantPhase:  corev1.PodFailed, wantReady: corev1.ConditionFalse},
		{name: "restartPolicy OnFailure and exit 0 → Succeeded",
			policy: corev1.RestartPolicyOnFailure, initialized: true,
			containers: []containerState{{exitCode: exit(0)}},
			wantPhase:  corev1.PodSucceeded, wantReady: corev1.ConditionFalse},
		{name: "a container in CrashLoopBackOff keeps the Pod Running, not Ready",
			policy: corev1.RestartPolicyAlways, initialized: true,
			containers: []containerState{{waiting: reasonCrashLoopBackOff, restarts: 3}},
			wantPhase:  corev1.PodRunning, wantReady: corev1.ConditionFalse},
		{name: "init containers still running keep the Pod Pending",
			policy: corev1.RestartPolicyAlways, initialized: false,
			containers: []containerState{{waiting: reasonPodInitializing}},
			wantPhase:  corev1.PodPending, wantReady: corev1.ConditionFalse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"},
				Spec:       corev1.PodSpec{RestartPolicy: tc.policy},
				Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{scheduled}},
			}
			r := &podRunner{uid: pod.UID, pod: pod, podIP: "127.100.0.2", initialized: tc.initialized, startTime: metav1.Now()}
			for i, cs := range tc.containers {
				c := &containerRunner{pod: r, spec: corev1.Container{Name: string(rune('a' + i)), Image: "x/runtimed"},
					ready: cs.ready, restartCount: cs.restarts, started: !cs.notStarted}
				switch {
				case cs.running:
					c.running = &corev1.ContainerStateRunning{}
				case cs.exitCode != nil:
					c.terminated = &corev1.ContainerStateTerminated{ExitCode: *cs.exitCode}
				default:
					c.waiting = &corev1.ContainerStateWaiting{Reason: cs.waiting}
				}
				r.containers = append(r.containers, c)
			}

			status := r.computeStatus(pod)

			assert.Equal(t, tc.wantPhase, status.Phase)
			assert.Equal(t, "127.100.0.2", status.PodIP)
			conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
			for _, c := range status.Conditions {
				conds[c.Type] = c.Status
			}
			assert.Equal(t, tc.wantReady, conds[corev1.PodReady], "Ready")
			assert.Equal(t, tc.wantReady, conds[corev1.ContainersReady], "ContainersReady")
			assert.Equal(t, corev1.ConditionTrue, conds[corev1.PodScheduled], "the binder's PodScheduled is kept")
			assert.Len(t, status.ContainerStatuses, len(tc.containers))
		})
	}
}
