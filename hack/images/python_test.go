package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
)

// pythonImageEnv names the OCI layout of the image TestPythonImage checks.
const pythonImageEnv = "KRUNTIMES_IMAGE_PYTHON"

// TestPythonImage checks the kruntimes-runtime image on a Python base that
// `make image-python` builds (a Debian root file system from mmdebstrap,
// python3 from Debian): from its own root file system, as nonroot, the
// Runtime Server runs a Python task and serves a Python function, and runs
// bash tasks too, each program under the kruntimes-reaper beside it.
func TestPythonImage(t *testing.T) {
	layoutDir := os.Getenv(pythonImageEnv)
	if layoutDir == "" {
		t.Skipf("opt-in: `make image-python` builds a Debian Python base (about 2.5 min, from a Debian mirror) and runs this test with %s set", pythonImageEnv)
	}
	requireRoot(t)
	img, err := imageFromLayout(layoutDir, runtime.GOARCH)
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "65532", cfg.Config.User)
	assert.Equal(t, []string{"/usr/local/bin/kruntimes-runtime"}, cfg.Config.Entrypoint)
	assert.NotEmpty(t, cfg.Config.Labels["org.opencontainers.image.revision"])

	r := unpack(t, img, filepath.Join(t.TempDir(), "rootfs"))
	r.prepareRun(t)
	code, out := r.run(t, "/usr/bin/python3", "-c", "import os, ssl; print(os.getuid(), os.getgid())")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "65532 65532\n", out, "python3 from the base runs as nonroot")

	t.Run("python task", func(t *testing.T) {
		conn := r.startRuntimeServer(t, "python")
		status := executeTask(t, runtimev1.NewRuntimeClient(conn), "import sys\nprint(6 * 7)\nprint(sys.version_info[0])\n")
		assert.Equal(t, "42\n3\n", string(status.Stdout))
	})

	t.Run("python function", func(t *testing.T) {
		fnDir := filepath.Join(r.Dir, "tmp", "fn")
		require.NoError(t, os.MkdirAll(fnDir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(fnDir, "handler.py"), []byte("def handle(event, context):\n    return {\"doubled\": event[\"x\"] * 2}\n"), 0o644))
		conn := r.startRuntimeServer(t, "python")
		functions := runtimev1.NewFunctionRuntimeClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		reg, err := functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{
			RunUid: "run-1", RegistrationAttempt: 1, RegistrationDigest: "digest-1", WorkingDir: "/tmp/fn", Handler: "handler.handle",
		})
		require.NoError(t, err)
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			st, err := functions.FunctionStatus(ctx, &runtimev1.FunctionStatusRequest{RunUid: "run-1", RegistrationId: reg.RegistrationId})
			if err != nil {
				return false, err
			}
			if st.State == runtimev1.FunctionState_FUNCTION_STATE_FAILED {
				return false, fmt.Errorf("registration failed: %s", st.FatalError)
			}
			return st.State == runtimev1.FunctionState_FUNCTION_STATE_READY, nil
		})
		require.NoError(t, err)
		resp, err := functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: "run-1", RegistrationId: reg.RegistrationId, InvocationId: "invocation-1", Input: []byte(`{"x": 21}`)})
		require.NoError(t, err)
		require.Nil(t, resp.Error, "the handler ran: %v", resp.Error)
		assert.JSONEq(t, `{"doubled": 42}`, string(resp.Output))
	})

	t.Run("bash task", func(t *testing.T) {
		conn := r.startRuntimeServer(t, "bash")
		status := executeTask(t, runtimev1.NewRuntimeClient(conn), "echo $((6 * 7)) $(id -u) $(head -c 24 /proc/$PPID/cmdline) $(readlink /proc/$PPID/exe 2>/dev/null || echo non-dumpable)")
		assert.Equal(t, "42 65532 kruntimes-process-reaper non-dumpable\n", string(status.Stdout),
			"the program runs as nonroot under the reaper, which its user cannot inspect (nor ptrace)")
	})
}

// startRuntimeServer starts kruntimes-runtime for language in the root, on
// a socket in its /tmp, and returns a connection to it.
func (r *imageRoot) startRuntimeServer(t *testing.T, language string) *grpc.ClientConn {
	t.Helper()
	socket := "/tmp/" + language + "-" + strings.ReplaceAll(t.Name(), "/", "-") + ".sock"
	ctx, cancel := context.WithCancel(context.Background())
	cmd := r.command(ctx, r.Config.Entrypoint[0], "--language="+language, "--listen=unix://"+socket, "--spare-workers=1")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "runtime.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("kruntimes-runtime --language=%s:\n%s", language, log)
		}
	})
	// Dial once the socket exists: gRPC logs every refused attempt.
	hostSocket := filepath.Join(r.Dir, socket)
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("kruntimes-runtime exited: %v", err)
		default:
		}
		_, err := os.Stat(hostSocket)
		return err == nil, nil
	})
	require.NoError(t, err, "kruntimes-runtime --language=%s made no socket", language)
	conn, err := grpc.NewClient("unix://"+hostSocket,
		append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("kruntimes-runtime exited: %v", err)
		default:
		}
		health, err := runtimev1.NewRuntimeClient(conn).Health(ctx, &runtimev1.HealthRequest{})
		if err != nil {
			return false, nil
		}
		return health.Serving && health.Language == language, nil
	})
	require.NoError(t, err, "kruntimes-runtime --language=%s did not serve", language)
	return conn
}

// executeTask runs script as a task and returns its final status; it must
// succeed.
func executeTask(t *testing.T, client runtimev1.RuntimeClient, script string) *runtimev1.TaskStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.Execute(ctx, &runtimev1.ExecuteRequest{
		TaskId: "task-1", Program: &runtimev1.ExecuteRequest_Script{Script: script}, WorkingDir: "/tmp", TimeoutMillis: 30_000,
	})
	require.NoError(t, err)
	status, err := client.Wait(ctx, &runtimev1.WaitRequest{TaskId: "task-1", IncludeLogs: true})
	require.NoError(t, err)
	require.Equal(t, runtimev1.TaskState_TASK_STATE_SUCCEEDED, status.State, "%s: %s\nstderr: %s", status.Reason, status.Message, status.Stderr)
	return status
}
