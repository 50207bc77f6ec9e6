package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// sandboxImplant plants, in every directory of its Pod a sandbox can name,
// a json.py, a sitecustomize and a usercustomize that would leave a marker
// if the next tenant's interpreter imported them; it writes only under the
// prefixes the test formats in (JSON: the Pod's own directory on the
// process-Pod node), and names what it refused otherwise.
const sandboxImplant = `import os, site
home = os.environ["HOME"]
allowed = %s
targets = [home, os.environ["TMPDIR"], site.getusersitepackages(), os.getcwd(), os.path.dirname(os.getcwd()),
           os.path.dirname(os.path.dirname(home))]
refused = [d for d in targets if not any(os.path.realpath(d).startswith(p + os.sep) or os.path.realpath(d) == p for p in allowed)]
if not refused:
    for d in targets:
        os.makedirs(d, exist_ok=True)
        for name in ("json", "sitecustomize", "usercustomize"):
            with open(os.path.join(d, name + ".py"), "w") as f:
                f.write("open(%%r, 'w').close()\n" %% os.path.join(d, "imported-" + name))
refused`

// sandboxInspect is what the next tenant reports of the one before: where
// json came from, which customizations it imported, and every marker left
// in the directories the first one planted in.
const sandboxInspect = `import json, os, sys
dirs = %s
{"home": os.environ["HOME"], "json": json.__file__,
 "custom": [m for m in ("sitecustomize", "usercustomize") if m in sys.modules and not getattr(sys.modules[m], "__file__", "/usr").startswith("/usr")],
 "markers": [os.path.join(d, n) for d in dirs if os.path.isdir(d) for n in os.listdir(d) if n.startswith("imported-")]}`

// TestSandboxTenantsLeaveNothingForTheNext: on a capacity-1 Runtime, a
// sandbox plants modules in every directory of the Pod it can write, and
// leaves a daemon after killing its reaper; the next sandbox on the same
// Pod imports none of it, and the daemon did not outlive its sandbox. An
// input too deeply nested is refused before dispatch, and the sandbox
// keeps its state.
func TestSandboxTenantsLeaveNothingForTheNext(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sandbox-tenants")
	ctx := framework.Context(t, 6*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	host := hostOf(ctx, t, f, ns, "python")
	admin := newInvoker(t, f.AdminConfig)

	call := func(t *testing.T, name string, req map[string]any) (map[string]any, answer) {
		t.Helper()
		body, err := json.Marshal(req)
		require.NoError(t, err)
		a := admin.post(ctx, t, invokePath(ns, name), body, nil)
		r := a.result(t)
		if r.Error != nil {
			return nil, a
		}
		var out map[string]any
		require.NoError(t, json.Unmarshal(r.Output.Raw, &out), "%s", r.Output.Raw)
		require.Nil(t, out["error"], "run_code failed: %v", out)
		return out, a
	}
	sandbox := func(name string) {
		createRun(ctx, t, runs, ns, functionRun(name, "python", "", "", "kruntimes.sandbox"))
		waitForRun(ctx, t, runs, ns, name, functionTimeout, "Ready", inPhase(lifecycle.Ready))
	}
	remove := func(name string) {
		require.NoError(t, runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, name, metav1.DeleteOptions{}))
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			_, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
			return seen.Deleted(err), nil
		}))
	}

	sandbox("first")
	out, _ := call(t, "first", map[string]any{"op": "run_code", "code": "import os\nos.environ['HOME']"})
	home := out["result"].(string)
	stateDir := filepath.Dir(filepath.Dir(home))
	// The process-Pod node runs the Runtime Server as this machine's user,
	// in a directory of the Pod's own that holds its volumes, TMPDIR and
	// HOME: the implant writes only there.
	podDir := filepath.Dir(filepath.Dir(host.workspace))
	require.True(t, strings.HasPrefix(stateDir, podDir+string(filepath.Separator)), "the state directory %s is not the Pod's, in %s", stateDir, podDir)
	out, _ = call(t, "first", map[string]any{"op": "run_code", "code": fmt.Sprintf(sandboxImplant, pyList(t, podDir))})
	require.Empty(t, out["result"], "the implant refused to write outside the Pod's directories")
	userSite, _ := call(t, "first", map[string]any{"op": "run_code", "code": "import site\nsite.getusersitepackages()"})
	out, _ = call(t, "first", map[string]any{"op": "run_code", "code": "import os, subprocess\n[subprocess.Popen(['sleep', '300'], start_new_session=True).pid, os.getppid()]"})
	pids := out["result"].([]any)
	daemon, reaper := int(pids[0].(float64)), int(pids[1].(float64))
	require.True(t, processAlive(daemon))
	// User code runs as its reaper's user and may kill it: the worker dies
	// with it (perhaps after it answered), and the daemon is left to
	// whoever adopts orphans.
	call(t, "first", map[string]any{"op": "run_code", "code": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"})
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, 30*time.Second, func(context.Context, *framework.Observed) (bool, error) {
		return !processAlive(reaper) && !processAlive(daemon), nil
	}), "the daemon outlived its killed reaper")
	remove("first")
	assert.NoDirExists(t, home, "the first sandbox's HOME went with it")

	sandbox("second")
	planted := pyList(t, host.workspace, stateDir, userSite["result"].(string))
	out, _ = call(t, "second", map[string]any{"op": "run_code", "code": fmt.Sprintf(sandboxInspect, planted)})
	seen := out["result"].(map[string]any)
	assert.NotEqual(t, home, seen["home"])
	assert.False(t, strings.HasPrefix(seen["json"].(string), podDir), "the second sandbox imported the first one's json.py: %v", seen["json"])
	assert.Empty(t, seen["custom"], "the second sandbox imported the first one's customization")
	assert.Empty(t, seen["markers"], "an implant of the first sandbox ran")

	t.Run("an input nested too deeply is 400 and the sandbox keeps its state", func(t *testing.T) {
		call(t, "second", map[string]any{"op": "run_code", "code": "kept = 7"})
		depth := invocation.MaxInputDepth + 1
		deep := `{"op":"run_code","code":"1","x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
		a := admin.post(ctx, t, invokePath(ns, "second"), []byte(deep), nil)
		require.Equal(t, 400, a.code, "%s", a.body)
		assert.Contains(t, a.status(t).Message, strconv.Itoa(invocation.MaxInputDepth))
		out, _ := call(t, "second", map[string]any{"op": "run_code", "code": "kept"})
		assert.Equal(t, 7.0, out["result"])
	})
}

// pyList is strs as a Python list literal (JSON's is one).
func pyList(t *testing.T, strs ...string) string {
	b, err := json.Marshal(strs)
	require.NoError(t, err)
	return string(b)
}
