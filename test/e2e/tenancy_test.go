package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/test/e2e/framework"
)

// Creating a Runtime is creating Pods from its template: a user who holds
// kruntimes-edit but may not create Pods gets 403 from kubectl create (and
// from a change of the spec), one who may create Pods gets the Runtime.
func TestRuntimeCreateNeedsPodCreatePermission(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "runtime-pods")
	ctx := framework.Context(t, 2*time.Minute)

	bind := func(name, kind, role, user string) {
		_, err := f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := f.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	bind("kruntimes-edit-alice", "ClusterRole", "kruntimes-edit", "alice")
	bind("kruntimes-edit-carol", "ClusterRole", "kruntimes-edit", "carol")
	bind("pod-creator-carol", "Role", "pod-creator", "carol")

	// Poll: RBAC reaches kube-apiserver's authorizer through an informer
	// and ours through a SubjectAccessReview cache.
	var out string
	err = framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		out, err = f.KubectlWithInput(ctx, runtimeManifest, "create", "--as=alice", "-n", ns, "-f", "-")
		if err == nil {
			return false, fmt.Errorf("alice, who may not create pods, created a Runtime: %s", out)
		}
		seen.Err(err)
		return strings.Contains(err.Error(), "Error from server (Forbidden)") &&
			strings.Contains(err.Error(), `requires permission to create pods in namespace "`+ns+`", which user "alice" does not have`), nil
	})
	require.NoError(t, err, "alice's create is refused with 403 by RuntimePodPermission")
	_, err = f.Client.RbacV1().RoleBindings(ns).Get(ctx, "kruntimes-edit-alice", metav1.GetOptions{})
	require.NoError(t, err)

	err = framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		out, err = f.KubectlWithInput(ctx, runtimeManifest, "create", "--as=carol", "-n", ns, "-f", "-")
		return !seen.Err(err), nil
	})
	require.NoError(t, err, "carol, who may create pods, creates the Runtime")
	assert.Contains(t, out, "runtime.kruntimes.io/bash created")

	// Changing the spec needs the same permission: alice may not turn
	// carol's Runtime into more or other Pods.
	_, err = f.Kubectl(ctx, "patch", "--as=alice", "-n", ns, "runtime", "bash", "--type=merge", "-p", `{"spec":{"replicas":3}}`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Error from server (Forbidden)")
	assert.Contains(t, err.Error(), `which user "alice" does not have`)
	// Metadata makes no Pods (and the garbage collector, which may not
	// create Pods, removes finalizers and owner references).
	_, err = f.Kubectl(ctx, "label", "--as=alice", "-n", ns, "runtime", "bash", "team=alice")
	require.NoError(t, err)
}

// The standard ResourceQuota object count limits Runs: kruntimes-apiserver
// charges each create to the quota (admission) and kube-controller-manager's
// quota controller recounts the usage through discovery, so a deleted Run
// frees its place.
func TestResourceQuotaLimitsRuns(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "quota")
	ctx := framework.Context(t, 4*time.Minute)

	const countRuns = corev1.ResourceName("count/runs.kruntimes.io")
	quotas := f.Client.CoreV1().ResourceQuotas(ns)
	runsQuota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "runs"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{countRuns: resource.MustParse("2")}},
	}
	// Admission refuses every create until the quota controller has
	// counted once ("status unknown for quota"). It counts a quota when the
	// quota is created and every 5 minutes after, and it learns of
	// kruntimes.io through discovery every 30 s: a quota created before
	// that (a test run first on a new cluster) is re-created until counted.
	var created time.Time
	err := framework.Poll(ctx, framework.PollInterval, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		q, err := quotas.Get(ctx, runsQuota.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = quotas.Create(ctx, runsQuota, metav1.CreateOptions{})
			created = time.Now()
			seen.Err(err)
			return false, nil
		}
		if seen.Err(err) {
			return false, nil
		}
		used, ok := q.Status.Used[countRuns]
		seen.State("used %s (present: %v)", used.String(), ok)
		if !ok && time.Since(created) > 10*time.Second {
			seen.Err(quotas.Delete(ctx, runsQuota.Name, metav1.DeleteOptions{}))
		}
		return ok && used.Value() == 0, nil
	})
	require.NoError(t, err, "kube-controller-manager counts Runs for the quota")

	for _, name := range []string{"first", "second"} {
		_, err := f.KubectlWithInput(ctx, runManifest(name), "create", "-n", ns, "-f", "-")
		require.NoError(t, err, name)
	}
	q, err := quotas.Get(ctx, runsQuota.Name, metav1.GetOptions{})
	require.NoError(t, err)
	used := q.Status.Used[countRuns]
	assert.Equal(t, int64(2), used.Value(), "admission charged both creates to the quota")

	_, err = f.KubectlWithInput(ctx, runManifest("third"), "create", "-n", ns, "-f", "-")
	require.Error(t, err, "the third Run exceeds the quota")
	assert.Contains(t, err.Error(), "Error from server (Forbidden)")
	assert.Contains(t, err.Error(), "exceeded quota: runs, requested: count/runs.kruntimes.io=1, used: count/runs.kruntimes.io=2, limited: count/runs.kruntimes.io=2")

	// Admission only adds; the quota controller's recount gives the place
	// of a deleted Run back.
	_, err = f.Kubectl(ctx, "delete", "run", "first", "-n", ns, "--wait=true", "--timeout=60s")
	require.NoError(t, err)
	err = framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		q, err := quotas.Get(ctx, runsQuota.Name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		used := q.Status.Used[countRuns]
		seen.State("used %s", used.String())
		return used.Value() == 1, nil
	})
	require.NoError(t, err, "kube-controller-manager recounts after the delete")
	_, err = f.KubectlWithInput(ctx, runManifest("third"), "create", "-n", ns, "-f", "-")
	require.NoError(t, err, "a deleted Run's place is free again")
}
