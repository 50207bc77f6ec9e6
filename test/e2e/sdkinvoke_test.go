package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/repobin"
)

// TestSDKInvokeBenchRuns runs the invoke benchmark of the three clients
// (test/bench/sdkinvoke: the Go clientset, the Python SDK and the
// TypeScript SDK, through aggregation and direct) once, a few invocations
// each, against the suite's cluster, so that the command and its client
// scripts cannot rot. Its numbers mean nothing here (race-built servers,
// other tests beside it); docs/benchmarks.md has the real run.
func TestSDKInvokeBenchRuns(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	if _, err := os.Stat(filepath.Join(f.RepoRoot, "sdk", "typescript", "dist", "index.js")); err != nil {
		msg := "sdk/typescript is not built (run make ts-deps): " + err.Error()
		if framework.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if out, err := exec.Command(systemPython, "-c", "import kubernetes").CombinedOutput(); err != nil {
		msg := systemPython + " lacks the SDK's dependencies (run hack/install-python-deps.sh): " + string(out)
		if framework.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sdkinvoke")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 2), metav1.CreateOptions{})
	require.NoError(t, err)
	waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"=python", "")

	require.NoError(t, repobin.Build(ctx, f.RepoRoot, repobin.Command{Name: "sdkinvoke", Package: "./test/bench/sdkinvoke", NoRace: true}))
	cmd := exec.CommandContext(ctx, repobin.Path(f.RepoRoot, "sdkinvoke"), "--kubeconfig", f.Kubeconfig, "--namespace", ns,
		"--runtime", "python", "--rounds", "1", "--requests", "5", "--warmup", "2", "--python", systemPython)
	cmd.Dir = f.RepoRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("sdkinvoke:\n%s", out.String())
	require.NoError(t, err)
	for _, row := range []string{
		"| aggregated | Go clientset |", "| aggregated | Python SDK |", "| aggregated | TypeScript SDK |",
		"| direct | Go clientset |", "| direct | Python SDK |", "| direct | TypeScript SDK |",
	} {
		require.Contains(t, out.String(), row)
	}
	left, err := runs.KruntimesV1alpha1().Runs(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, r := range left.Items {
		require.NotNil(t, r.DeletionTimestamp, "the benchmark deletes the function it created: %s", r.Name)
	}
}
