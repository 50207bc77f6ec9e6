package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// runtimeUID is the UID the tests give the Runtime of name.
func runtimeUID(name string) types.UID { return types.UID("rt-" + name) }

// ownerChain returns the Deployment the runtime controller makes for the
// Runtime of name (with UID runtimeUID(name)) and a ReplicaSet of it, and
// makes pod a Pod of that ReplicaSet.
func ownerChain(pod *corev1.Pod, runtime string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	rt := &v1alpha1.Runtime{ObjectMeta: metav1.ObjectMeta{Name: runtime, Namespace: pod.Namespace, UID: runtimeUID(runtime)}}
	labels := map[string]string{lifecycle.LabelRuntime: runtime}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Name: runtimepod.DeploymentName(runtime), Namespace: pod.Namespace, UID: types.UID("deploy-" + runtime), Labels: labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rt, v1alpha1.SchemeGroupVersion.WithKind("Runtime"))},
	}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: d.Name + "-5d8f", Namespace: pod.Namespace, UID: types.UID("rs-" + runtime), Labels: labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
	}}
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
	return d, rs
}

func TestOwnershipCheck(t *testing.T) {
	rt := &v1alpha1.Runtime{ObjectMeta: metav1.ObjectMeta{Name: "bash", Namespace: "ns", UID: runtimeUID("bash")}}
	cases := []struct {
		name string
		// mutate changes the good chain.
		mutate func(pod *corev1.Pod, rs *appsv1.ReplicaSet, d *appsv1.Deployment)
		// other adds a second Deployment and ReplicaSet, of Runtime "other".
		other   bool
		wantErr string
	}{
		{name: "good chain"},
		{name: "no controllerRef", wantErr: "Pod a: no controller",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) { pod.OwnerReferences = nil }},
		{name: "owner but not controller", wantErr: "Pod a: no controller",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.OwnerReferences[0].Controller = nil
			}},
		{name: "Pod controlled by a wrong kind", wantErr: "controlled by StatefulSet",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.OwnerReferences[0].Kind = "StatefulSet"
			}},
		{name: "ReplicaSet kind of another group", wantErr: "want a ReplicaSet of apps",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.OwnerReferences[0].APIVersion = "example.com/v1"
			}},
		{name: "ReplicaSet not in the cache", wantErr: "not found",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.OwnerReferences[0].Name = "runtime-bash-gone"
			}},
		{name: "Pod's ReplicaSet UID mismatch", wantErr: "the one of that name now rs-bash",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.OwnerReferences[0].UID = "rs-earlier"
			}},
		{name: "ReplicaSet without controller", wantErr: "ReplicaSet runtime-bash-5d8f: no controller",
			mutate: func(_ *corev1.Pod, rs *appsv1.ReplicaSet, _ *appsv1.Deployment) { rs.OwnerReferences = nil }},
		{name: "RS of another Deployment", other: true, wantErr: "controlled by Deployment runtime-other, want runtime-bash",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.OwnerReferences[0].Name, pod.OwnerReferences[0].UID = "runtime-other-5d8f", "rs-other"
			}},
		{name: "ReplicaSet's Deployment UID mismatch", wantErr: "Deployment runtime-bash has uid deploy-earlier",
			mutate: func(_ *corev1.Pod, rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				rs.OwnerReferences[0].UID = "deploy-earlier"
			}},
		{name: "Deployment not the runtime controller's", wantErr: "Deployment runtime-bash: no controller",
			mutate: func(_ *corev1.Pod, _ *appsv1.ReplicaSet, d *appsv1.Deployment) { d.OwnerReferences = nil }},
		{name: "Deployment controlled by a wrong kind", wantErr: "want a Runtime of kruntimes.io",
			mutate: func(_ *corev1.Pod, _ *appsv1.ReplicaSet, d *appsv1.Deployment) {
				d.OwnerReferences[0].APIVersion, d.OwnerReferences[0].Kind = "apps/v1", "DaemonSet"
			}},
		{name: "Deployment of an earlier Runtime of that name", wantErr: "Runtime bash has uid rt-earlier",
			mutate: func(_ *corev1.Pod, _ *appsv1.ReplicaSet, d *appsv1.Deployment) {
				d.OwnerReferences[0].UID = "rt-earlier"
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := readyPod("a")
			d, rs := ownerChain(pod, "bash")
			if tc.mutate != nil {
				tc.mutate(pod, rs, d)
			}
			rsIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			dIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			require.NoError(t, rsIndexer.Add(rs))
			require.NoError(t, dIndexer.Add(d))
			if tc.other {
				od, ors := ownerChain(readyPod("b"), "other")
				require.NoError(t, rsIndexer.Add(ors))
				require.NoError(t, dIndexer.Add(od))
			}
			o := ownership{replicaSets: appslisters.NewReplicaSetLister(rsIndexer), deployments: appslisters.NewDeploymentLister(dIndexer)}
			err := o.check(pod, rt)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}
