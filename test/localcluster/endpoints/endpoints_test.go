package endpoints

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func pod(name, ip string, ready bool, phase corev1.PodPhase) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "uid-" + "name"},
		Spec: corev1.PodSpec{NodeName: "local-node", Containers: []corev1.Container{{
			Name: "c", Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
		}}},
		Status: corev1.PodStatus{PodIP: ip, Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

func TestSlice(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "ns", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "https", Port: 443, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP},
			{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9091), Protocol: corev1.ProtocolTCP},
			{Name: "plain", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "unknown", Port: 81, TargetPort: intstr.FromString("nope"), Protocol: corev1.ProtocolTCP},
		}},
	}
	s := Slice(svc, []*corev1.Pod{
		pod("b", "127.60.0.2", false, corev1.PodRunning),
		pod("a", "127.60.0.1", true, corev1.PodRunning),
		pod("pending", "", false, corev1.PodPending),
		pod("done", "127.60.0.3", false, corev1.PodSucceeded),
	})
	assert.Equal(t, discoveryv1.AddressTypeFQDN, s.AddressType, "loopback IPv4 addresses are refused for type IPv4")
	assert.Equal(t, "api", s.Labels[discoveryv1.LabelServiceName])
	assert.Equal(t, ManagedBy, s.Labels[discoveryv1.LabelManagedBy])
	require.Len(t, s.OwnerReferences, 1)
	assert.Equal(t, svc.UID, s.OwnerReferences[0].UID)
	require.Len(t, s.Endpoints, 2, "only Pods with an IP that have not ended")
	assert.Equal(t, []string{"127.60.0.1"}, s.Endpoints[0].Addresses)
	assert.True(t, *s.Endpoints[0].Conditions.Ready)
	assert.Equal(t, []string{"127.60.0.2"}, s.Endpoints[1].Addresses)
	assert.False(t, *s.Endpoints[1].Conditions.Ready)
	assert.Equal(t, []discoveryv1.EndpointPort{
		{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)},
		{Name: ptr.To("metrics"), Port: ptr.To[int32](9091), Protocol: ptr.To(corev1.ProtocolTCP)},
		{Name: ptr.To("plain"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)},
	}, s.Ports, "target ports resolved; a name no Pod declares left out")
}
