package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/runtimepod"
	runtimedheartbeat "kruntimes.io/kruntimes/runtimed/heartbeat"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestHeartbeatLease drives runtimed's heartbeat against kube-apiserver with
// a controlled clock: the Lease it writes is what the scheduler trusts.
func TestHeartbeatLease(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "heartbeat")
	ctx := framework.Context(t, 2*time.Minute)
	leases := f.Client.CoordinationV1()

	// A real Pod owns the Lease, so the garbage collector leaves it alone.
	pod, err := f.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-bash-abc"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testServerImage}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("renew creates, then renews the Lease of this Pod", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		h := runtimedheartbeat.New(leases, runtimepod.Pod{Name: pod.Name, Namespace: ns, UID: pod.UID}, clk)
		require.Error(t, h.Fresh(), "not fresh before the first renewal")
		require.NoError(t, h.Renew(ctx))
		lease, err := leases.Leases(ns).Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, string(pod.UID), *lease.Spec.HolderIdentity)
		assert.Equal(t, int32(runtimepod.HeartbeatLeaseDuration/time.Second), *lease.Spec.LeaseDurationSeconds)
		require.Len(t, lease.OwnerReferences, 1)
		assert.Equal(t, pod.UID, lease.OwnerReferences[0].UID, "owned by the Pod, so it goes with it")
		first := lease.Spec.RenewTime.Time
		require.NoError(t, h.Fresh())

		clk.Step(runtimepod.HeartbeatRenewInterval)
		require.NoError(t, h.Renew(ctx))
		lease, err = leases.Leases(ns).Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, lease.Spec.RenewTime.After(first), "renewTime moves forward")
		assert.Equal(t, int32(0), *lease.Spec.LeaseTransitions)

		clk.Step(runtimepod.HeartbeatLeaseDuration + time.Second)
		assert.Error(t, h.Fresh(), "stale after the lease duration without renewal")
	})

	t.Run("a new Pod of the same name takes the Lease over", func(t *testing.T) {
		// The taken-over Lease is read from the watch, not with a Get: its
		// owner reference names a Pod UID that does not exist, so the
		// garbage collector may delete it right after the write.
		name := runtimepod.LeaseName(pod.Name)
		before, err := leases.Leases(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		w, err := leases.Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: before.ResourceVersion})
		require.NoError(t, err)
		defer w.Stop()
		clk := testingclock.NewFakeClock(time.Now())
		h := runtimedheartbeat.New(leases, runtimepod.Pod{Name: pod.Name, Namespace: ns, UID: "a-newer-pod"}, clk)
		require.NoError(t, h.Renew(ctx))
		var lease *coordinationv1.Lease
		select {
		case e := <-w.ResultChan():
			require.Equal(t, watch.Modified, e.Type, "the write after the renew: %v", e.Object)
			lease = e.Object.(*coordinationv1.Lease)
		case <-ctx.Done():
			t.Fatal("no write of the Lease arrived")
		}
		assert.Equal(t, "a-newer-pod", *lease.Spec.HolderIdentity)
		assert.Equal(t, int32(1), *lease.Spec.LeaseTransitions)
		require.Len(t, lease.OwnerReferences, 1)
		assert.Equal(t, "a-newer-pod", string(lease.OwnerReferences[0].UID))
	})
}
