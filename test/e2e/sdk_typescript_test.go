package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestTypeScriptSDK runs the TypeScript SDK's tests (node:test): its unit
// tests, and its cluster tests (sdk/typescript/test/e2e) against the suite's
// cluster: a
// namespace with a Python, a bash and a capacity-1 sandbox Runtime, a
// Python Runtime of its own for the test that kills a runtimed, the admin
// kubeconfig and one of a ServiceAccount that may read Runs but not invoke
// them. The package must be installed and built (make ts-deps). It fails
// with node's output.
func TestTypeScriptSDK(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	sdk := filepath.Join(f.RepoRoot, "sdk", "typescript")
	for _, built := range []string{"node_modules/@kubernetes/client-node", "node_modules/@openai/agents", "dist/index.js"} {
		if _, err := os.Stat(filepath.Join(sdk, built)); err != nil {
			msg := "sdk/typescript is not installed and built (run make ts-deps): " + err.Error()
			if framework.Required() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sdk-typescript")
	ctx := framework.Context(t, 15*time.Minute)
	runtimes := map[string]struct {
		language string
		capacity int32
	}{"python": {"python", 8}, "bash": {"bash", 8}, "python-kill": {"python", 8}, "sandbox": {"python", 1}}
	for name, rt := range runtimes {
		_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime(name, rt.language, rt.capacity), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for name := range runtimes {
		waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"="+name, "")
	}
	dir := t.TempDir()
	reader := writeReaderKubeconfig(ctx, t, f, ns, dir)

	// The unit tests (loopback servers) and the cluster tests, one file at
	// a time.
	var files []string
	for _, pattern := range []string{"test/*.test.mjs", "test/e2e/*.test.mjs"} {
		matched, err := filepath.Glob(filepath.Join(sdk, pattern))
		require.NoError(t, err)
		files = append(files, matched...)
	}
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-concurrency=1", "--test-reporter=tap"}, files...)...)
	cmd.Dir = sdk
	cmd.Env = append(sdkTestEnv(f, ns, reader, dir), "KRUNTIMES_TEST_SANDBOX_RUNTIME=sandbox")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("node --test:\n%s", out.String())
	require.NoError(t, err, "node --test failed")
	require.Regexp(t, regexp.MustCompile(`(?m)^# pass [1-9]`), out.String(), "the tests ran")
	require.Regexp(t, regexp.MustCompile(`(?m)^# skipped 0$`), out.String(), "no SDK test may skip against the cluster")
}
