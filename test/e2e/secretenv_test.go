package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/runtimepod"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/secretenv"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// secretEnvVar is variable name read from key of Secret secret.
func secretEnvVar(name, secret, key string, optional bool) v1alpha1.EnvVar {
	ref := &v1alpha1.SecretKeySelector{Name: secret, Key: key}
	if optional {
		ref.Optional = ptr.To(true)
	}
	return v1alpha1.EnvVar{Name: name, ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: ref}}
}

// createSecret creates Secret name in ns with data, as the cluster admin.
func createSecret(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string, data map[string][]byte) {
	t.Helper()
	_, err := f.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// TestSecretEnvResolveAsTheRuntime resolves Runs' env as runtimed does,
// with the token of the Runtime's ServiceAccount against the cluster's
// kube-apiserver and its RBAC: only the Secrets a Role names for that
// ServiceAccount are read; every other Secret, whether it exists or not,
// is refused with the commands that grant it.
func TestSecretEnvResolveAsTheRuntime(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "secretenv-resolve")
	ctx := framework.Context(t, 2*time.Minute)
	value := "s3cr3t-" + rand.String(16)
	createSecret(ctx, t, f, ns, "db", map[string][]byte{
		"password": []byte(value), "nul": []byte("a\x00b"), "big": make([]byte, 32<<10+1)})
	createSecret(ctx, t, f, ns, "other", map[string][]byte{"password": []byte(value)})

	// runtime-python may get db and absent (granted before it exists);
	// runtime-bash was granted nothing.
	python, _ := serviceAccountConfig(ctx, t, f, ns, runtimepod.ServiceAccountName("python"))
	bash, _ := serviceAccountConfig(ctx, t, f, ns, runtimepod.ServiceAccountName("bash"))
	_, err := f.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-python-secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"db", "absent"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-python-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "runtime-python-secrets"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runtimepod.ServiceAccountName("python"), Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	secretsAs := map[string]kubernetes.Interface{}
	for runtime, config := range map[string]*rest.Config{"python": python, "bash": bash} {
		client, err := kubernetes.NewForConfig(config)
		require.NoError(t, err)
		secretsAs[runtime] = client
	}
	run := func(runtime string, env ...v1alpha1.EnvVar) *v1alpha1.Run {
		return &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: "fn", Namespace: ns}, Spec: v1alpha1.RunSpec{Runtime: runtime, Env: env}}
	}
	// kube-apiserver's authorizer learns of the binding through an informer.
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := secretenv.Resolve(ctx, secretsAs["python"].CoreV1(), run("python", secretEnvVar("TOKEN", "db", "password", false)))
		return !seen.Err(err), nil
	})
	require.NoError(t, err, "the Role reaches kube-apiserver's authorizer")

	grant := func(runtime, secret string) []string {
		sa := runtimepod.ServiceAccountName(runtime)
		return []string{"may not get Secret " + ns + "/" + secret,
			"`kubectl -n " + ns + " create role " + sa + "-secrets --verb=get --resource=secrets --resource-name=" + secret + "`",
			"`kubectl -n " + ns + " create rolebinding " + sa + "-secrets --role=" + sa + "-secrets --serviceaccount=" + ns + ":" + sa + "`"}
	}
	cases := []struct {
		name    string
		runtime string
		env     []v1alpha1.EnvVar
		want    []*runtimev1.EnvVar
		// refused are parts of the refusal's message; none when empty.
		refused []string
	}{
		{name: "plain values and a granted Secret's key come out in spec order", runtime: "python",
			env:  []v1alpha1.EnvVar{{Name: "A", Value: "1"}, secretEnvVar("TOKEN", "db", "password", false), {Name: "B"}},
			want: []*runtimev1.EnvVar{{Name: "A", Value: "1"}, {Name: "TOKEN", Value: value}, {Name: "B"}}},
		{name: "a granted Secret that does not exist fails naming it, its namespace and its key", runtime: "python",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "absent", "password", false)},
			refused: []string{"env TOKEN", `Secret "absent" does not exist in namespace ` + ns, `"password"`}},
		{name: "a key the granted Secret lacks fails", runtime: "python",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "db", "other", false)},
			refused: []string{"Secret " + ns + "/db has no key \"other\""}},
		{name: "an optional variable of a granted Secret that does not exist is left unset", runtime: "python",
			env:  []v1alpha1.EnvVar{secretEnvVar("TOKEN", "absent", "password", true), {Name: "A", Value: "1"}},
			want: []*runtimev1.EnvVar{{Name: "A", Value: "1"}}},
		{name: "an optional variable of a missing key is left unset", runtime: "python",
			env:  []v1alpha1.EnvVar{secretEnvVar("TOKEN", "db", "absent", true)},
			want: nil},
		{name: "a value with a NUL byte fails without the value", runtime: "python",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "db", "nul", false)},
			refused: []string{"NUL byte", `key "nul"`}},
		{name: "a value over 32 KiB fails", runtime: "python",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "db", "big", false)},
			refused: []string{"32769 bytes", "32768"}},
		{name: "a Secret of the namespace the Role does not name is refused with the commands that grant it", runtime: "python",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "other", "password", false)},
			refused: grant("python", "other")},
		{name: "optional does not hide a refusal", runtime: "python",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "other", "password", true)},
			refused: grant("python", "other")},
		{name: "a Runtime granted nothing is refused the Secret another Runtime may read", runtime: "bash",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "db", "password", false)},
			refused: grant("bash", "db")},
		{name: "a Runtime granted nothing is refused a Secret that does not exist, not told it is missing", runtime: "bash",
			env:     []v1alpha1.EnvVar{secretEnvVar("TOKEN", "absent", "password", true)},
			refused: grant("bash", "absent")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := secretenv.Resolve(ctx, secretsAs[tc.runtime].CoreV1(), run(tc.runtime, tc.env...))
			if len(tc.refused) == 0 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.True(t, secretenv.IsRefused(err), "want a refusal, got %v", err)
			for _, part := range tc.refused {
				assert.Contains(t, err.Error(), part)
			}
			assert.NotContains(t, err.Error(), value)
		})
	}
}
