package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestKubectlTaskRun is the user's path, with every part real: kubectl
// applies the example bash Runtime and task Run, the hosted runtime
// controller and scheduler place it, runtimed runs it on a warm Pod, kubectl
// waits for Succeeded, and the TTL controller deletes it afterwards.
func TestKubectlTaskRun(t *testing.T) {
	f := framework.Get(t)
	controllersClient(t, f)
	ns := f.CreateNamespace(t, "kubectl-task")
	ctx := framework.Context(t, 4*time.Minute)
	examples := filepath.Join(f.RepoRoot, "artifacts", "examples")

	out, err := f.Kubectl(ctx, "-n", ns, "apply", "-f", filepath.Join(examples, "runtime-bash.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "runtime/bash", "--timeout=3m")
	require.NoError(t, err, "the example Runtime becomes Ready: %s", out)

	out, err = f.Kubectl(ctx, "-n", ns, "create", "-f", filepath.Join(examples, "run-task.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/hello", "--timeout=60s")
	require.NoError(t, err, "kubectl wait for Succeeded: %s", out)

	out, err = f.Kubectl(ctx, "-n", ns, "get", "run", "hello")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Succeeded")
	assert.Contains(t, out, "runtime-bash-", "the Pod column names the Runtime Pod")

	client := controllersClient(t, f)
	run, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, "hello", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, run.Status.ExitCode)
	assert.Equal(t, int32(0), *run.Status.ExitCode)
	assert.Equal(t, "world", run.Status.Outputs["greeted"])
	require.NotNil(t, run.Status.ScheduledTime)
	require.NotNil(t, run.Status.StartTime)
	require.NotNil(t, run.Status.CompletionTime)
	assert.False(t, run.Status.CompletionTime.Before(run.Status.StartTime))

	// A shorter TTL makes the hosted gc controller delete it.
	out, err = f.Kubectl(ctx, "-n", ns, "patch", "run", "hello", "--type=merge", "-p", `{"spec":{"ttlSecondsAfterFinished":1}}`)
	require.NoError(t, err, out)
	err = framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, "hello", metav1.GetOptions{})
		return seen.Deleted(err), nil
	})
	require.NoError(t, err, "ttlSecondsAfterFinished deletes the finished Run")

	// A failing task through the same path reports its stderr tail.
	failing := strings.NewReplacer("name: hello", "name: broken", `echo "hello, $NAME"`, `echo "no such thing" >&2; exit 3`).
		Replace(mustRead(t, filepath.Join(examples, "run-task.yaml")))
	out, err = f.KubectlWithInput(ctx, failing, "-n", ns, "create", "-f", "-")
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=jsonpath={.status.phase}=Failed", "run/broken", "--timeout=60s")
	require.NoError(t, err, out)
	broken, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, "broken", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *broken.Status.ExitCode)
	assert.Contains(t, broken.Status.Message, "no such thing")
	assert.True(t, lifecycle.IsTerminal(broken.Status.Phase))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}
