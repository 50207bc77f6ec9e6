package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
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
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-python:secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"db", "absent"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-python:secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "runtime-python:secrets"},
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
			"`kubectl -n " + ns + " create role " + sa + ":secrets --verb=get --resource=secrets --resource-name=" + secret + "`",
			"`kubectl -n " + ns + " create rolebinding " + sa + ":secrets --role=" + sa + ":secrets --serviceaccount=" + ns + ":" + sa + "`"}
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

// secretEnvHandler returns a digest of $TOKEN, never the value, so that the
// value travels only from the Secret to the handler's environment.
const secretEnvHandler = `import hashlib, os

def handle(event, context):
    return {"token_sha256": hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest(), "plain": os.environ.get("PLAIN")}
`

// secretEnvTask writes the digest of $TOKEN as an output.
const secretEnvTask = `import hashlib, os

with open(os.environ["KRUNTIMES_OUTPUTS"], "a") as f:
    f.write("token_sha256=" + hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest() + "\n")
`

// grantCommand finds the backquoted kubectl create commands in a refusal's
// message (not the edit it suggests for a later Secret).
var grantCommand = regexp.MustCompile("`(kubectl -n [^ `]+ create [^`]+)`")

// TestSecretEnv is a Secret in env on real Runtime Pods: a function and a
// task whose env names a Secret the Runtime's ServiceAccount may not get
// fail with the two kubectl commands that grant it; once a user ran those
// commands, as the message gives them, a function becomes Ready and a task
// succeeds with the value in their environment. The value is nowhere a
// Run's readers or an operator look: the Runs, the events, runtimed's log
// and every log the cluster wrote.
func TestSecretEnv(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "secretenv")
	ctx := framework.Context(t, 6*time.Minute)
	value := "s3cr3t-" + rand.String(16)
	digest := sha256.Sum256([]byte(value))
	wantDigest := hex.EncodeToString(digest[:])

	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 4), metav1.CreateOptions{})
	require.NoError(t, err)
	python := hostOf(ctx, t, f, ns, "python")
	t.Cleanup(func() {
		if t.Failed() {
			out, err := f.Kubectl(context.Background(), "logs", "-n", ns, python.pod.Name, "-c", runtimepod.ContainerRuntimed, "--tail=100")
			t.Logf("runtimed logs (err %v):\n%s", err, out)
		}
	})
	createSecret(ctx, t, f, ns, "db", map[string][]byte{"password": []byte(value)})
	env := []v1alpha1.EnvVar{{Name: "PLAIN", Value: "plain"}, secretEnvVar("TOKEN", "db", "password", false)}
	function := func(name string) *v1alpha1.Run {
		run := functionRun(name, "python", "handler.py", secretEnvHandler, "handler.handle")
		run.Spec.Env = env
		return run
	}
	task := func(name string) *v1alpha1.Run {
		run := &v1alpha1.Run{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.RunSpec{
				Runtime: "python",
				Source:  v1alpha1.RunSource{Inline: secretEnvTask, InlinePath: "main.py"},
				Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Entrypoint: "main.py"}},
				Env:     env,
			},
		}
		return run
	}
	wantCommands := []string{
		"kubectl -n " + ns + " create role runtime-python:secrets --verb=get --resource=secrets --resource-name=db",
		"kubectl -n " + ns + " create rolebinding runtime-python:secrets --role=runtime-python:secrets --serviceaccount=" + ns + ":runtime-python",
	}

	var commands []string
	t.Run("without a grant a function fails to register, saying what to grant", func(t *testing.T) {
		createRun(ctx, t, runs, ns, function("denied"))
		failed := waitForRun(ctx, t, runs, ns, "denied", functionTimeout, "Failed", withoutFinalizer(lifecycle.Failed))
		completed := meta.FindStatusCondition(failed.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonRegistrationFailed, completed.Reason)
		assert.Contains(t, failed.Status.Message, "env TOKEN: the Runtime's ServiceAccount runtime-python may not get Secret "+ns+"/db")
		for _, m := range grantCommand.FindAllStringSubmatch(failed.Status.Message, -1) {
			commands = append(commands, m[1])
		}
		assert.Equal(t, wantCommands, commands, "the message: %s", failed.Status.Message)
		assert.Nil(t, python.registration(ctx, t, failed.UID), "nothing was registered")
	})
	t.Run("without a grant a task fails to start, saying what to grant", func(t *testing.T) {
		createRun(ctx, t, runs, ns, task("denied-task"))
		failed := waitForRun(ctx, t, runs, ns, "denied-task", functionTimeout, "Failed", inPhase(lifecycle.Failed))
		completed := meta.FindStatusCondition(failed.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonStartFailed, completed.Reason)
		for _, want := range wantCommands {
			assert.Contains(t, failed.Status.Message, "`"+want+"`")
		}
	})
	require.Len(t, commands, 2, "the function's refusal gives the grant")

	// A namespace admin runs the commands as the message gives them.
	for _, command := range commands {
		args := strings.Fields(strings.TrimPrefix(command, "kubectl "))
		out, err := f.Kubectl(ctx, args...)
		require.NoError(t, err, "%s: %s", command, out)
	}
	sa := "system:serviceaccount:" + ns + ":" + runtimepod.ServiceAccountName("python")
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		out, err := f.Kubectl(ctx, "-n", ns, "auth", "can-i", "get", "secret/db", "--as="+sa)
		seen.State("can-i: %q (%v)", out, err)
		return strings.TrimSpace(out) == "yes", nil
	})
	require.NoError(t, err, "kube-apiserver's authorizer has the grant")
	out, err := f.Kubectl(ctx, "-n", ns, "auth", "can-i", "list", "secrets", "--as="+sa)
	assert.Equal(t, "no", strings.TrimSpace(out), "the grant is get of one Secret, not a list (%v)", err)

	t.Run("once granted a function becomes Ready and its handler sees the value", func(t *testing.T) {
		created := createRun(ctx, t, runs, ns, function("granted"))
		out, err := f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "run/granted", "--timeout=60s")
		require.NoError(t, err, "kubectl wait --for=condition=Ready: %s", out)
		result, err := runs.KruntimesV1alpha1().Runs(ns).Invoke(ctx, "granted", []byte(`{}`), typedv1alpha1.InvokeOptions{UID: created.UID})
		require.NoError(t, err)
		require.Nil(t, result.Error)
		var got struct {
			TokenSHA256 string `json:"token_sha256"`
			Plain       string `json:"plain"`
		}
		require.NoError(t, json.Unmarshal(result.Output.Raw, &got), "%s", result.Output.Raw)
		assert.Equal(t, wantDigest, got.TokenSHA256, "$TOKEN is the Secret's value")
		assert.Equal(t, "plain", got.Plain)
	})
	t.Run("once granted a task sees the value", func(t *testing.T) {
		createRun(ctx, t, runs, ns, task("granted-task"))
		done := waitForRun(ctx, t, runs, ns, "granted-task", functionTimeout, "Succeeded", inPhase(lifecycle.Succeeded))
		assert.Equal(t, wantDigest, done.Status.Outputs["token_sha256"], "$TOKEN is the Secret's value")
	})

	t.Run("the value is not in the Runs, the events or any log", func(t *testing.T) {
		// runtimed records events asynchronously: the refusals' first.
		err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			reasons, err := f.Kubectl(ctx, "-n", ns, "get", "events", "--field-selector=involvedObject.kind=Run", "-o", "jsonpath={.items[*].reason}")
			seen.State("reasons %q (%v)", reasons, err)
			return strings.Contains(reasons, lifecycle.ReasonRegistrationFailed) && strings.Contains(reasons, lifecycle.ReasonStartFailed), nil
		})
		require.NoError(t, err, "the refusals are events too")
		for _, what := range [][]string{
			{"get", "runs", "-o", "yaml"},
			{"get", "events", "-o", "yaml"},
			{"get", "events.events.k8s.io", "-o", "yaml"},
			{"logs", python.pod.Name, "-c", runtimepod.ContainerRuntimed},
			{"logs", python.pod.Name, "-c", runtimepod.ContainerRuntime},
		} {
			out, err := f.Kubectl(ctx, append([]string{"-n", ns}, what...)...)
			require.NoError(t, err, out)
			require.NotEmpty(t, out)
			assert.NotContains(t, out, value, "kubectl %s", strings.Join(what, " "))
		}
		found, err := filesContaining(f.Cluster.Config().StateDir, value)
		require.NoError(t, err)
		assert.Empty(t, found, "the value is written in no log of the cluster")
	})
}
