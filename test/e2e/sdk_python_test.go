package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// systemPython is the product's Python: Debian's, with Debian's
// python3-kubernetes and python3-pytest (hack/install-python-deps.sh).
const systemPython = "/usr/bin/python3"

// TestPythonSDK runs the Python SDK's pytest suite (sdk/python/tests)
// against the suite's cluster: a namespace with a Python and a bash Runtime,
// a Python Runtime of its own for the test that kills a runtimed, the admin
// kubeconfig and one of a ServiceAccount that may read Runs but not invoke
// them. It fails with pytest's output.
func TestPythonSDK(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	if out, err := exec.Command(systemPython, "-c", "import kubernetes, pytest, venv, ensurepip, setuptools").CombinedOutput(); err != nil {
		msg := systemPython + " lacks the SDK's test dependencies (run hack/install-python-deps.sh): " + string(out)
		if framework.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sdk-python")
	ctx := framework.Context(t, 15*time.Minute)
	for name, language := range map[string]string{"python": "python", "bash": "bash", "python-kill": "python"} {
		_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime(name, language, 8), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, rt := range []string{"python", "bash", "python-kill"} {
		waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"="+rt, "")
	}
	dir := t.TempDir()
	reader := writeReaderKubeconfig(ctx, t, f, ns, dir)

	sdk := filepath.Join(f.RepoRoot, "sdk", "python")
	cmd := exec.CommandContext(ctx, systemPython, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests")
	cmd.Dir = sdk
	cmd.Env = append(sdkTestEnv(f, ns, reader, dir),
		"PYTHONPATH="+filepath.Join(sdk, "src"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("pytest:\n%s", out.String())
	require.NoError(t, err, "pytest failed")
	require.NotContains(t, lastLine(out.String()), "skipped", "no SDK test may skip against the cluster")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// writeReaderKubeconfig writes into dir a kubeconfig of a ServiceAccount of
// ns that holds only kruntimes-view (it may read Runs, not invoke them),
// with ns as its context's namespace, and returns its path.
func writeReaderKubeconfig(ctx context.Context, t *testing.T, f *framework.Framework, ns, dir string) string {
	readerConfig, _ := serviceAccountConfig(ctx, t, f, ns, "sdk-reader", "kruntimes-view")
	reader := filepath.Join(dir, "reader.kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: readerConfig.Host, CertificateAuthorityData: readerConfig.CAData}
	if len(readerConfig.CAData) == 0 {
		kc.Clusters["local"].CertificateAuthority = readerConfig.CAFile
	}
	kc.AuthInfos["reader"] = &clientcmdapi.AuthInfo{Token: readerConfig.BearerToken}
	kc.Contexts["reader"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "reader", Namespace: ns}
	kc.CurrentContext = "reader"
	require.NoError(t, clientcmd.WriteToFile(*kc, reader))
	return reader
}

// sdkTestEnv is the environment of an SDK's cluster tests: this process's,
// and in KRUNTIMES_TEST_* variables the cluster's kubeconfig, the reader's,
// the namespace, its Runtimes (python, bash, python-kill) and a scratch
// directory the handlers write to.
func sdkTestEnv(f *framework.Framework, ns, reader, dir string) []string {
	return append(os.Environ(),
		"KRUNTIMES_TEST_KUBECONFIG="+f.Kubeconfig,
		"KRUNTIMES_TEST_READER_KUBECONFIG="+reader,
		"KRUNTIMES_TEST_NAMESPACE="+ns,
		"KRUNTIMES_TEST_PYTHON_RUNTIME=python",
		"KRUNTIMES_TEST_BASH_RUNTIME=bash",
		"KRUNTIMES_TEST_KILL_RUNTIME=python-kill",
		"KRUNTIMES_TEST_TMP="+dir,
		// Every test of the suite must run here: a skip is a failure.
		"KRUNTIMES_TEST_REQUIRE=1",
	)
}

// TestPythonSandboxBenchRuns runs sdk/python/bench/sandbox_bench.py once,
// small, against the suite's cluster, so that the benchmark docs/
// benchmarks.md quotes keeps working; its numbers are not judged here.
func TestPythonSandboxBenchRuns(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	if out, err := exec.Command(systemPython, "-c", "import kubernetes").CombinedOutput(); err != nil {
		msg := systemPython + " lacks the SDK's dependencies (run hack/install-python-deps.sh): " + string(out)
		if framework.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sandbox-bench")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("sandbox", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"=sandbox", "")

	sdk := filepath.Join(f.RepoRoot, "sdk", "python")
	cmd := exec.CommandContext(ctx, systemPython, filepath.Join(sdk, "bench", "sandbox_bench.py"), "--kubeconfig", f.Kubeconfig,
		"--namespace", ns, "--runtime", "sandbox", "--sandboxes", "1", "--calls", "3", "--lines", "3")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(sdk, "src"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"create", "run_code", "line"} {
		assert.Regexp(t, `(?m)^`+name+` +n= +\d+ +p50`, string(out))
	}
}
