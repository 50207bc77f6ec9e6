package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// krtOutcomeUnknown is krt invoke's exit code for an answer that leaves
// the outcome unknown (docs/invoke.md).
const krtOutcomeUnknown = 7

// TestKrtExitsOutcomeUnknownWhenTheServerDiesMidInvoke kills every
// kruntimes-apiserver replica while krt waits for a running handler:
// kube-apiserver answers a plain error, and krt must say "outcome unknown"
// (7), never "did not run" (5), which a script would retry.
func TestKrtExitsOutcomeUnknownWhenTheServerDiesMidInvoke(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, 5*time.Minute)
	client, err := versioned.NewForConfig(f.AdminConfig)
	require.NoError(t, err)
	ns := f.CreateNamespace(t, "unknown")
	runs := client.KruntimesV1alpha1().Runs(ns)
	_, err = client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, pythonRuntime("python"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = runs.Create(ctx, &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			Source: v1alpha1.RunSource{InlinePath: "main.py", Inline: "import time\n" +
				"def handle(event, context):\n" +
				"    with open(event['file'], 'a') as f:\n" +
				"        f.write('started\\n')\n" +
				"    time.sleep(event['sleep'])\n" +
				"    return 'done'\n"},
			Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "main.handle"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitForPhase(ctx, t, runs, "slow", lifecycle.Ready)

	started := filepath.Join(t.TempDir(), "started")
	var stdout, stderr bytes.Buffer
	krt := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+f.Kubeconfig, "-n", ns,
		"invoke", "slow", "--timeout", "40s", "--data", fmt.Sprintf(`{"file":%q,"sleep":15}`, started))
	krt.Stdout, krt.Stderr = &stdout, &stderr
	require.NoError(t, krt.Start())
	exited := make(chan error, 1)
	go func() { exited <- krt.Wait() }()

	require.NoError(t, framework.Poll(ctx, 50*time.Millisecond, time.Minute, func(context.Context, *framework.Observed) (bool, error) {
		data, err := os.ReadFile(started)
		return err == nil && strings.Contains(string(data), "started"), nil
	}), "the handler starts")

	pids := f.Cluster.KruntimesReplicaPIDs()
	t.Cleanup(func() {
		// Whole again for the tests after this one.
		for i := range pids {
			require.NoError(t, f.Cluster.RestartKruntimesReplica(context.Background(), i), "restarting replica %d", i)
		}
	})
	for i, pid := range pids {
		require.NotZero(t, pid, "replica %d runs", i)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}

	var err7 error
	select {
	case err7 = <-exited:
	case <-ctx.Done():
		t.Fatalf("krt did not exit after the replicas were killed; stderr: %s", stderr.String())
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err7, &exit), "krt exits with a code, not %v; stderr: %s", err7, stderr.String())
	assert.Equal(t, krtOutcomeUnknown, exit.ExitCode(), "outcome unknown, not did not run; stdout: %q stderr: %q", stdout.String(), stderr.String())
	assert.Contains(t, stderr.String(), "the handler may have run")
	t.Logf("krt exited %d: %s", exit.ExitCode(), strings.TrimSpace(stderr.String()))
}
