package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Labels: map[string]string{lifecycle.LabelRuntime: "bash"}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func heartbeat(pod *corev1.Pod, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(string(pod.UID)),
			LeaseDurationSeconds: ptr.To[int32](10),
			RenewTime:            ptr.To(metav1.NewMicroTime(renewed)),
		},
	}
}

func TestExcludedReason(t *testing.T) {
	cases := []struct {
		name  string
		pod   func() *corev1.Pod
		lease func(*corev1.Pod) *coordinationv1.Lease
		want  string
	}{
		{
			name:  "Running, Ready Pod with a fresh heartbeat is a candidate",
			pod:   func() *corev1.Pod { return readyPod("a") },
			lease: func(p *corev1.Pod) *coordinationv1.Lease { return heartbeat(p, testNow.Add(-time.Second)) },
			want:  "",
		},
		{
			name: "Pending Pod is not a candidate",
			pod: func() *corev1.Pod {
				p := readyPod("a")
				p.Status.Phase = corev1.PodPending
				return p
			},
			lease: func(p *corev1.Pod) *coordinationv1.Lease { return heartbeat(p, testNow) },
			want:  excludedNotRunning,
		},
		{
			name: "Pod that is not Ready is not a candidate",
			pod: func() *corev1.Pod {
				p := readyPod("a")
				p.Status.Conditions[0].Status = corev1.ConditionFalse
				return p
			},
			lease: func(p *corev1.Pod) *coordinationv1.Lease { return heartbeat(p, testNow) },
			want:  excludedNotReady,
		},
		{
			name: "deleting Pod is not a candidate",
			pod: func() *corev1.Pod {
				p := readyPod("a")
				p.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
				return p
			},
			lease: func(p *corev1.Pod) *coordinationv1.Lease { return heartbeat(p, testNow) },
			want:  excludedDeleting,
		},
		{
			name:  "Pod without a heartbeat Lease is not a candidate",
			pod:   func() *corev1.Pod { return readyPod("a") },
			lease: func(*corev1.Pod) *coordinationv1.Lease { return nil },
			want:  excludedNoHeartbeat,
		},
		{
			name: "Lease held by an earlier Pod of the same name does not count",
			pod:  func() *corev1.Pod { return readyPod("a") },
			lease: func(p *corev1.Pod) *coordinationv1.Lease {
				l := heartbeat(p, testNow)
				l.Spec.HolderIdentity = ptr.To("uid-of-a-previous-pod")
				return l
			},
			want: excludedNoHeartbeat,
		},
		{
			name:  "heartbeat renewed longer ago than its duration is stale",
			pod:   func() *corev1.Pod { return readyPod("a") },
			lease: func(p *corev1.Pod) *coordinationv1.Lease { return heartbeat(p, testNow.Add(-11*time.Second)) },
			want:  excludedStaleHeartbeat,
		},
		{
			name: "heartbeat without a duration uses the runtimepod default",
			pod:  func() *corev1.Pod { return readyPod("a") },
			lease: func(p *corev1.Pod) *coordinationv1.Lease {
				l := heartbeat(p, testNow.Add(-9*time.Second))
				l.Spec.LeaseDurationSeconds = nil
				return l
			},
			want: "",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod()
			assert.Equal(t, tc.want, excludedReason(pod, tc.lease(pod), testNow))
		})
	}
}

func TestChoosePod(t *testing.T) {
	a, b, c := readyPod("a"), readyPod("b"), readyPod("c")
	cases := []struct {
		name     string
		loads    []podLoad
		capacity int32
		want     string
	}{
		{"least-loaded Pod wins", []podLoad{{a, 2}, {b, 0}, {c, 1}}, 4, "b"},
		{"ties go to the first Pod name whatever the cache order", []podLoad{{c, 1}, {b, 1}, {a, 1}}, 4, "a"},
		{"full Pods are skipped even when least-loaded elsewhere is higher", []podLoad{{a, 1}, {b, 3}}, 1, ""},
		{"a full Pod is skipped", []podLoad{{a, 2}, {b, 1}}, 2, "b"},
		{"no candidates, no Pod", nil, 4, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := choosePod(tc.loads, tc.capacity, nil)
			if tc.want == "" {
				assert.Nil(t, p.pod)
				assert.NotEmpty(t, p.message)
				return
			}
			if assert.NotNil(t, p.pod) {
				assert.Equal(t, tc.want, p.pod.Name)
			}
		})
	}
}

func TestNoCapacityMessage(t *testing.T) {
	assert.Equal(t,
		"no Runtime Pod can take the Run: of 4 Pods, 1 are full (capacity 2 Runs per Pod), 1 not Ready, 2 stale runtimed heartbeat; the Run waits for a slot to be released",
		noCapacityMessage(1, 2, map[string]int{excludedStaleHeartbeat: 2, excludedNotReady: 1}))
	assert.Contains(t, noCapacityMessage(0, 1, nil), "no Pods yet")
}

func assignedRun(uid string, pod *corev1.Pod, phase lifecycle.Phase) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:       v1alpha1.RunSpec{Runtime: "bash"},
		Status:     v1alpha1.RunStatus{Phase: phase, AssignedPod: pod.Name, AssignedPodUID: pod.UID},
	}
}

func TestUsage(t *testing.T) {
	pod := readyPod("a")
	deleting := func(run *v1alpha1.Run, finalizers ...string) *v1alpha1.Run {
		run.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
		run.Finalizers = finalizers
		return run
	}
	earlierPod := readyPod("a")
	earlierPod.UID = "uid-of-an-earlier-a"
	cases := []struct {
		name    string
		runs    []*v1alpha1.Run
		assumed []types.UID
		want    int
	}{
		{"Scheduled, Running and Ready Runs hold capacity", []*v1alpha1.Run{
			assignedRun("1", pod, lifecycle.Scheduled), assignedRun("2", pod, lifecycle.Running), assignedRun("3", pod, lifecycle.Ready),
		}, nil, 3},
		{"terminal Runs release capacity", []*v1alpha1.Run{
			assignedRun("1", pod, lifecycle.Succeeded), assignedRun("2", pod, lifecycle.Failed),
			assignedRun("3", pod, lifecycle.Timeout), assignedRun("4", pod, lifecycle.Cancelled),
		}, nil, 0},
		{"a deleting Run holds capacity until its finalizer is gone", []*v1alpha1.Run{
			deleting(assignedRun("1", pod, lifecycle.Timeout), lifecycle.FinalizerRegistrationCleanup),
			deleting(assignedRun("2", pod, lifecycle.Timeout)),
		}, nil, 1},
		{"Runs of an earlier Pod of the same name do not count", []*v1alpha1.Run{
			assignedRun("1", earlierPod, lifecycle.Running),
		}, nil, 0},
		{"assumed reservations count", nil, []types.UID{"9"}, 1},
		{"a reservation the informer already shows counts once", []*v1alpha1.Run{
			assignedRun("1", pod, lifecycle.Scheduled),
		}, []types.UID{"1", "2"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, usage(pod, tc.runs, tc.assumed))
		})
	}
}

func TestAssumeCache(t *testing.T) {
	a := newAssumeCache()
	a.assume("run-1", "pod-a")
	a.assume("run-2", "pod-a")
	a.assume("run-3", "pod-b")
	assert.ElementsMatch(t, []types.UID{"run-1", "run-2"}, a.reservedOn("pod-a", testNow))

	a.forget("run-1")
	assert.ElementsMatch(t, []types.UID{"run-2"}, a.reservedOn("pod-a", testNow))

	// An in-flight bind never expires; a finished one expires after assumeTTL.
	a.finishBinding("run-2", testNow, true)
	assert.True(t, a.bound("run-2", testNow), "accepted by the server, not yet seen")
	assert.True(t, a.holds("run-2", testNow.Add(assumeTTL-time.Second)))
	assert.False(t, a.holds("run-2", testNow.Add(assumeTTL+time.Second)), "expired")
	assert.False(t, a.bound("run-2", testNow.Add(assumeTTL+time.Second)), "expired")
	assert.True(t, a.holds("run-3", testNow.Add(time.Hour)), "in flight")
	assert.False(t, a.bound("run-3", testNow), "in flight")
	assert.Len(t, a.reservedOn("pod-a", testNow.Add(assumeTTL-time.Second)), 1)
	assert.Empty(t, a.reservedOn("pod-a", testNow.Add(assumeTTL+time.Second)))
	assert.Len(t, a.reservedOn("pod-b", testNow.Add(time.Hour)), 1, "in-flight bind")

	a.assume("run-3", "pod-a")
	assert.Empty(t, a.reservedOn("pod-b", testNow), "re-assuming moves the reservation")
	a.assume("run-4", "pod-a")
	a.finishBinding("run-4", testNow, false)
	assert.False(t, a.bound("run-4", testNow), "outcome unknown: the Run is placed again")
}
