package chartmode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
)

const (
	controllersName        = "kruntimes-controllers"
	controllersPodSelector = "app.kubernetes.io/name=kruntimes-controllers"
)

// assertControllersApart: with the chart's defaults the controllers run as
// the Deployment kruntimes-controllers under their own ServiceAccount, and
// kube-apiserver's RBAC gives kruntimes-apiserver's ServiceAccount none of
// their rights, only what serving needs, in any namespace (ns among them).
func assertControllersApart(ctx context.Context, t *testing.T, f *framework.Framework, ns string) {
	t.Helper()
	var pod *corev1.Pod
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, 3*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(localcluster.KruntimesNamespace).List(ctx, metav1.ListOptions{LabelSelector: controllersPodSelector})
		if seen.Err(err) {
			return false, nil
		}
		var states []string
		pod = nil
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, fmt.Sprintf("%s %s deleting=%v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil))
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pod = p
			}
		}
		seen.State("%v", states)
		return pod != nil, nil
	}), "the chart's controllers Pod runs")
	assert.Equal(t, controllersName, pod.Spec.ServiceAccountName, "the controllers run under their own ServiceAccount")

	apiserver := "system:serviceaccount:" + localcluster.KruntimesNamespace + ":" + deploymentName
	controllers := "system:serviceaccount:" + localcluster.KruntimesNamespace + ":" + controllersName
	for _, tc := range []struct {
		user, verb, resource, namespace string
		want                            bool
	}{
		{apiserver, "create", "deployments.apps", ns, false},
		{apiserver, "create", "deployments.apps", "default", false},
		{apiserver, "delete", "pods", ns, false},
		{apiserver, "get", "secrets", ns, false},
		{apiserver, "get", "secrets", localcluster.KruntimesNamespace, false},
		{apiserver, "create", "rolebindings.rbac.authorization.k8s.io", ns, false},
		{apiserver, "create", "serviceaccounts", ns, false},
		{apiserver, "update", "leases.coordination.k8s.io", localcluster.KruntimesNamespace, false},
		// The invoke router's informer of Runtime Pods.
		{apiserver, "watch", "pods", ns, true},
		{controllers, "create", "deployments.apps", ns, true},
		{controllers, "delete", "pods", ns, true},
		{controllers, "get", "secrets", ns, true},
		{controllers, "create", "rolebindings.rbac.authorization.k8s.io", ns, true},
	} {
		got := canI(ctx, t, f, tc.user, tc.verb, tc.resource, tc.namespace)
		assert.Equal(t, tc.want, got, "kubectl auth can-i --as=%s %s %s -n %s", tc.user, tc.verb, tc.resource, tc.namespace)
	}
}

// canI asks kube-apiserver, as kubectl auth can-i --as=user does, whether
// user may verb resource in namespace.
func canI(ctx context.Context, t *testing.T, f *framework.Framework, user, verb, resource, namespace string) bool {
	t.Helper()
	// can-i exits 1 when the answer is no; its output says which.
	out, _ := f.KubectlCommand(ctx, "auth", "can-i", "--as="+user, verb, resource, "--namespace", namespace).CombinedOutput()
	answer := strings.TrimSpace(string(out))
	require.Contains(t, []string{"yes", "no"}, answer, "kubectl auth can-i answered %q", out)
	return answer == "yes"
}
