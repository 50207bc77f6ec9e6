package runtime

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// The controller itself is tested against real servers in test/e2e
// (TestRuntimeController*); these are the pure functions it builds from.

func bashRuntime() *v1alpha1.Runtime {
	return &v1alpha1.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: "bash", Namespace: "ns", UID: "runtime-uid", Generation: 3, ResourceVersion: "7"},
		Spec: v1alpha1.RuntimeSpec{
			Replicas:      ptr.To[int32](2),
			Capacity:      v1alpha1.RuntimeCapacity{Runs: 4},
			RuntimedImage: "kruntimes.io/runtimed:dev",
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "mine"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: runtimepod.ContainerRuntime, Image: "kruntimes.io/kruntimes-runtime:dev",
					VolumeMounts: []corev1.VolumeMount{{Name: runtimepod.VolumeWorkspace, MountPath: "/custom"}},
				}}},
			},
		},
	}
}

func TestDeploymentShape(t *testing.T) {
	rt := bashRuntime()
	d := newDeployment(rt, podOptions{})
	assert.Equal(t, "runtime-bash", d.Name)
	assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, d.Labels)
	assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, d.Spec.Selector.MatchLabels)
	assert.Equal(t, "bash", d.Spec.Template.Labels[lifecycle.LabelRuntime])
	assert.Equal(t, "mine", d.Spec.Template.Labels["app"], "the user's labels stay")
	assert.Equal(t, int32(2), *d.Spec.Replicas)
	require.NotNil(t, d.Spec.Strategy.RollingUpdate, "a rolling update")
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
	assert.Equal(t, intstr.FromInt32(0), *d.Spec.Strategy.RollingUpdate.MaxUnavailable, "a rollout keeps the capacity: no Pod goes before its replacement is Ready")
	assert.Equal(t, intstr.FromInt32(1), *d.Spec.Strategy.RollingUpdate.MaxSurge)
	assert.Equal(t, "runtime-bash", d.Spec.Template.Spec.ServiceAccountName)
	require.Len(t, d.OwnerReferences, 1)
	assert.Equal(t, rt.UID, d.OwnerReferences[0].UID)
	assert.True(t, *d.OwnerReferences[0].Controller)

	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 2)
	runtimeC, runtimed := spec.Containers[0], spec.Containers[1]
	assert.Equal(t, []corev1.VolumeMount{
		{Name: runtimepod.VolumeWorkspace, MountPath: "/custom"},
		{Name: runtimepod.VolumeSocket, MountPath: runtimepod.SocketDir},
	}, runtimeC.VolumeMounts, "a mount the user set is kept, a missing one added")
	assert.Equal(t, []corev1.EnvVar{{Name: runtimepod.EnvCapacity, Value: "4"}}, runtimeC.Env,
		"the Runtime Server knows the Pod's capacity (its spare workers follow it)")
	assert.Equal(t, runtimepod.ContainerRuntimed, runtimed.Name)
	assert.Equal(t, "kruntimes.io/runtimed:dev", runtimed.Image)
	assert.Equal(t, []string{"--runtime-socket=unix:///run/kruntimes/runtime.sock", "--workspace-dir=/workspace", "--capacity=4",
		"--shutdown-drain-timeout=5s", "--shutdown-timeout=15s"}, runtimed.Args, "the default grace of 30 s leaves the default shutdown bounds")
	env := map[string]string{}
	for _, e := range runtimed.Env {
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	assert.Equal(t, map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid", "POD_IP": "status.podIP",
		"RUNTIME_NAME": "metadata.labels['kruntimes.io/runtime']"}, env)
	assert.Equal(t, "/readyz", runtimed.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, int32(runtimepod.RuntimedHealthPort), runtimed.ReadinessProbe.HTTPGet.Port.IntVal)
	assert.Equal(t, "/healthz", runtimed.LivenessProbe.HTTPGet.Path)
	assert.ElementsMatch(t, []corev1.VolumeMount{
		{Name: runtimepod.VolumeWorkspace, MountPath: runtimepod.WorkspacePath},
		{Name: runtimepod.VolumeSocket, MountPath: runtimepod.SocketDir},
		{Name: runtimepod.VolumeRuntimedAPIAccess, MountPath: runtimepod.ServiceAccountDir, ReadOnly: true},
	}, runtimed.VolumeMounts)
	require.Len(t, spec.Volumes, 3)
	for _, v := range spec.Volumes[:2] {
		assert.NotNil(t, v.EmptyDir, v.Name)
	}
	assert.Empty(t, rt.Spec.Template.Spec.Volumes, "the Runtime's template is not modified")
}

// TestRuntimeContainerKeepsItsOwnCapacityVariable: a template that sets
// the variable itself keeps its value.
func TestRuntimeContainerKeepsItsOwnCapacityVariable(t *testing.T) {
	rt := bashRuntime()
	rt.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: runtimepod.EnvCapacity, Value: "1"}}
	d := newDeployment(rt, podOptions{})
	assert.Equal(t, []corev1.EnvVar{{Name: runtimepod.EnvCapacity, Value: "1"}}, d.Spec.Template.Spec.Containers[0].Env)
	assert.Equal(t, []corev1.EnvVar{{Name: runtimepod.EnvCapacity, Value: "1"}}, rt.Spec.Template.Spec.Containers[0].Env, "the Runtime is not changed")
}

func TestDeploymentWithInvokeTLSMountsTheSecretIntoRuntimedAlone(t *testing.T) {
	rt := bashRuntime()
	spec := newDeployment(rt, podOptions{invokeTLS: true}).Spec.Template.Spec
	runtimeC, runtimed := spec.Containers[0], spec.Containers[1]
	require.Len(t, spec.Volumes, 4)
	tls := spec.Volumes[2]
	require.NotNil(t, tls.Secret)
	assert.Equal(t, "runtime-bash-tls", tls.Secret.SecretName)
	assert.Contains(t, runtimed.VolumeMounts, corev1.VolumeMount{Name: runtimepod.VolumeRuntimedTLS, MountPath: runtimepod.RuntimedTLSDir, ReadOnly: true})
	for _, m := range runtimeC.VolumeMounts {
		assert.NotEqual(t, runtimepod.VolumeRuntimedTLS, m.Name, "user code never sees runtimed's key")
	}
	assert.Subset(t, runtimed.Args, []string{"--invoke-tls-cert-file=/etc/kruntimes/runtimed-tls/tls.crt",
		"--invoke-tls-key-file=/etc/kruntimes/runtimed-tls/tls.key", "--invoke-client-ca-file=/etc/kruntimes/runtimed-tls/ca.crt"})
	assert.NotEqual(t, newDeployment(rt, podOptions{}).Annotations[lifecycle.AnnotationTemplateHash], newDeployment(rt, podOptions{invokeTLS: true}).Annotations[lifecycle.AnnotationTemplateHash])
}

func TestDeploymentWithKruntimesAPIPointsRuntimedAtIt(t *testing.T) {
	rt := bashRuntime()
	api := &KruntimesAPI{Server: "https://kruntimes-apiserver.kruntimes-system.svc", CA: []byte("-----BEGIN CERTIFICATE-----\n")}
	spec := newDeployment(rt, podOptions{invokeTLS: true, kruntimesAPI: api}).Spec.Template.Spec
	runtimeC, runtimed := spec.Containers[0], spec.Containers[1]
	assert.Contains(t, runtimed.Args, "--kruntimes-api-server=https://kruntimes-apiserver.kruntimes-system.svc")
	assert.Contains(t, runtimed.Env, corev1.EnvVar{Name: runtimepod.EnvKruntimesAPICA, Value: "-----BEGIN CERTIFICATE-----\n"})
	for _, e := range runtimeC.Env {
		assert.NotEqual(t, runtimepod.EnvKruntimesAPICA, e.Name, "runtimed's alone")
	}
	without := newDeployment(rt, podOptions{invokeTLS: true})
	assert.NotContains(t, without.Spec.Template.Spec.Containers[1].Args, "--kruntimes-api-server=https://kruntimes-apiserver.kruntimes-system.svc")
	other := *api
	other.CA = []byte("another CA")
	assert.NotEqual(t, newDeployment(rt, podOptions{invokeTLS: true, kruntimesAPI: api}).Annotations[lifecycle.AnnotationTemplateHash],
		newDeployment(rt, podOptions{invokeTLS: true, kruntimesAPI: &other}).Annotations[lifecycle.AnnotationTemplateHash], "a new CA rolls the Pods")
	assert.NotEqual(t, newDeployment(rt, podOptions{invokeTLS: true, kruntimesAPI: api}).Annotations[lifecycle.AnnotationTemplateHash],
		without.Annotations[lifecycle.AnnotationTemplateHash])
}

func TestPodTemplateMountsTheTokenIntoRuntimedAlone(t *testing.T) {
	rt := bashRuntime()
	rt.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(true)
	rt.Spec.Template.Spec.Containers = append(rt.Spec.Template.Spec.Containers, corev1.Container{Name: "helper", Image: "helper"})
	spec := newDeployment(rt, podOptions{invokeTLS: true}).Spec.Template.Spec

	require.NotNil(t, spec.AutomountServiceAccountToken)
	assert.False(t, *spec.AutomountServiceAccountToken, "no container gets the ServiceAccount admission plugin's token, whatever the template says")
	var token *corev1.ServiceAccountTokenProjection
	for _, v := range spec.Volumes {
		if v.Name == runtimepod.VolumeRuntimedAPIAccess {
			require.NotNil(t, v.Projected)
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					token = src.ServiceAccountToken
				}
			}
		}
	}
	require.NotNil(t, token, "runtimed gets a projected, Pod-bound token")
	assert.Equal(t, "token", token.Path)
	assert.Empty(t, token.Audience, "the token is for kube-apiserver")
	for _, c := range spec.Containers {
		mounted := false
		for _, m := range c.VolumeMounts {
			if m.Name == runtimepod.VolumeRuntimedAPIAccess {
				mounted = true
				assert.Equal(t, runtimepod.ServiceAccountDir, m.MountPath)
				assert.True(t, m.ReadOnly)
			}
		}
		assert.Equal(t, c.Name == runtimepod.ContainerRuntimed, mounted, "container %s", c.Name)
	}
}

// TestStrategyDriftIsUpdated: a Deployment whose rollout strategy was
// changed behind the controller's back is set back.
func TestStrategyDriftIsUpdated(t *testing.T) {
	want := newDeployment(bashRuntime(), podOptions{})
	existing := want.DeepCopy()
	assert.False(t, deploymentNeedsUpdate(existing, want))
	existing.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("25%"))
	assert.True(t, deploymentNeedsUpdate(existing, want))
}

func TestTemplateHashFollowsTheRuntime(t *testing.T) {
	rt := bashRuntime()
	before := newDeployment(rt, podOptions{}).Annotations[lifecycle.AnnotationTemplateHash]
	assert.Equal(t, before, newDeployment(bashRuntime(), podOptions{}).Annotations[lifecycle.AnnotationTemplateHash], "stable")
	rt.Spec.Capacity.Runs = 5
	assert.NotEqual(t, before, newDeployment(rt, podOptions{}).Annotations[lifecycle.AnnotationTemplateHash], "capacity is in runtimed's args")
	rt = bashRuntime()
	rt.Spec.Replicas = ptr.To[int32](7)
	assert.Equal(t, before, newDeployment(rt, podOptions{}).Annotations[lifecycle.AnnotationTemplateHash], "replicas are compared on their own")
}

func TestRuntimedSidecarIsUnprivilegedAndBounded(t *testing.T) {
	runtimed := newDeployment(bashRuntime(), podOptions{}).Spec.Template.Spec.Containers[1]
	require.Equal(t, runtimepod.ContainerRuntimed, runtimed.Name)
	sc := runtimed.SecurityContext
	require.NotNil(t, sc)
	assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation)
	assert.Equal(t, ptr.To(true), sc.ReadOnlyRootFilesystem)
	assert.Equal(t, &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, sc.Capabilities)
	assert.Equal(t, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, sc.SeccompProfile)
	assert.Nil(t, sc.RunAsUser, "runtimed runs as the Pod's user, to clean up what the Runtime Server leaves in the workspace")
	assert.Nil(t, sc.RunAsNonRoot)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		assert.Contains(t, runtimed.Resources.Requests, r)
	}
	assert.Contains(t, runtimed.Resources.Limits, corev1.ResourceMemory)
}

func TestRuntimedRunsAsTheRuntimeContainersUser(t *testing.T) {
	rt := bashRuntime()
	rt.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000), RunAsNonRoot: ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(true),
	}
	containers := newDeployment(rt, podOptions{}).Spec.Template.Spec.Containers
	require.Len(t, containers, 2)
	sc := containers[1].SecurityContext
	require.Equal(t, runtimepod.ContainerRuntimed, containers[1].Name)
	assert.Equal(t, ptr.To[int64](1000), sc.RunAsUser)
	assert.Equal(t, ptr.To[int64](3000), sc.RunAsGroup)
	assert.Equal(t, ptr.To(true), sc.RunAsNonRoot)
	assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation, "only the user is taken from the runtime container, not its privileges")
}

// TestPodDisruptionBudgetTakesOnePodAtATime: a drain or eviction may take
// one Pod of the Runtime at a time, selected by the pool label.
func TestPodDisruptionBudgetTakesOnePodAtATime(t *testing.T) {
	rt := bashRuntime()
	pdb := newPodDisruptionBudget(rt)
	assert.Equal(t, "runtime-bash", pdb.Name)
	assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, pdb.Labels)
	require.Len(t, pdb.OwnerReferences, 1)
	assert.Equal(t, rt.UID, pdb.OwnerReferences[0].UID)
	assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
	assert.Nil(t, pdb.Spec.MinAvailable)
	assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, pdb.Spec.Selector.MatchLabels)
}
