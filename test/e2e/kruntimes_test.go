package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
)

var runsGVR = schema.GroupVersionResource{Group: "kruntimes.io", Version: "v1alpha1", Resource: "runs"}

const runtimeManifest = `apiVersion: kruntimes.io/v1alpha1
kind: Runtime
metadata:
  name: bash
spec:
  replicas: 0
  capacity:
    runs: 1
  template:
    spec:
      containers:
      - name: runtime
        image: kruntimes.io/kruntimes-runtime:dev
        args: ["--language=bash"]
`

func runManifest(name string) string {
	return `apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata:
  name: ` + name + `
spec:
  runtime: bash
  source:
    inline: "echo hello"
  mode:
    task:
      entrypoint: main.sh
`
}

func TestAPIServiceAvailable(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, time.Minute)
	require.NoError(t, localcluster.WaitAPIServiceAvailable(ctx, f.Dynamic, localcluster.KruntimesAPIService, framework.ShortTimeout, nil))
	out, err := f.Kubectl(ctx, "get", "apiservice", localcluster.KruntimesAPIService)
	require.NoError(t, err)
	assert.Contains(t, out, "True")
	resources, err := f.Client.Discovery().ServerResourcesForGroupVersion("kruntimes.io/v1alpha1")
	require.NoError(t, err)
	var names []string
	for _, r := range resources.APIResources {
		names = append(names, r.Name)
	}
	assert.Subset(t, names, []string{"runs", "runs/status", "runtimes", "runtimes/status"})
}

func TestKubectlCreateGetDeleteRunsAndRuntimes(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "crud")
	ctx := framework.Context(t, time.Minute)

	_, err := f.KubectlWithInput(ctx, runtimeManifest, "create", "-n", ns, "-f", "-")
	require.NoError(t, err)
	_, err = f.KubectlWithInput(ctx, runManifest("hello"), "create", "-n", ns, "-f", "-")
	require.NoError(t, err)

	out, err := f.Kubectl(ctx, "get", "runtimes", "-n", ns)
	require.NoError(t, err)
	assert.Contains(t, out, "bash")
	out, err = f.Kubectl(ctx, "get", "runs", "-n", ns)
	require.NoError(t, err)
	assert.Contains(t, out, "hello")
	out, err = f.Kubectl(ctx, "get", "run", "hello", "-n", ns, "-o", "jsonpath={.spec.runtime}")
	require.NoError(t, err)
	assert.Equal(t, "bash", out)

	_, err = f.Kubectl(ctx, "delete", "run", "hello", "-n", ns, "--wait=false")
	require.NoError(t, err)
	_, err = f.Kubectl(ctx, "delete", "runtime", "bash", "-n", ns, "--wait=false")
	require.NoError(t, err)
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		out, err := f.Kubectl(ctx, "get", "runtimes", "-n", ns, "-o", "name")
		if seen.Err(err) {
			return false, nil
		}
		return strings.TrimSpace(out) == "", nil
	})
	require.NoError(t, err, "Runtime is gone")
}

func TestKubectlExplainRunSpec(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, time.Minute)
	// kube-apiserver aggregates an APIService's OpenAPI v3 some time after
	// the APIService became Available: until then explain finds no runs.
	var out string
	err := framework.Poll(ctx, framework.PollInterval, 30*time.Second, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		var err error
		out, err = f.Kubectl(ctx, "explain", "run.spec")
		return !seen.Err(err), nil
	})
	require.NoError(t, err)
	for _, field := range []string{"runtime", "mode", "source"} {
		assert.Contains(t, out, field)
	}
}

func TestKubectlWatchSeesUpdate(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "watch")
	ctx := framework.Context(t, time.Minute)
	_, err := f.KubectlWithInput(ctx, runManifest("watched"), "create", "-n", ns, "-f", "-")
	require.NoError(t, err)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	cmd := f.KubectlCommand(watchCtx, "get", "runs", "-n", ns, "-w", "--output-watch-events", "-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name,LABEL:.object.metadata.labels.seen")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopWatch(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	waitLine := func(want ...string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "kubectl get -w ended early")
				if containsAll(l, want...) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no watch line with %v", want)
			}
		}
	}
	waitLine("ADDED", "watched")
	_, err = f.Kubectl(ctx, "label", "run", "watched", "-n", ns, "seen=yes")
	require.NoError(t, err)
	waitLine("MODIFIED", "watched", "yes")
}

func TestFieldSelectorAssignedPodThroughAggregation(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "fieldsel")
	ctx := framework.Context(t, time.Minute)
	for _, name := range []string{"assigned", "other"} {
		_, err := f.KubectlWithInput(ctx, runManifest(name), "create", "-n", ns, "-f", "-")
		require.NoError(t, err)
	}
	// A Pod that exists and is no Runtime Pod: the recovery controller
	// leaves Runs assigned to it alone (one assigned to a Pod that does not
	// exist would go back to Pending). No node agent owns its node.
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, framework.PollInterval, framework.ShortTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = f.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-x"},
			Spec:       corev1.PodSpec{NodeName: "unowned-" + ns, Containers: []corev1.Container{{Name: "c", Image: testServerImage}}},
		}, metav1.CreateOptions{})
		return err == nil, nil // admission waits for the namespace's default ServiceAccount
	})
	require.NoError(t, err)
	_, err = f.Kubectl(ctx, "patch", "run", "assigned", "-n", ns, "--subresource=status", "--type=merge",
		"-p", fmt.Sprintf(`{"status":{"phase":"Scheduled","assignedPod":"pod-x","assignedPodUID":%q}}`, pod.UID))
	require.NoError(t, err)

	out, err := f.Kubectl(ctx, "get", "runs", "-n", ns, "--field-selector", "status.assignedPod=pod-x", "-o", "name")
	require.NoError(t, err)
	assert.Equal(t, "run.kruntimes.io/assigned", strings.TrimSpace(out))
	out, err = f.Kubectl(ctx, "get", "runs", "-n", ns, "--field-selector", "status.assignedPod=pod-y", "-o", "name")
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(out))
}

func TestServiceAccountNeedsRBACForRuns(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ns := f.CreateNamespace(t, "rbac")
	ctx := framework.Context(t, time.Minute)
	for _, name := range []string{"reader", "stranger"} {
		_, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := f.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "run-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"kruntimes.io"}, Resources: []string{"runs"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "run-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "run-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	tests := []struct {
		name      string
		account   string
		wantAllow bool
	}{
		{name: "ServiceAccount without RBAC is forbidden (403)", account: "stranger", wantAllow: false},
		{name: "ServiceAccount with a Role may list (200)", account: "reader", wantAllow: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := serviceAccountClient(ctx, t, f, ns, tc.account)
			// RBAC bindings reach the delegated authorizer through a
			// SubjectAccessReview cache; poll past its TTL.
			var lastErr error
			err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
				_, lastErr = client.Resource(runsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
				if tc.wantAllow {
					return lastErr == nil, nil
				}
				return apierrors.IsForbidden(lastErr), nil
			})
			require.NoError(t, err, "last error: %v", lastErr)
		})
	}
}

func serviceAccountClient(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string) dynamic.Interface {
	t.Helper()
	tr, err := f.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(f.AdminConfig)
	cfg.BearerToken = tr.Status.Token
	client, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
