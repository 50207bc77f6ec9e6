package integration

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
)

// oneRegistration admits the one registration of a function Run it was
// given, as runtimed's function controller does.
type oneRegistration struct {
	uid     types.UID
	attempt int32
	id      string
}

func (g oneRegistration) Admit(uid types.UID, attempt int32, podUID types.UID) (string, error) {
	if uid != g.uid || attempt != g.attempt || podUID != "uid-a" {
		return "", errors.New("not the live registration of this Pod")
	}
	return g.id, nil
}

// TestRunLogFollowsAFunction follows the Ready function Run fn through
// kruntimes-apiserver's runs/log?follow=true, mutual TLS and runtimed's
// real FollowLog server, to a real bash Runtime Server: what each
// invocation wrote arrives with its invocation ID on every line, and the
// follow ends when the Run does.
func TestRunLogFollowsAFunction(t *testing.T) {
	s := startInvokeServerWith(t, nil)
	ctx := t.Context()
	client, err := versioned.NewForConfig(s.config)
	require.NoError(t, err)
	runs := client.KruntimesV1alpha1().Runs(namespace)
	run, err := runs.Get(ctx, "fn", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, lifecycle.Ready, run.Status.Phase)

	dir := t.TempDir()
	b := bash.New("", dir)
	rs, err := server.New(server.Options{Language: b, Functions: b, StateDir: filepath.Join(dir, "state"), BaseEnv: []string{"PATH=" + os.Getenv("PATH")}})
	require.NoError(t, err)
	sock := filepath.Join(dir, "runtime.sock")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	gs := grpc.NewServer(transport.ServerOptions()...)
	rs.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rs.Close(closeCtx)
	})
	conn, err := grpc.NewClient("unix://"+sock, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	functions := runtimev1.NewFunctionRuntimeClient(conn)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.sh"), []byte("printf 'hello from %s\\npartial' \"$KRUNTIMES_INVOCATION_ID\" >&2\necho '{}'\n"), 0o644))
	reg, err := functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{
		RunUid: string(run.UID), RegistrationAttempt: int64(run.Status.Attempt), RegistrationDigest: "d", WorkingDir: dir, Handler: "hello.sh",
	})
	require.NoError(t, err)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, reg.GetState(), reg.GetFatalError())
	gate := oneRegistration{uid: run.UID, attempt: run.Status.Attempt, id: reg.GetRegistrationId()}
	var logs runtimedv1.RuntimedServer = invoke.NewServer(gate, functions, "bash").FollowTasks(t.Context(), runtimev1.NewRuntimeClient(conn), "uid-a")
	s.runtimed.logs.Store(&logs)
	invokeFn := func(id string) {
		t.Helper()
		_, err := functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: string(run.UID), RegistrationId: reg.GetRegistrationId(), InvocationId: id, Input: []byte(`{}`)})
		require.NoError(t, err)
	}

	httpc := httpClient(t, s.config, false, true)
	logURL := s.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/fn/log?"
	a := do(httpc, http.MethodGet, logURL, nil)
	assert.Equal(t, http.StatusBadRequest, a.code, "nothing of a function's log is kept: %s", a.body)
	a = do(httpc, http.MethodGet, logURL+"follow=true&attempt=1", nil)
	assert.Equal(t, http.StatusBadRequest, a.code, "a function's follow follows every attempt: %s", a.body)

	invokeFn("before")
	resp, err := httpc.Get(logURL + "follow=true")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	tailed, err := httpc.Get(logURL + "follow=true&tailLines=0")
	require.NoError(t, err)
	defer tailed.Body.Close()
	lines := func(body io.Reader) <-chan string {
		out := make(chan string, 16)
		go func() {
			defer close(out)
			r := bufio.NewReader(body)
			for {
				line, err := r.ReadString('\n')
				if line != "" {
					out <- line
				}
				if err != nil {
					return
				}
			}
		}()
		return out
	}
	next := func(lines <-chan string) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no line within 30s")
			return ""
		}
	}
	all, fresh := lines(resp.Body), lines(tailed.Body)
	assert.Equal(t, "[invocation/before] hello from before\n", next(all), "what is kept of the invocations before the follow comes first")
	invokeFn("inv-2")
	assert.Equal(t, "[invocation/before] partial\n", next(all), "a line an invocation left unended is ended before the next's")
	assert.Equal(t, "[invocation/inv-2] hello from inv-2\n", next(all))
	assert.Equal(t, "[invocation/inv-2] hello from inv-2\n", next(fresh), "tailLines=0: only what comes after the follow")

	// The Run ends, and its runtimed unregisters it: so does the follow.
	_, err = functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: string(run.UID), RegistrationId: reg.GetRegistrationId()})
	require.NoError(t, err)
	run, err = runs.Get(ctx, "fn", metav1.GetOptions{})
	require.NoError(t, err)
	run.Status.Phase = lifecycle.Cancelled
	now := metav1.NowMicro()
	run.Status.CompletionTime = &now
	run.Status.Conditions = nil
	_, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "[invocation/inv-2] partial", next(all), "the follow ends with the Run, after its last bytes")
	select {
	case _, open := <-all:
		assert.False(t, open)
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end with the Run")
	}
}
