package scheduler

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
// Runtime of name (with UID runtimeUID(name)) and a ReplicaSet of it whose
// template is pod's spec, and makes pod a Pod of that ReplicaSet.
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
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "5d8f"
	rs.Spec.Template.Labels = maps.Clone(pod.Labels)
	rs.Spec.Template.Spec = *pod.Spec.DeepCopy()
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
		{name: "a Pod naming the ReplicaSet with another runtime image", wantErr: "Pod a: runs container runtime (image example.com/thief), not as its ReplicaSet runtime-bash-5d8f's template",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Containers[0].Image = "example.com/thief"
			}},
		{name: "a Pod naming the ReplicaSet with another command", wantErr: "runs container runtime",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Containers[0].Args = []string{"--language", "python", "--leak"}
			}},
		{name: "a Pod naming the ReplicaSet with a mount over the runtime's binary", wantErr: "runs container runtime",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
				pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "bin", MountPath: "/usr/local/bin"})
			}},
		{name: "a Pod naming the ReplicaSet with a writable mount at the token path", wantErr: "runs container runtime",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: serviceAccountTokenPath})
			}},
		{name: "a Pod naming the ReplicaSet with another env", wantErr: "runs container runtimed",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Containers[1].Env = append(pod.Spec.Containers[1].Env, corev1.EnvVar{Name: "GODEBUG", Value: "x"})
			}},
		{name: "a Pod naming the ReplicaSet with another ServiceAccount", wantErr: `runs as ServiceAccount "default", its ReplicaSet runtime-bash-5d8f's Pods as "runtime-bash"`,
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.ServiceAccountName = "default"
			}},
		{name: "a Pod naming the ReplicaSet with an extra container", wantErr: "has 3 containers where 2 were made",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "reader", Image: "busybox"})
			}},
		{name: "a Pod naming the ReplicaSet with an init container", wantErr: "has 1 init containers where 0 were made",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.InitContainers = []corev1.Container{{Name: "copy", Image: "busybox"}}
			}},
		{name: "a Pod naming the ReplicaSet with another volume source", wantErr: "spec differs from its ReplicaSet runtime-bash-5d8f's template",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
			}},
		{name: "a Pod of another template hash", wantErr: `label pod-template-hash="6c9a", its ReplicaSet runtime-bash-5d8f creates "5d8f"`,
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "6c9a"
			}},
		{name: "a debugged Pod (ephemeral container)", wantErr: "has ephemeral container debugger",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}}}
			}},
		{name: "a template naming no ServiceAccount makes Pods of the default one",
			mutate: func(pod *corev1.Pod, rs *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				rs.Spec.Template.Spec.ServiceAccountName, pod.Spec.ServiceAccountName = "", "default"
			}},
		{name: "an in-place resize keeps the Pod a candidate",
			mutate: func(pod *corev1.Pod, _ *appsv1.ReplicaSet, _ *appsv1.Deployment) {
				pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
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
			pod := runtimePod("a")
			d, rs := ownerChain(pod, "bash")
			admit(pod)
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

// runtimePod returns a Ready Pod with the spec the runtime controller gives
// a Runtime's Pods, in outline: the runtime and runtimed containers, the
// shared volumes and the Runtime's ServiceAccount.
func runtimePod(name string) *corev1.Pod {
	pod := readyPod(name)
	pod.Spec = corev1.PodSpec{
		ServiceAccountName: "runtime-bash",
		Containers: []corev1.Container{
			{Name: "runtime", Image: "kruntimes.io/kruntimes-runtime:v1", Args: []string{"--language", "python"},
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}}},
			{Name: "runtimed", Image: "kruntimes.io/runtimed:v1",
				VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}}},
		},
		Volumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
	return pod
}

// admit adds to pod what kube-apiserver's admission and defaulting add to
// a Pod its template does not hold: a token volume and its mount (where the
// template does not turn automounting off), the default tolerations, a
// limit from a LimitRange, the node.
func admit(pod *corev1.Pod) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x1",
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
	pod.Spec.Containers[1].VolumeMounts = append(pod.Spec.Containers[1].VolumeMounts,
		corev1.VolumeMount{Name: "kube-api-access-x1", MountPath: serviceAccountTokenPath, ReadOnly: true})
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}
	pod.Spec.Containers[1].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
	pod.Spec.NodeName = "node-1"
}
