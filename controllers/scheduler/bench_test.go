package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned/fake"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/test/bench/cputime"
)

// BenchmarkRefillAFreedSlot measures what one freed slot costs the
// scheduler with n Runs queued for it: the Run holding the one slot
// finishes, the scheduler hands the slot to the oldest waiting Run and
// binds it, and a new Run joins the back of the line, so the line stays n
// long. The informers are fed by hand and the client is a fake, so what
// is measured is the scheduler's own work; cpu-µs/op is the process's CPU
// per placement (garbage collection included), which a shared machine
// disturbs less than the wall time. It uses only what the
// scheduler had before its Runtimes' lines, so the same file measures
// both (interleave them: see docs/benchmarks.md).
func BenchmarkRefillAFreedSlot(b *testing.B) {
	for _, n := range []int{8, 200, 2000, 20000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) { benchmarkRefill(b, n) })
	}
}

func benchmarkRefill(b *testing.B, n int) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(10))
	kr := fake.NewSimpleClientset()
	kube := kubefake.NewSimpleClientset()
	krInformers := externalversions.NewSharedInformerFactory(kr, 0)
	kubeInformers := kubeinformers.NewSharedInformerFactory(kube, 0)
	clock := testingclock.NewFakeClock(testNow)
	runInformer := krInformers.Kruntimes().V1alpha1().Runs()
	rtInformer := krInformers.Kruntimes().V1alpha1().Runtimes()
	podInformer := kubeInformers.Core().V1().Pods()
	rsInformer := kubeInformers.Apps().V1().ReplicaSets()
	deployInformer := kubeInformers.Apps().V1().Deployments()
	leaseInformer := kubeInformers.Coordination().V1().Leases()
	s, err := New(ctx, runInformer, rtInformer, podInformer, rsInformer, deployInformer, leaseInformer, kr, &record.FakeRecorder{}, WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	defer s.queue.ShutDown()
	runs := runInformer.Informer().GetIndexer()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	rt := &v1alpha1.Runtime{ObjectMeta: metav1.ObjectMeta{Name: "bash", Namespace: "ns", UID: runtimeUID("bash")},
		Spec: v1alpha1.RuntimeSpec{Capacity: v1alpha1.RuntimeCapacity{Runs: 1}}}
	must(rtInformer.Informer().GetIndexer().Add(rt))
	pod := readyPod("a")
	d, rs := ownerChain(pod, "bash")
	must(deployInformer.Informer().GetIndexer().Add(d))
	must(rsInformer.Informer().GetIndexer().Add(rs))
	must(podInformer.Informer().GetIndexer().Add(pod))
	must(leaseInformer.Informer().GetIndexer().Add(heartbeat(pod, testNow)))

	created := 0
	newRun := func() *v1alpha1.Run {
		created++
		r := &v1alpha1.Run{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%06d", created), Namespace: "ns",
				UID:               types.UID(fmt.Sprintf("uid-%06d", created)),
				CreationTimestamp: metav1.NewTime(testNow.Add(time.Duration(created) * time.Millisecond).Truncate(time.Second))},
			Spec:   v1alpha1.RunSpec{Runtime: "bash"},
			Status: v1alpha1.RunStatus{Phase: lifecycle.Pending},
		}
		must(kr.Tracker().Add(r.DeepCopy()))
		must(runs.Add(r))
		s.addRun(r)
		return r
	}
	drain := func() {
		for s.wakes.Len() > 0 || s.queue.Len() > 0 {
			if s.wakes.Len() > 0 {
				key, _ := s.wakes.Get()
				namespace, name, _ := cache.SplitMetaNamespaceKey(key)
				s.fillFreeSlots(namespace, name)
				s.wakes.Done(key)
				continue
			}
			s.processNextWorkItem(ctx)
		}
	}
	// update replaces the informer's copy of the Run of name, as a watch
	// event would.
	update := func(name string, mutate func(*v1alpha1.Run)) {
		obj, ok, err := runs.GetByKey("ns/" + name)
		if err != nil || !ok {
			b.Fatalf("Run %s: %v", name, err)
		}
		old := obj.(*v1alpha1.Run)
		cur := old.DeepCopy()
		mutate(cur)
		must(runs.Update(cur))
		s.updateRun(old, cur)
	}
	holder := newRun()
	update(holder.Name, func(r *v1alpha1.Run) {
		r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Running, pod.Name, pod.UID
	})
	line := make([]string, 0, n+b.N)
	for range n {
		line = append(line, newRun().Name)
	}
	drain()
	current := holder.Name

	b.ResetTimer()
	cpu := cputime.Now()
	for range b.N {
		update(current, func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Succeeded })
		drain()
		next := line[0]
		line = line[1:]
		// The informer shows the binding, and the Run starts.
		update(next, func(r *v1alpha1.Run) {
			r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Running, pod.Name, pod.UID
		})
		current = next
		line = append(line, newRun().Name)
		drain()
	}
	b.StopTimer()
	cputime.Report(b, cpu)
	obj, err := kr.Tracker().Get(v1alpha1.SchemeGroupVersion.WithResource("runs"), "ns", current)
	must(err)
	if phase := obj.(*v1alpha1.Run).Status.Phase; phase != lifecycle.Scheduled {
		b.Fatalf("the oldest waiting Run %s was not bound: %s", current, phase)
	}
}

// BenchmarkLineOperations measures the Runtimes' lines alone, per
// placement, with n Runs parked in one line: a new Run joins and parks at
// the back, and a freed slot wakes the oldest, which then leaves the line
// (bound). It is the part of BenchmarkRefillAFreedSlot that depends on n
// (heap operations, O(log n)).
func BenchmarkLineOperations(b *testing.B) {
	for _, n := range []int{8, 200, 2000, 20000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			ls := newLines(func(_, runtime string) string { return runtime })
			created := 0
			join := func() {
				created++
				key := fmt.Sprintf("ns/r%07d", created)
				ls.try(lineEntry{key: key, line: "ns/bash", seq: uint64(created), uid: types.UID(key),
					created: testNow.Add(time.Duration(created) * time.Millisecond).Truncate(time.Second)}, "ns", "bash")
				ls.park(key)
			}
			for range n {
				join()
			}
			b.ResetTimer()
			for range b.N {
				join()
				for _, key := range ls.wake("ns/bash", 1, "") {
					ls.leave(key)
				}
			}
			b.StopTimer()
			if parked, trying := ls.depth("ns/bash"); parked != n || trying != 0 {
				b.Fatalf("the line holds %d parked and %d being tried, want %d and 0", parked, trying, n)
			}
		})
	}
}
