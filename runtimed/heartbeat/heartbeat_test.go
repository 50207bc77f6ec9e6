package heartbeat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/runtimepod"
)

func TestRenewCreatesThenRenewsTheLease(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pod := Pod{Name: "runtime-bash-abc", Namespace: "ns", UID: "pod-uid-1"}
	h := New(client.CoordinationV1(), pod, clk)

	require.Error(t, h.Fresh(), "not fresh before the first renewal")
	require.NoError(t, h.Renew(ctx))
	lease, err := client.CoordinationV1().Leases("ns").Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "pod-uid-1", *lease.Spec.HolderIdentity)
	assert.Equal(t, int32(runtimepod.HeartbeatLeaseDuration/time.Second), *lease.Spec.LeaseDurationSeconds)
	require.Len(t, lease.OwnerReferences, 1)
	assert.Equal(t, pod.UID, lease.OwnerReferences[0].UID, "owned by the Pod, so it goes with it")
	first := lease.Spec.RenewTime.Time
	require.NoError(t, h.Fresh())

	clk.Step(runtimepod.HeartbeatRenewInterval)
	require.NoError(t, h.Renew(ctx))
	lease, err = client.CoordinationV1().Leases("ns").Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, lease.Spec.RenewTime.After(first), "renewTime moves forward")
	assert.Equal(t, int32(0), *lease.Spec.LeaseTransitions)

	clk.Step(runtimepod.HeartbeatLeaseDuration + time.Second)
	assert.Error(t, h.Fresh(), "stale after the lease duration without renewal")
}

func TestRenewTakesOverALeaseOfAPreviousPodWithTheSameName(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset()
	clk := testingclock.NewFakeClock(time.Now())
	old := New(client.CoordinationV1(), Pod{Name: "p", Namespace: "ns", UID: "old"}, clk)
	require.NoError(t, old.Renew(ctx))
	h := New(client.CoordinationV1(), Pod{Name: "p", Namespace: "ns", UID: "new"}, clk)
	require.NoError(t, h.Renew(ctx))
	lease, err := client.CoordinationV1().Leases("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "new", *lease.Spec.HolderIdentity)
	assert.Equal(t, int32(1), *lease.Spec.LeaseTransitions)
	require.Len(t, lease.OwnerReferences, 1)
	assert.Equal(t, "new", string(lease.OwnerReferences[0].UID))
}
