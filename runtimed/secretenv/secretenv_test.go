package secretenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// Resolve's reads of Secrets are tested as the Runtime's ServiceAccount
// against a real kube-apiserver with RBAC, with and without a Role that
// grants them, in test/e2e (TestSecretEnvResolveAsTheRuntime, and
// TestSecretEnv through runtimed itself). What needs no Secret is here.

func runWithEnv(env ...v1alpha1.EnvVar) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "fn", Namespace: "team-a"},
		Spec:       v1alpha1.RunSpec{Runtime: "python", Env: env},
	}
}

func TestForbiddenMessageSaysWhatToGrant(t *testing.T) {
	msg := forbiddenMessage(runWithEnv(), "TOKEN", &v1alpha1.SecretKeySelector{Name: "db", Key: "password"})
	assert.Contains(t, msg, "ServiceAccount runtime-python may not get Secret team-a/db")
	assert.Contains(t, msg, "`kubectl -n team-a create role runtime-python:secrets --verb=get --resource=secrets --resource-name=db`")
	assert.Contains(t, msg, "`kubectl -n team-a create rolebinding runtime-python:secrets --role=runtime-python:secrets --serviceaccount=team-a:runtime-python`")
}

func TestWithoutASecretClient(t *testing.T) {
	ref := v1alpha1.EnvVar{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{
		SecretKeyRef: &v1alpha1.SecretKeySelector{Name: "db", Key: "password"}}}
	cases := []struct {
		name    string
		env     []v1alpha1.EnvVar
		want    []*runtimev1.EnvVar
		refused bool
	}{
		{name: "plain values resolve in spec order",
			env:  []v1alpha1.EnvVar{{Name: "A", Value: "1"}, {Name: "B"}},
			want: []*runtimev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B"}}},
		{name: "a secretKeyRef is refused, naming the Secret",
			env:     []v1alpha1.EnvVar{{Name: "A", Value: "1"}, ref},
			refused: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, err := Resolve(t.Context(), nil, runWithEnv(tc.env...))
			if tc.refused {
				require.True(t, IsRefused(err), "want a refusal, got %v", err)
				assert.Contains(t, err.Error(), `Secret "db"`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, env)
		})
	}
}
