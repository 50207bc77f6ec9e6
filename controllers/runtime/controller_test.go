package runtime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned/fake"
	"kruntimes.io/kruntimes/client/informers/externalversions"
)

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
	d := newDeployment(rt)
	assert.Equal(t, "runtime-bash", d.Name)
	assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, d.Labels)
	assert.Equal(t, map[string]string{lifecycle.LabelRuntime: "bash"}, d.Spec.Selector.MatchLabels)
	assert.Equal(t, "bash", d.Spec.Template.Labels[lifecycle.LabelRuntime])
	assert.Equal(t, "mine", d.Spec.Template.Labels["app"], "the user's labels stay")
	assert.Equal(t, int32(2), *d.Spec.Replicas)
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
	assert.Equal(t, runtimepod.ContainerRuntimed, runtimed.Name)
	assert.Equal(t, "kruntimes.io/runtimed:dev", runtimed.Image)
	assert.Equal(t, []string{"--runtime-socket=unix:///run/kruntimes/runtime.sock", "--workspace-dir=/workspace", "--capacity=4"}, runtimed.Args)
	env := map[string]string{}
	for _, e := range runtimed.Env {
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	assert.Equal(t, map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid", "POD_IP": "status.podIP"}, env)
	assert.Equal(t, "/readyz", runtimed.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, int32(runtimepod.RuntimedHealthPort), runtimed.ReadinessProbe.HTTPGet.Port.IntVal)
	assert.Equal(t, "/healthz", runtimed.LivenessProbe.HTTPGet.Path)
	assert.ElementsMatch(t, []corev1.VolumeMount{
		{Name: runtimepod.VolumeWorkspace, MountPath: runtimepod.WorkspacePath},
		{Name: runtimepod.VolumeSocket, MountPath: runtimepod.SocketDir},
	}, runtimed.VolumeMounts)
	require.Len(t, spec.Volumes, 2)
	for _, v := range spec.Volumes {
		assert.NotNil(t, v.EmptyDir, v.Name)
	}
	assert.Empty(t, rt.Spec.Template.Spec.Volumes, "the Runtime's template is not modified")
}

func TestTemplateHashFollowsTheRuntime(t *testing.T) {
	rt := bashRuntime()
	before := newDeployment(rt).Annotations[lifecycle.AnnotationTemplateHash]
	assert.Equal(t, before, newDeployment(bashRuntime()).Annotations[lifecycle.AnnotationTemplateHash], "stable")
	rt.Spec.Capacity.Runs = 5
	assert.NotEqual(t, before, newDeployment(rt).Annotations[lifecycle.AnnotationTemplateHash], "capacity is in runtimed's args")
	rt = bashRuntime()
	rt.Spec.Replicas = ptr.To[int32](7)
	assert.Equal(t, before, newDeployment(rt).Annotations[lifecycle.AnnotationTemplateHash], "replicas are compared on their own")
}

type fixture struct {
	ctx         context.Context
	c           *Controller
	kube        *kubefake.Clientset
	client      *fake.Clientset
	runtimes    cache.Indexer
	deployments cache.Indexer
}

func newFixture(t *testing.T, rt *v1alpha1.Runtime) *fixture {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(rt)
	kube := kubefake.NewClientset()
	factory := externalversions.NewSharedInformerFactory(client, 0)
	kubeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	rtInformer := factory.Kruntimes().V1alpha1().Runtimes()
	c, err := New(ctx, rtInformer, kubeFactory.Apps().V1().Deployments(), kubeFactory.Core().V1().ServiceAccounts(),
		kubeFactory.Rbac().V1().Roles(), kubeFactory.Rbac().V1().RoleBindings(), kube, client, record.NewFakeRecorder(100))
	require.NoError(t, err)
	t.Cleanup(c.queue.ShutDown)
	require.NoError(t, rtInformer.Informer().GetIndexer().Add(rt))
	// Mirror what the fake API creates into the informers, as a watch would.
	for resource, informer := range map[string]cache.SharedIndexInformer{
		"deployments":     kubeFactory.Apps().V1().Deployments().Informer(),
		"serviceaccounts": kubeFactory.Core().V1().ServiceAccounts().Informer(),
		"roles":           kubeFactory.Rbac().V1().Roles().Informer(),
		"rolebindings":    kubeFactory.Rbac().V1().RoleBindings().Informer(),
	} {
		indexer := informer.GetIndexer()
		kube.PrependReactor("*", resource, func(a clienttesting.Action) (bool, k8sruntime.Object, error) {
			switch a := a.(type) {
			case clienttesting.CreateAction:
				_ = indexer.Add(a.GetObject())
			case clienttesting.UpdateAction:
				_ = indexer.Update(a.GetObject())
			}
			return false, nil, nil
		})
	}
	return &fixture{ctx: ctx, c: c, kube: kube, client: client,
		runtimes: rtInformer.Informer().GetIndexer(), deployments: kubeFactory.Apps().V1().Deployments().Informer().GetIndexer()}
}

func writes(actions []clienttesting.Action) []string {
	var out []string
	for _, a := range actions {
		if a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "delete" {
			s := a.GetVerb() + " " + a.GetResource().Resource
			if a.GetSubresource() != "" {
				s += "/" + a.GetSubresource()
			}
			out = append(out, s)
		}
	}
	return out
}

func TestSyncCreatesPoolThenWritesNothingMore(t *testing.T) {
	rt := bashRuntime()
	f := newFixture(t, rt)
	require.NoError(t, f.c.sync(f.ctx, "ns/bash"))
	assert.Equal(t, []string{"create serviceaccounts", "create roles", "create rolebindings", "create deployments"}, writes(f.kube.Actions()))
	assert.Equal(t, []string{"update runtimes/status"}, writes(f.client.Actions()))

	role, err := f.kube.RbacV1().Roles("ns").Get(f.ctx, "runtime-bash", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, RuntimedPolicyRules(), role.Rules)
	binding, err := f.kube.RbacV1().RoleBindings("ns").Get(f.ctx, "runtime-bash", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: "runtime-bash", Namespace: "ns"}, binding.Subjects[0])

	status := f.client.Actions()[len(f.client.Actions())-1].(clienttesting.UpdateAction).GetObject().(*v1alpha1.Runtime)
	assert.Equal(t, "7", status.ResourceVersion, "status is written with the Runtime's resourceVersion")
	assert.Equal(t, int64(3), status.Status.ObservedGeneration)
	ready := apimeta.FindStatusCondition(status.Status.Conditions, lifecycle.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, "0 of 2 Runtime Pods are ready", ready.Message)

	// The Deployment reports both Pods ready.
	obj, exists, err := f.deployments.GetByKey("ns/runtime-bash")
	require.NoError(t, err)
	require.True(t, exists)
	d := obj.(*appsv1.Deployment).DeepCopy()
	d.Status = appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2}
	require.NoError(t, f.deployments.Update(d))
	require.NoError(t, f.runtimes.Update(status))
	f.kube.ClearActions()
	f.client.ClearActions()
	require.NoError(t, f.c.sync(f.ctx, "ns/bash"))
	assert.Empty(t, writes(f.kube.Actions()), "the pool is as it should be")
	require.Equal(t, []string{"update runtimes/status"}, writes(f.client.Actions()))
	status = f.client.Actions()[len(f.client.Actions())-1].(clienttesting.UpdateAction).GetObject().(*v1alpha1.Runtime)
	assert.Equal(t, int32(2), status.Status.ReadyReplicas)
	assert.True(t, apimeta.IsStatusConditionTrue(status.Status.Conditions, lifecycle.ConditionReady))

	require.NoError(t, f.runtimes.Update(status))
	f.client.ClearActions()
	require.NoError(t, f.c.sync(f.ctx, "ns/bash"))
	assert.Empty(t, writes(f.client.Actions()), "an unchanged status is not written")

	// Scaling the Runtime updates the Deployment.
	scaled := status.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](3)
	require.NoError(t, f.runtimes.Update(scaled))
	require.NoError(t, f.c.sync(f.ctx, "ns/bash"))
	assert.Equal(t, []string{"update deployments"}, writes(f.kube.Actions()))
}

func TestForeignDeploymentIsReportedNotTaken(t *testing.T) {
	rt := bashRuntime()
	f := newFixture(t, rt)
	require.NoError(t, f.deployments.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "runtime-bash", Namespace: "ns"}}))
	err := f.c.sync(f.ctx, "ns/bash")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete or rename it")
	assert.NotContains(t, writes(f.kube.Actions()), "update deployments")
	status := f.client.Actions()[len(f.client.Actions())-1].(clienttesting.UpdateAction).GetObject().(*v1alpha1.Runtime)
	ready := apimeta.FindStatusCondition(status.Status.Conditions, lifecycle.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, lifecycle.ReasonResourceConflict, ready.Reason)
}
