package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestSandboxCommandStreamsThroughAggregation: a sandbox's background
// command writes its first line and then waits for a file; a follow of
// runs/log?command= through kube-apiserver's aggregation, with the Go
// client as kubectl would, gets that line while the command still runs
// (kube-apiserver streams it, it does not buffer), then the rest and its
// end; kubectl reads the command's log whole afterwards, and a command the
// sandbox never started is 404.
func TestSandboxCommandStreamsThroughAggregation(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sandbox-commands")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	runs := client.KruntimesV1alpha1().Runs(ns)
	createRun(ctx, t, client, ns, functionRun("box", "python", "", "", "kruntimes.sandbox"))
	waitForRun(ctx, t, client, ns, "box", functionTimeout, "Ready", inPhase(lifecycle.Ready))

	admin := newInvoker(t, f.AdminConfig)
	call := func(req map[string]any) map[string]any {
		t.Helper()
		body, err := json.Marshal(req)
		require.NoError(t, err)
		r := admin.post(ctx, t, invokePath(ns, "box"), body, nil).result(t)
		require.Nil(t, r.Error, "%v", req)
		var out map[string]any
		require.NoError(t, json.Unmarshal(r.Output.Raw, &out), "%s", r.Output.Raw)
		return out
	}

	started := call(map[string]any{"op": "start_command", "cmd": "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second; echo oops >&2; exit 3"})
	id, _ := started["id"].(string)
	require.NotEmpty(t, id, "start_command answers the command's id: %v", started)

	stream, err := runs.GetLogs("box", &v1alpha1.RunLogOptions{Follow: true, Command: id}).Stream(ctx)
	require.NoError(t, err)
	defer stream.Close()
	lines := readArrivedLines(stream)
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the follow ended early")
			return l.text
		case <-ctx.Done():
			t.Fatal("no line arrived")
			return ""
		}
	}
	assert.Equal(t, "first\n", next())
	// The command cannot go on before the file exists: the line came while
	// it ran.
	status := call(map[string]any{"op": "wait_command", "id": id, "timeout": 0.1})
	assert.Equal(t, true, status["running"], "%v", status)

	call(map[string]any{"op": "write_file", "path": "go", "data_b64": ""})
	assert.Equal(t, "second\n", next())
	assert.Equal(t, "oops\n", next())
	select {
	case l, ok := <-lines:
		require.False(t, ok, "the follow goes on after the command ended: %q", l.text)
	case <-ctx.Done():
		t.Fatal("the follow did not end with the command")
	}
	status = call(map[string]any{"op": "wait_command", "id": id, "timeout": 30})
	assert.Equal(t, false, status["running"], "%v", status)
	assert.EqualValues(t, 3, status["exit_code"], "%v", status)

	logPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/box/log?command=" + id
	out, err := f.Kubectl(ctx, "get", "--raw", logPath+"&stream=Stdout")
	require.NoError(t, err, out)
	assert.Equal(t, "first\nsecond\n", out)

	// Stream, not DoRaw: client-go decodes an error's Status only there.
	_, err = runs.GetLogs("box", &v1alpha1.RunLogOptions{Command: "77"}).Stream(ctx)
	require.True(t, apierrors.IsNotFound(err), "a command the sandbox never started: %v", err)
	assert.Contains(t, err.Error(), `Run box has no command "77"`, "kruntimes-apiserver's message reaches the client through aggregation")
	_, err = runs.GetLogs("box", &v1alpha1.RunLogOptions{Command: "../x"}).DoRaw(ctx)
	require.True(t, apierrors.IsBadRequest(err) || apierrors.IsInvalid(err), "an id that is not one: %v", err)

	// krt logs --command reads the same log, the real binary through
	// aggregation.
	krt, err := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+f.Kubeconfig, "-n", ns, "logs", "box", "--command", id).Output()
	require.NoError(t, err, "%s", krt)
	assert.Equal(t, "first\nsecond\noops\n", string(krt))

	// krt exec runs a command as kubectl exec would: its streams to krt's,
	// its exit code as krt's.
	exe := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+f.Kubeconfig, "-n", ns, "exec", "box", "--env", "WHO=krt", "--",
		"sh", "-c", `echo "hello $WHO"; echo careful >&2; exit 7`)
	var stdout, stderr strings.Builder
	exe.Stdout, exe.Stderr = &stdout, &stderr
	err = exe.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr: %s", stderr.String())
	assert.Equal(t, 7, exit.ExitCode(), "stderr: %s", stderr.String())
	assert.Equal(t, "hello krt\n", stdout.String())
	assert.Equal(t, "careful\n", stderr.String())
}
