package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestSandbox serves a sandbox through the whole product: a function Run
// with the built-in handler kruntimes.sandbox and no source, on a Runtime
// of capacity 1, invoked through runs/invoke, and deleted with its
// workspace.
func TestSandbox(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sandbox")
	ctx := framework.Context(t, 6*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	host := hostOf(ctx, t, f, ns, "python")

	run := functionRun("sb", "python", "", "", "kruntimes.sandbox")
	createRun(ctx, t, runs, ns, run)
	ready := waitForRun(ctx, t, runs, ns, "sb", functionTimeout, "Ready", inPhase(lifecycle.Ready))
	admin := newInvoker(t, f.AdminConfig)

	call := func(t *testing.T, query string, req map[string]any) (map[string]any, answer) {
		t.Helper()
		body, err := json.Marshal(req)
		require.NoError(t, err)
		a := admin.post(ctx, t, invokePath(ns, "sb")+query, body, nil)
		r := a.result(t)
		if r.Error != nil {
			return nil, a
		}
		var out map[string]any
		require.NoError(t, json.Unmarshal(r.Output.Raw, &out), "%s", r.Output.Raw)
		return out, a
	}

	t.Run("run_code keeps its variables and returns the last expression", func(t *testing.T) {
		out, _ := call(t, "", map[string]any{"op": "run_code", "code": "import math\nx = 20"})
		assert.Nil(t, out["error"])
		out, _ = call(t, "", map[string]any{"op": "run_code", "code": "print('side')\nx + 22"})
		assert.Equal(t, 42.0, out["result"])
		assert.Equal(t, "side\n", out["stdout"])
		out, _ = call(t, "", map[string]any{"op": "run_code", "code": "math.sqrt(-1)"})
		assert.Equal(t, "ValueError", out["error"].(map[string]any)["name"], "the exception is the answer, not a function error")
		out, _ = call(t, "", map[string]any{"op": "run_code", "code": "x"})
		assert.Equal(t, 20.0, out["result"], "still usable")
	})

	t.Run("a command past its timeout ends in time and the next one runs", func(t *testing.T) {
		start := time.Now()
		out, _ := call(t, "?timeout=30s", map[string]any{"op": "run_command", "cmd": "sleep 60", "timeout": 1})
		assert.Less(t, time.Since(start), 15*time.Second)
		assert.Equal(t, true, out["timed_out"])
		out, _ = call(t, "", map[string]any{"op": "run_command", "cmd": []string{"sh", "-c", "echo $((6*7))"}})
		assert.Equal(t, "42\n", out["stdout"])
		assert.Equal(t, 0.0, out["exit_code"])
	})

	t.Run("files round-trip inside the workspace and escapes are refused", func(t *testing.T) {
		data := base64.StdEncoding.EncodeToString([]byte("hello\x00sandbox"))
		call(t, "", map[string]any{"op": "write_file", "path": "dir/f.bin", "data_b64": data})
		out, _ := call(t, "", map[string]any{"op": "read_file", "path": "dir/f.bin"})
		assert.Equal(t, data, out["data_b64"])
		b, err := os.ReadFile(filepath.Join(host.workspace, string(ready.UID), "dir", "f.bin"))
		require.NoError(t, err, "the file is in the Run's workspace")
		assert.Equal(t, "hello\x00sandbox", string(b))

		call(t, "", map[string]any{"op": "run_command", "cmd": "ln -s /etc out"})
		for _, path := range []string{"../x", "/etc/passwd", "out/passwd"} {
			_, a := call(t, "", map[string]any{"op": "read_file", "path": path})
			assert.Equal(t, "SandboxPathError", a.header.Get("X-Kruntime-Function-Error"), "%s: %s", path, a.body)
		}
	})

	t.Run("deleting the Run removes the sandbox and its workspace", func(t *testing.T) {
		require.NoError(t, runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, "sb", metav1.DeleteOptions{}))
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			_, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "sb", metav1.GetOptions{})
			return seen.Deleted(err), nil
		}))
		_, err := os.Stat(filepath.Join(host.workspace, string(ready.UID)))
		assert.True(t, os.IsNotExist(err), "the workspace is gone: %v", err)
		assert.Nil(t, host.registration(ctx, t, ready.UID), "the registration is gone")
	})
}
