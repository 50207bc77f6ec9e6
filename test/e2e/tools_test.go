package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestFunctionAsTool: the tool example (artifacts/examples/run-tool.yaml),
// applied server-side with kubectl, keeps its schemas, kubectl explain
// describes them, and through kube-apiserver runs/invoke answers a body
// that breaks schema.input with 400 listing every violation without
// running the handler (its own call counter says so), and invokes a body
// that matches it.
func TestFunctionAsTool(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "tools")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 2), metav1.CreateOptions{})
	require.NoError(t, err)

	out, err := f.Kubectl(ctx, "-n", ns, "apply", "--server-side", "-f", filepath.Join(f.RepoRoot, "artifacts", "examples", "run-tool.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "run/forecast", "--timeout=90s")
	require.NoError(t, err, "kubectl wait --for=condition=Ready: %s", out)
	run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "forecast", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, run.Spec.Mode.Function.Schema)
	assert.Contains(t, run.Spec.Mode.Function.Description, "forecast")
	assert.Contains(t, string(run.Spec.Mode.Function.Schema.Input.Raw), `"required":["city"]`)

	out, err = f.Kubectl(ctx, "explain", "run.spec.mode.function.schema")
	require.NoError(t, err, out)
	assert.Contains(t, out, "input")
	assert.Contains(t, out, "output")

	admin := newInvoker(t, f.AdminConfig)
	a := admin.post(ctx, t, invokePath(ns, "forecast"), []byte(`{"days":40,"unit":"F"}`), nil)
	require.Equal(t, http.StatusBadRequest, a.code, "%s", a.body)
	st := a.status(t)
	require.NotNil(t, st.Details)
	fields := map[string]bool{}
	for _, c := range st.Details.Causes {
		fields[c.Field] = true
	}
	assert.Equal(t, map[string]bool{"input.city": true, "input.days": true, "input.unit": true}, fields, "%s", a.body)
	assert.NotEmpty(t, a.header.Get("X-Kruntime-Invocation-ID"))

	r := admin.post(ctx, t, invokePath(ns, "forecast"), []byte(`{"city":"Oslo","days":2}`), nil).result(t)
	var output struct {
		City    string    `json:"city"`
		Celsius []float64 `json:"celsius"`
		Calls   int       `json:"calls"`
	}
	require.NoError(t, json.Unmarshal(r.Output.Raw, &output))
	assert.Equal(t, "Oslo", output.City)
	assert.Len(t, output.Celsius, 2)
	assert.Equal(t, 1, output.Calls, "the first valid invocation is the handler's first run: the invalid one never ran")
}
