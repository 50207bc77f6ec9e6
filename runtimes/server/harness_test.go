package server_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/python"
	"kruntimes.io/kruntimes/runtimes/server"
)

// harness is a real Runtime Server on a real unix socket with a real client.
type harness struct {
	runtime   runtimev1.RuntimeClient
	functions runtimev1.FunctionRuntimeClient
	// workDir is where fixtures are written; functions and tasks run there.
	workDir string
}

func newHarness(t testing.TB, lang string) *harness {
	t.Helper()
	return newHarnessWithClock(t, lang, nil)
}

// newHarnessWithClock is newHarness with the server on clk; nil is the
// system clock.
func newHarnessWithClock(t testing.TB, lang string, clk clock.WithDelayedExecution) *harness {
	t.Helper()
	return newHarnessWith(t, lang, clk, 64<<10)
}

// newHarnessWith is newHarnessWithClock keeping runLogMaxBytes of each
// task's log.
func newHarnessWith(t testing.TB, lang string, clk clock.WithDelayedExecution, runLogMaxBytes int, configure ...func(*server.Options)) *harness {
	t.Helper()
	dir := t.TempDir()
	workDir := filepath.Join(dir, "work")
	require.NoError(t, os.Mkdir(workDir, 0o755))

	var l language.Language
	var loader language.FunctionLoader
	switch lang {
	case "bash":
		b := bash.New("", dir)
		l, loader = b, b
	case "python":
		p := python.New("")
		l, loader = p, p
	default:
		t.Fatalf("unknown language %q", lang)
	}
	opts := server.Options{
		Language:            l,
		Functions:           loader,
		StateDir:            filepath.Join(dir, "state"),
		BaseEnv:             []string{"PATH=" + os.Getenv("PATH")},
		DefaultDrainTimeout: 10 * time.Second,
		RunLogMaxBytes:      runLogMaxBytes,
		Clock:               clk,
	}
	for _, c := range configure {
		c(&opts)
	}
	srv, err := server.New(opts)
	require.NoError(t, err)

	// gRPC reads its target as a URL: a '#' of a subtest's directory
	// (a fuzz seed's) would end the path, so the socket has one of its own.
	sockDir, err := os.MkdirTemp("", "rt")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "rt.sock")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	gs := grpc.NewServer(transport.ServerOptions()...)
	srv.Register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+sock, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-served
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	return &harness{
		runtime:   runtimev1.NewRuntimeClient(conn),
		functions: runtimev1.NewFunctionRuntimeClient(conn),
		workDir:   workDir,
	}
}

func (h *harness) writeFile(t testing.TB, name, content string) {
	t.Helper()
	path := filepath.Join(h.workDir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (h *harness) register(t testing.TB, uid string, attempt int64, digest, handler string) *runtimev1.RegistrationStatus {
	t.Helper()
	st, err := h.functions.RegisterFunction(testContext(t), &runtimev1.RegisterFunctionRequest{
		RunUid: uid, RegistrationAttempt: attempt, RegistrationDigest: digest, WorkingDir: h.workDir, Handler: handler,
	})
	require.NoError(t, err)
	return st
}

func (h *harness) registerReady(t testing.TB, uid, handler string) *runtimev1.RegistrationStatus {
	t.Helper()
	st := h.register(t, uid, 1, "d1", handler)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, st.GetState(), "fatal error: %s", st.GetFatalError())
	return st
}

func (h *harness) invoke(ctx context.Context, reg *runtimev1.RegistrationStatus, input string, timeout time.Duration) (*runtimev1.InvokeFunctionResponse, error) {
	return h.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{
		RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), InvocationId: "inv-" + reg.GetRunUid(),
		Input: []byte(input), TimeoutMillis: timeout.Milliseconds(),
	})
}

// waitForStatus polls FunctionStatus until cond holds.
func (h *harness) waitForStatus(t testing.TB, reg *runtimev1.RegistrationStatus, cond func(*runtimev1.RegistrationStatus) bool) *runtimev1.RegistrationStatus {
	t.Helper()
	var last *runtimev1.RegistrationStatus
	err := wait.PollUntilContextTimeout(testContext(t), 2*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		st, err := h.functions.FunctionStatus(ctx, &runtimev1.FunctionStatusRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId()})
		if err != nil {
			return false, err
		}
		last = st
		return cond(st), nil
	})
	require.NoError(t, err, "last status: %v", last)
	return last
}

func requireCode(t testing.TB, want codes.Code, err error) {
	t.Helper()
	require.Equal(t, want.String(), status.Code(err).String(), "error: %v", err)
}
