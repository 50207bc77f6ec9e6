package recovery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	kruntimesfake "kruntimes.io/kruntimes/client/clientset/versioned/fake"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

const grace = 40 * time.Second

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func runtimePod(uid types.UID, mutate ...func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "pod", UID: uid, Labels: map[string]string{lifecycle.LabelRuntime: "python"},
	}}
	for _, m := range mutate {
		m(pod)
	}
	return pod
}

func heartbeatOf(holder types.UID, renewed time.Time) *coordinationv1.Lease {
	renew := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: runtimepod.LeaseName("pod")},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(string(holder)),
			LeaseDurationSeconds: ptr.To(int32(runtimepod.HeartbeatLeaseDuration / time.Second)),
			RenewTime:            &renew,
		},
	}
}

func readyFunction(mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	run := &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fn", UID: "run-uid"},
		Spec:       v1alpha1.RunSpec{Runtime: "python", Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "h.h"}}},
		Status: v1alpha1.RunStatus{
			Phase: lifecycle.Ready, Attempt: 1, AssignedPod: "pod", AssignedPodUID: "pod-a",
			Conditions: []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: lifecycle.ReasonFunctionRegistered}},
		},
	}
	for _, m := range mutate {
		m(run)
	}
	return run
}

func markedLost(run *v1alpha1.Run) {
	run.Status.Conditions = []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonOwnerLost}}
}

// TestAssess pins what counts as a lost Pod, and what fence holds, from the
// informers' view plus the one GET for a Pod they do not show.
func TestAssess(t *testing.T) {
	deletionTime := metav1.NewTime(start.Add(-time.Second))
	cases := []struct {
		name string
		// informerPod is what the Runtime Pod informer shows; apiPod what a
		// GET returns.
		informerPod, apiPod *corev1.Pod
		lease               *coordinationv1.Lease
		run                 *v1alpha1.Run
		wantReason          string
		wantFence           bool
		// wantWake is when the Run is queued again, when it is not lost yet.
		wantWake time.Duration
	}{
		{
			name: "a Pod that no longer exists is gone, and that is a fence",
			run:  readyFunction(), wantReason: reasonPodGone, wantFence: true,
		},
		{
			name:        "a Pod name now held by another UID means the assigned Pod is gone",
			informerPod: runtimePod("pod-b"), lease: heartbeatOf("pod-b", start),
			run: readyFunction(), wantReason: reasonPodGone, wantFence: true,
		},
		{
			name:   "a Pod the informer has not shown is confirmed by a GET: another UID is gone",
			apiPod: runtimePod("pod-b"),
			run:    readyFunction(), wantReason: reasonPodGone, wantFence: true,
		},
		{
			name:        "a deleting Pod with a fresh heartbeat is no fence: its runtimed relocates the function; the Run wakes when the heartbeat would be lost",
			informerPod: runtimePod("pod-a", func(p *corev1.Pod) { p.DeletionTimestamp = &deletionTime }),
			lease:       heartbeatOf("pod-a", start),
			run:         readyFunction(),
			wantWake:    runtimepod.HeartbeatLeaseDuration + grace,
		},
		{
			name:     "a deleting Pod found by a GET with a fresh heartbeat is no fence either",
			apiPod:   runtimePod("pod-a", func(p *corev1.Pod) { p.DeletionTimestamp = &deletionTime }),
			lease:    heartbeatOf("pod-a", start),
			run:      readyFunction(),
			wantWake: runtimepod.HeartbeatLeaseDuration + grace,
		},
		{
			name:        "a deleting Pod whose heartbeat is lost is a fence",
			informerPod: runtimePod("pod-a", func(p *corev1.Pod) { p.DeletionTimestamp = &deletionTime }),
			lease:       heartbeatOf("pod-a", start.Add(-runtimepod.HeartbeatLeaseDuration-grace)),
			run:         readyFunction(), wantReason: reasonHeartbeatLost, wantFence: true,
		},
		{
			name:        "a running task on a deleting Pod with a fresh heartbeat waits too",
			informerPod: runtimePod("pod-a", func(p *corev1.Pod) { p.DeletionTimestamp = &deletionTime }),
			lease:       heartbeatOf("pod-a", start),
			run: readyFunction(func(r *v1alpha1.Run) {
				r.Spec.Mode = v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Entrypoint: "x"}}
				r.Status.Phase, r.Status.Conditions = lifecycle.Running, nil
			}),
			wantWake: runtimepod.HeartbeatLeaseDuration + grace,
		},
		{
			name:        "a Run the deleting Pod never claimed (Scheduled) goes at once: the deletion is its fence",
			informerPod: runtimePod("pod-a", func(p *corev1.Pod) { p.DeletionTimestamp = &deletionTime }),
			lease:       heartbeatOf("pod-a", start),
			run:         readyFunction(func(r *v1alpha1.Run) { r.Status.Phase, r.Status.Conditions = lifecycle.Scheduled, nil }),
			wantReason:  reasonPodDeleting, wantFence: true,
		},
		{
			name:   "a Pod without the Runtime label is not recovery's: its Runs stay",
			apiPod: runtimePod("pod-a", func(p *corev1.Pod) { p.Labels = nil }),
			run:    readyFunction(),
		},
		{
			name:        "a fresh heartbeat is not lost; the Run wakes when it would be",
			informerPod: runtimePod("pod-a"), lease: heartbeatOf("pod-a", start.Add(-time.Second)),
			run:      readyFunction(),
			wantWake: runtimepod.HeartbeatLeaseDuration + grace - time.Second,
		},
		{
			name:        "a heartbeat stale for less than the grace period is not lost yet",
			informerPod: runtimePod("pod-a"), lease: heartbeatOf("pod-a", start.Add(-runtimepod.HeartbeatLeaseDuration-grace+time.Second)),
			run:      readyFunction(),
			wantWake: time.Second,
		},
		{
			name:        "a heartbeat stale past the grace period is lost, but a live Pod is no fence",
			informerPod: runtimePod("pod-a"), lease: heartbeatOf("pod-a", start.Add(-runtimepod.HeartbeatLeaseDuration-grace)),
			run:        readyFunction(),
			wantReason: reasonHeartbeatLost,
		},
		{
			name:        "a Lease held by another Pod UID is no heartbeat; the grace counts from now",
			informerPod: runtimePod("pod-a"), lease: heartbeatOf("pod-old", start),
			run:      readyFunction(),
			wantWake: grace,
		},
		{
			name:        "a Scheduled function carrying its previous attempt's OwnerLost is not lost: its new Pod is healthy",
			informerPod: runtimePod("pod-a"), lease: heartbeatOf("pod-a", start),
			run:      readyFunction(markedLost, func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Scheduled }),
			wantWake: runtimepod.HeartbeatLeaseDuration + grace,
		},
		{
			name:        "a Run already marked OwnerLost stays lost though the heartbeat came back",
			informerPod: runtimePod("pod-a"), lease: heartbeatOf("pod-a", start),
			run:        readyFunction(markedLost),
			wantReason: reasonHeartbeatLost,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var apiObjects []runtime.Object
			if tc.apiPod != nil {
				apiObjects = append(apiObjects, tc.apiPod)
			}
			kube := kubefake.NewClientset(apiObjects...)
			kubeInformers := kubeinformers.NewSharedInformerFactory(kube, 0)
			kr := kruntimesfake.NewClientset()
			krInformers := externalversions.NewSharedInformerFactory(kr, 0)
			clk := testingclock.NewFakeClock(start)
			c, err := New(ctx, krInformers.Kruntimes().V1alpha1().Runs(), kubeInformers.Core().V1().Pods(),
				kubeInformers.Coordination().V1().Leases(), kube, kr, record.NewFakeRecorder(10),
				WithClock(clk), WithHeartbeatGracePeriod(grace))
			require.NoError(t, err)
			t.Cleanup(c.queue.ShutDown)
			if tc.informerPod != nil {
				require.NoError(t, kubeInformers.Core().V1().Pods().Informer().GetIndexer().Add(tc.informerPod))
			}
			if tc.lease != nil {
				require.NoError(t, kubeInformers.Coordination().V1().Leases().Informer().GetIndexer().Add(tc.lease))
			}

			l, err := c.assess(ctx, tc.run, start)
			require.NoError(t, err)
			if tc.wantReason == "" {
				assert.Nil(t, l, "not lost")
				if tc.wantWake > 0 {
					assert.Equal(t, 0, c.queue.Len(), "not queued before its time")
					// The delaying queue sets its timer in a goroutine, from the
					// time it reads then: step the clock only once the timer is
					// set (beside the queue's own heartbeat ticker), or the
					// timer starts late and never fires.
					require.Eventually(t, func() bool { return clk.Waiters() >= 2 }, 10*time.Second, time.Millisecond, "the queue's timer is set")
					clk.Step(tc.wantWake - time.Millisecond)
					assert.Equal(t, 0, c.queue.Len(), "not queued a millisecond early")
					clk.Step(time.Millisecond)
					// A wake past the queue's 10 s heartbeat makes it set its
					// timer anew when the first step fires the heartbeat; a
					// step taken before that timer exists is missed, so the
					// timer lands a millisecond later: allow a few, no more.
					late := 0
					require.Eventually(t, func() bool {
						if c.queue.Len() == 1 {
							return true
						}
						if late < 5 && clk.Waiters() >= 2 {
							clk.Step(time.Millisecond)
							late++
						}
						return false
					}, 10*time.Second, time.Millisecond, "queued again at %s", tc.wantWake)
				}
				return
			}
			require.NotNil(t, l, "lost")
			assert.Equal(t, tc.wantReason, l.reason)
			assert.Equal(t, tc.wantFence, l.fence != "", "fence %q", l.fence)
			assert.NotEmpty(t, l.detail)
		})
	}
}

// TestHoldsPod pins which Runs recovery acts for.
func TestHoldsPod(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name string
		run  *v1alpha1.Run
		want bool
	}{
		{"a Ready function holds its Pod", readyFunction(), true},
		{"a Scheduled Run holds its Pod before runtimed claimed it", readyFunction(func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Scheduled }), true},
		{"a Pending Run holds none", readyFunction(func(r *v1alpha1.Run) {
			r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Pending, "", ""
		}), false},
		{"a terminal Run does not", readyFunction(func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Succeeded }), false},
		{"a deleting terminal Run with the cleanup finalizer waits for its Pod", readyFunction(func(r *v1alpha1.Run) {
			r.Status.Phase, r.DeletionTimestamp, r.Finalizers = lifecycle.Cancelled, &now, []string{lifecycle.FinalizerRegistrationCleanup}
		}), true},
		{"a deleting terminal Run with another finalizer is not recovery's", readyFunction(func(r *v1alpha1.Run) {
			r.Status.Phase, r.DeletionTimestamp, r.Finalizers = lifecycle.Cancelled, &now, []string{"example.com/other"}
		}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, holdsPod(tc.run))
		})
	}
}
