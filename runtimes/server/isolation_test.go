package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/server"
)

// implantHandler plants what would run in the next tenant's interpreter if
// it could: a json.py, a sitecustomize and a usercustomize in every
// directory a tenant of this Pod can name (its HOME, its TMPDIR, its user
// site-packages, its workspace, the workspace root and the state directory
// above its HOME), each writing a marker when imported; and a daemon in a
// session of its own. It writes only inside $ALLOWED, the test's own
// directory, and refuses otherwise.
const implantHandler = `import os, site, subprocess
def handle(event, context):
    allowed = os.environ["ALLOWED"]
    home, tmp = os.environ.get("HOME", ""), os.environ.get("TMPDIR", "")
    targets = [home, tmp, site.getusersitepackages(), os.getcwd(), os.path.dirname(os.getcwd()),
               os.path.dirname(os.path.dirname(home))]
    for d in targets:
        if not os.path.realpath(d).startswith(allowed + os.sep):
            return {"refused": d}
    for d in targets:
        os.makedirs(d, exist_ok=True)
        for name in ("json", "sitecustomize", "usercustomize"):
            with open(os.path.join(d, name + ".py"), "w") as f:
                f.write("open(%r, 'w').close()\n" % os.path.join(allowed, "imported-" + name))
    daemon = subprocess.Popen(["sleep", "300"], start_new_session=True)
    return {"home": home, "tmp": tmp, "daemon": daemon.pid}
`

// nextHandler reports what the next tenant sees of the first one.
const nextHandler = `import json, os, sys
def handle(event, context):
    return {"home": os.environ["HOME"], "json": json.__file__,
            "custom": sorted(m for m in ("sitecustomize", "usercustomize") if m in sys.modules and
                             getattr(sys.modules[m], "__file__", "").startswith(os.environ["ALLOWED"])),
            "markers": sorted(n for n in os.listdir(os.environ["ALLOWED"]) if n.startswith("imported-"))}
`

// TestATenantLeavesNothingForTheNext: a Python function's implant in every
// place it can write within its Pod's directories, and its daemon, reach
// neither the next registration's interpreter nor outlive the first
// registration; its HOME and TMPDIR are its own and go with it.
func TestATenantLeavesNothingForTheNext(t *testing.T) {
	h := newHarness(t, "python")
	allowed := filepath.Dir(h.workDir)
	env := []*runtimev1.EnvVar{{Name: "ALLOWED", Value: allowed}}
	register := func(uid, source string) *runtimev1.RegistrationStatus {
		dir := filepath.Join(h.workDir, uid)
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tenant.py"), []byte(source), 0o644))
		st, err := h.functions.RegisterFunction(testContext(t), &runtimev1.RegisterFunctionRequest{
			RunUid: uid, RegistrationAttempt: 1, RegistrationDigest: "d", WorkingDir: dir, Handler: "tenant.handle", Env: env,
		})
		require.NoError(t, err)
		require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, st.GetState(), "fatal error: %s", st.GetFatalError())
		return st
	}
	call := func(reg *runtimev1.RegistrationStatus, into any) {
		resp, err := h.invoke(testContext(t), reg, `{}`, 0)
		require.NoError(t, err)
		require.Nil(t, resp.GetError(), "handler error: %v", resp.GetError())
		require.NoError(t, json.Unmarshal(resp.GetOutput(), into), "%s", resp.GetOutput())
	}

	first := register("first", implantHandler)
	var planted struct {
		Refused string `json:"refused"`
		Home    string `json:"home"`
		Tmp     string `json:"tmp"`
		Daemon  int    `json:"daemon"`
	}
	call(first, &planted)
	require.Empty(t, planted.Refused, "HOME and TMPDIR must be the registration's own, inside the Runtime Server's state directory")
	_, err := h.functions.UnregisterFunction(testContext(t), &runtimev1.UnregisterFunctionRequest{RunUid: "first", RegistrationId: first.GetRegistrationId()})
	require.NoError(t, err)
	assert.NoDirExists(t, planted.Home, "HOME goes with the registration")
	assert.NoDirExists(t, planted.Tmp, "TMPDIR goes with the registration")
	assert.False(t, processAlive(planted.Daemon), "the daemon of the first registration outlived it")

	// The first one's workspace is runtimed's to remove, and it stays here:
	// the implant in it, and in the workspace root, must not be imported.
	second := register("second", nextHandler)
	var seen struct {
		Home    string   `json:"home"`
		JSON    string   `json:"json"`
		Custom  []string `json:"custom"`
		Markers []string `json:"markers"`
	}
	call(second, &seen)
	assert.NotEqual(t, planted.Home, seen.Home)
	assert.NotContains(t, seen.JSON, allowed, "the next tenant imported the first one's json.py")
	assert.Empty(t, seen.Custom, "the next tenant imported the first one's site or user customization")
	assert.Empty(t, seen.Markers, "an implant of the first tenant ran")
}

// processAlive reports whether pid is a living process (not a zombie).
func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	for i := len(s) - 1; i > 0; i-- {
		if s[i] == ')' {
			return len(s) > i+2 && s[i+2] != 'Z'
		}
	}
	return false
}

// TestIdleServerSweepsWhatRunsLeftInSharedDirectories: with a Sweeper, what
// a function wrote to a shared directory stays while it is registered and
// is gone once the server is idle, as is what a task wrote once it ended;
// what the directory held at start stays.
func TestIdleServerSweepsWhatRunsLeftInSharedDirectories(t *testing.T) {
	shared := t.TempDir()
	image := filepath.Join(shared, ".profile")
	require.NoError(t, os.WriteFile(image, []byte("# the image's\n"), 0o644))
	h := newHarnessWith(t, "python", nil, 64<<10, func(o *server.Options) {
		o.Sweeper = server.NewSweeper([]string{shared}, nil)
	})
	env := []*runtimev1.EnvVar{{Name: "SHARED", Value: shared}}
	h.writeFile(t, "writer.py", "import os\ndef handle(event, context):\n    os.makedirs(os.path.join(os.environ['SHARED'], event['dir']), exist_ok=True)\n    open(os.path.join(os.environ['SHARED'], event['dir'], 'x.py'), 'w').close()\n")
	st, err := h.functions.RegisterFunction(testContext(t), &runtimev1.RegisterFunctionRequest{
		RunUid: "writer", RegistrationAttempt: 1, RegistrationDigest: "d", WorkingDir: h.workDir, Handler: "writer.handle", Env: env,
	})
	require.NoError(t, err)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, st.GetState(), "fatal error: %s", st.GetFatalError())
	resp, err := h.invoke(testContext(t), st, `{"dir":"from-function"}`, 0)
	require.NoError(t, err)
	require.Nil(t, resp.GetError())

	task, err := h.runtime.Execute(testContext(t), &runtimev1.ExecuteRequest{TaskId: "t", WorkingDir: h.workDir, Env: env,
		Program: &runtimev1.ExecuteRequest_Script{Script: "import os\nopen(os.path.join(os.environ['SHARED'], 'from-task'), 'w').close()\n"}})
	require.NoError(t, err)
	done, err := h.runtime.Wait(testContext(t), &runtimev1.WaitRequest{TaskId: task.GetTaskId(), IncludeLogs: true})
	require.NoError(t, err)
	require.Equal(t, runtimev1.TaskState_TASK_STATE_SUCCEEDED, done.GetState(), "%s", done.GetStderr())
	assert.DirExists(t, filepath.Join(shared, "from-function"), "a registered function's files stay")
	assert.FileExists(t, filepath.Join(shared, "from-task"), "not idle yet: a function is registered")

	_, err = h.functions.UnregisterFunction(testContext(t), &runtimev1.UnregisterFunctionRequest{RunUid: "writer", RegistrationId: st.GetRegistrationId()})
	require.NoError(t, err)
	assert.NoDirExists(t, filepath.Join(shared, "from-function"))
	assert.NoFileExists(t, filepath.Join(shared, "from-task"))
	assert.FileExists(t, image, "what the directory held at start stays")
}
