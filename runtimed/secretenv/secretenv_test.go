package secretenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

const secretValue = "s3cr3t-value"

func fromSecret(name, secret, key string, optional bool) v1alpha1.EnvVar {
	ref := &v1alpha1.SecretKeySelector{Name: secret, Key: key}
	if optional {
		ref.Optional = ptr.To(true)
	}
	return v1alpha1.EnvVar{Name: name, ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: ref}}
}

func runWithEnv(env ...v1alpha1.EnvVar) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "fn", Namespace: "team-a"},
		Spec:       v1alpha1.RunSpec{Runtime: "python", Env: env},
	}
}

// The cases use client-go's object tracker, which answers a missing Secret
// with a real NotFound; that the Runtime's identity is refused a Secret it
// was not granted is checked against a real kube-apiserver in
// test/e2e (TestSecretEnv).
func TestResolve(t *testing.T) {
	secrets := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
			Data: map[string][]byte{"password": []byte(secretValue), "nul": []byte("a\x00b"), "big": make([]byte, 32<<10+1)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-b"},
			Data: map[string][]byte{"other": []byte("x")}},
	).CoreV1()

	cases := []struct {
		name string
		env  []v1alpha1.EnvVar
		want []*runtimev1.EnvVar
		// refused is a part of the refusal's message; none when empty.
		refused []string
	}{
		{name: "plain values and a Secret's key come out in spec order",
			env:  []v1alpha1.EnvVar{{Name: "A", Value: "1"}, fromSecret("TOKEN", "db", "password", false), {Name: "B"}},
			want: []*runtimev1.EnvVar{{Name: "A", Value: "1"}, {Name: "TOKEN", Value: secretValue}, {Name: "B"}}},
		{name: "a missing Secret fails naming it, its namespace and its key",
			env:     []v1alpha1.EnvVar{fromSecret("TOKEN", "absent", "password", false)},
			refused: []string{"env TOKEN", `Secret "absent"`, "team-a", `"password"`}},
		{name: "a Secret of another namespace is not read",
			env:     []v1alpha1.EnvVar{fromSecret("TOKEN", "db", "other", false)},
			refused: []string{"Secret team-a/db has no key \"other\""}},
		{name: "an optional variable of a missing Secret is left unset",
			env:  []v1alpha1.EnvVar{fromSecret("TOKEN", "absent", "password", true), {Name: "A", Value: "1"}},
			want: []*runtimev1.EnvVar{{Name: "A", Value: "1"}}},
		{name: "an optional variable of a missing key is left unset",
			env:  []v1alpha1.EnvVar{fromSecret("TOKEN", "db", "absent", true)},
			want: nil},
		{name: "a value with a NUL byte fails without the value",
			env:     []v1alpha1.EnvVar{fromSecret("TOKEN", "db", "nul", false)},
			refused: []string{"NUL byte", `key "nul"`}},
		{name: "a value over 32 KiB fails",
			env:     []v1alpha1.EnvVar{fromSecret("TOKEN", "db", "big", false)},
			refused: []string{"32769 bytes", "32768"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(t.Context(), secrets, runWithEnv(tc.env...))
			if len(tc.refused) == 0 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.True(t, IsRefused(err), "want a refusal, got %v", err)
			for _, part := range tc.refused {
				assert.Contains(t, err.Error(), part)
			}
			assert.NotContains(t, err.Error(), secretValue)
		})
	}
}

func TestForbiddenMessageSaysWhatToGrant(t *testing.T) {
	msg := forbiddenMessage(runWithEnv(), "TOKEN", &v1alpha1.SecretKeySelector{Name: "db", Key: "password"})
	assert.Contains(t, msg, "ServiceAccount runtime-python may not get Secret team-a/db")
	assert.Contains(t, msg, "kubectl -n team-a create role runtime-python-secrets --verb=get --resource=secrets --resource-name=db")
	assert.Contains(t, msg, "kubectl -n team-a create rolebinding runtime-python-secrets --role=runtime-python-secrets --serviceaccount=team-a:runtime-python")
}

func TestWithoutASecretClientASecretRefIsRefused(t *testing.T) {
	_, err := Resolve(t.Context(), nil, runWithEnv(fromSecret("TOKEN", "db", "password", false)))
	assert.True(t, IsRefused(err), "%v", err)
	env, err := Resolve(t.Context(), nil, runWithEnv(v1alpha1.EnvVar{Name: "A", Value: "1"}))
	require.NoError(t, err)
	assert.Equal(t, []*runtimev1.EnvVar{{Name: "A", Value: "1"}}, env)
}
