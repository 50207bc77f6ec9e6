package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/controllers/manager"
)

// TestInformersHoldNoManagedFields pins that the controllers' informers keep
// no managedFields, and no Run code or env, in memory (at 100k Runs they were ~140 MB of the API
// server's heap when the controllers are hosted there), while the server
// still stores and serves them. Runs and Runtimes come from a real API
// server; the cluster's kinds from client-go's fake clientset, which holds
// objects as written, managedFields included.
func TestInformersHoldNoManagedFields(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testserver.Start(t, "")
	const ns = "default"
	_, err := s.Client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, &v1alpha1.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: "bash", Namespace: ns},
		Spec: v1alpha1.RuntimeSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "runtime", Image: "kruntimes-runtime"}},
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	run, err := s.Client.KruntimesV1alpha1().Runs(ns).Create(ctx, &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "task", Namespace: ns},
		Spec: v1alpha1.RunSpec{
			Runtime: "bash",
			Source:  v1alpha1.RunSource{Inline: "echo hello"},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
			Env:     []v1alpha1.EnvVar{{Name: "GREETING", Value: "hi"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, run.ManagedFields, "the server tracks managedFields on create")

	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"}}
	labels := map[string]string{lifecycle.LabelRuntime: "bash"}
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runtime-bash-0", Namespace: ns, Labels: labels, ManagedFields: managed}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "runtime-bash", Namespace: ns, Labels: labels, ManagedFields: managed}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "runtime-bash-0", Namespace: ns, ManagedFields: managed}},
	)

	kruntimesInformers, labelled, leases := manager.NewInformerFactories(kube, s.Client)
	informers := map[string]cache.SharedIndexInformer{
		"runs":        kruntimesInformers.Kruntimes().V1alpha1().Runs().Informer(),
		"runtimes":    kruntimesInformers.Kruntimes().V1alpha1().Runtimes().Informer(),
		"pods":        labelled.Core().V1().Pods().Informer(),
		"deployments": labelled.Apps().V1().Deployments().Informer(),
		"leases":      leases.Coordination().V1().Leases().Informer(),
	}
	kruntimesInformers.Start(ctx.Done())
	labelled.Start(ctx.Done())
	leases.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		kruntimesInformers.Shutdown()
		labelled.Shutdown()
		leases.Shutdown()
	})
	for name, informer := range informers {
		require.True(t, cache.WaitForCacheSync(ctx.Done(), informer.HasSynced), "%s informer synced", name)
	}

	// The controllers' copy of the Run has no code or env; a status write
	// from it, as the scheduler and recovery make, keeps the stored spec.
	obj, ok, err := informers["runs"].GetStore().GetByKey(ns + "/task")
	require.NoError(t, err)
	require.True(t, ok)
	cached := obj.(*v1alpha1.Run).DeepCopy()
	assert.Empty(t, cached.Spec.Source.Inline, "the informer holds the Run's source")
	assert.Empty(t, cached.Spec.Env, "the informer holds the Run's env")
	assert.Equal(t, "bash", cached.Spec.Runtime, "the informer keeps what the controllers read")
	cached.Status.Phase = lifecycle.Failed
	cached.Status.Message = "no such Runtime"
	_, err = s.Client.KruntimesV1alpha1().Runs(ns).UpdateStatus(ctx, cached, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		obj, ok, _ := informers["runs"].GetStore().GetByKey(ns + "/task")
		return ok && obj.(*v1alpha1.Run).Status.Phase == lifecycle.Failed
	}, 30*time.Second, 10*time.Millisecond, "the informer sees the status write")

	for name, informer := range informers {
		objs := informer.GetStore().List()
		assert.NotEmpty(t, objs, "%s informer holds the object", name)
		for _, obj := range objs {
			accessor, err := meta.Accessor(obj)
			require.NoError(t, err)
			assert.Empty(t, accessor.GetManagedFields(), "%s informer holds managedFields of %s", name, accessor.GetName())
		}
	}

	stored, err := s.Client.KruntimesV1alpha1().Runs(ns).Get(ctx, "task", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Len(t, stored.ManagedFields, 2, "the server still serves managedFields of the create and the status write")
	assert.Equal(t, "echo hello", stored.Spec.Source.Inline, "a status write from the slim copy keeps the stored source")
	assert.Equal(t, run.Spec.Env, stored.Spec.Env, "a status write from the slim copy keeps the stored env")
}
