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
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
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
// functionLogServer is startInvokeServerWith's server whose Run fn is
// registered on a real bash Runtime Server behind runtimed's real FollowLog.
type functionLogServer struct {
	*invokeServer
	runs      kruntimesv1alpha1.RunInterface
	run       *v1alpha1.Run
	functions runtimev1.FunctionRuntimeClient
	reg       *runtimev1.RegistrationStatus
	// follows counts the FollowFunctionLog streams runtimed opened on the
	// Runtime Server.
	follows *countingFunctionFollows
}

// countingFunctionFollows counts the FollowFunctionLog streams opened on
// the Runtime Server.
type countingFunctionFollows struct {
	runtimev1.FunctionRuntimeClient
	opened atomic.Int32
}

func (c *countingFunctionFollows) FollowFunctionLog(ctx context.Context, in *runtimev1.FollowFunctionLogRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[runtimev1.FollowLogResponse], error) {
	c.opened.Add(1)
	return c.FunctionRuntimeClient.FollowFunctionLog(ctx, in, opts...)
}

func startFunctionLogServer(t *testing.T) *functionLogServer {
	t.Helper()
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
	follows := &countingFunctionFollows{FunctionRuntimeClient: functions}
	var logs runtimedv1.RuntimedServer = invoke.NewServer(gate, follows, "bash").FollowTasks(t.Context(), runtimev1.NewRuntimeClient(conn), "uid-a")
	s.runtimed.logs.Store(&logs)
	return &functionLogServer{invokeServer: s, runs: runs, run: run, functions: functions, reg: reg, follows: follows}
}

func TestRunLogFollowsAFunction(t *testing.T) {
	fs := startFunctionLogServer(t)
	s, runs, run, functions, reg, ctx := fs.invokeServer, fs.runs, fs.run, fs.functions, fs.reg, t.Context()
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

// TestIdleFunctionFollowersCost opens 200 follows of one Ready function
// through kruntimes-apiserver, runtimed and the Runtime Server, all in this
// process with their HTTP clients, and reports what each costs while idle.
func TestIdleFunctionFollowersCost(t *testing.T) {
	fs := startFunctionLogServer(t)
	httpc := httpClient(t, fs.config, false, true)
	logURL := fs.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/fn/log?follow=true"
	_, err := fs.functions.InvokeFunction(t.Context(), &runtimev1.InvokeFunctionRequest{RunUid: string(fs.run.UID), RegistrationId: fs.reg.GetRegistrationId(), InvocationId: "warm", Input: []byte(`{}`)})
	require.NoError(t, err)
	measure := func() (uint64, int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc, runtime.NumGoroutine()
	}
	const n = 200
	open := func() *http.Response {
		resp, err := httpc.Get(logURL)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "[invocation/warm] hello from warm\n", line, "each follow is live before it is counted")
		return resp
	}
	warm := open() // connections, TLS and caches warm before measuring
	defer warm.Body.Close()
	heap0, g0 := measure()
	opened0 := fs.follows.opened.Load()
	bodies := make([]*http.Response, 0, n)
	for range n {
		bodies = append(bodies, open())
	}
	heap1, g1 := measure()
	perFollower := float64(int64(heap1)-int64(heap0)) / 1024 / n
	t.Logf("%d idle function followers: %.1f KiB of heap and %.1f goroutines per follower, %d streams opened on the Runtime Server (apiserver + runtimed + Runtime Server + HTTP/2 client, one process)",
		n, perFollower, float64(g1-g0)/n, fs.follows.opened.Load()-opened0)
	assert.Less(t, perFollower, 256.0, "an idle follower costs a bounded amount, not a log's worth")
	assert.Equal(t, opened0, fs.follows.opened.Load(), "the follows share the first one's stream on the Runtime Server")
	for _, b := range bodies {
		_ = b.Body.Close()
	}
}

// TestFunctionFollowersShareOneUpstream: ten follows of one Ready function
// through kruntimes-apiserver get identical bytes, every line marked with
// its invocation ID, from what the registration kept before them to the
// Run's end, and runtimed opens one stream on the Runtime Server for all of
// them.
func TestFunctionFollowersShareOneUpstream(t *testing.T) {
	fs := startFunctionLogServer(t)
	ctx := t.Context()
	invokeFn := func(id string) {
		t.Helper()
		_, err := fs.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: string(fs.run.UID), RegistrationId: fs.reg.GetRegistrationId(), InvocationId: id, Input: []byte(`{}`)})
		require.NoError(t, err)
	}
	httpc := httpClient(t, fs.config, false, true)
	logURL := fs.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/fn/log?follow=true"

	invokeFn("before")
	const n = 10
	bodies := make([]*bufio.Reader, n)
	got := make([]string, n)
	for i := range bodies {
		resp, err := httpc.Get(logURL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		bodies[i] = bufio.NewReader(resp.Body)
		line, err := bodies[i].ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "[invocation/before] hello from before\n", line, "follow %d starts with what the registration keeps", i)
		got[i] = line
	}
	for _, id := range []string{"inv-1", "inv-2", "inv-3"} {
		invokeFn(id)
	}
	// Every follow reads the last invocation's line: all of them were live
	// throughout.
	for i, body := range bodies {
		for !strings.HasSuffix(got[i], "[invocation/inv-3] hello from inv-3\n") {
			line, err := body.ReadString('\n')
			require.NoError(t, err, "follow %d: %q", i, got[i])
			got[i] += line
		}
	}
	// A follow that joins now reads what the shared stream holds, and
	// tailLines cuts it where the log stands now.
	tailed, err := httpc.Get(logURL + "&tailLines=2")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tailed.Body.Close() })
	require.Equal(t, http.StatusOK, tailed.StatusCode)
	line, err := bufio.NewReader(tailed.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "[invocation/inv-3] hello from inv-3\n", line, "tailLines=2: the last two lines written")
	assert.Equal(t, int32(1), fs.follows.opened.Load(), "runtimed opened one stream on the Runtime Server for %d follows", n+1)

	// The Run ends, and its runtimed unregisters it: so do the follows.
	run, err := fs.runs.Get(ctx, "fn", metav1.GetOptions{})
	require.NoError(t, err)
	run.Status.Phase = lifecycle.Cancelled
	now := metav1.NowMicro()
	run.Status.CompletionTime = &now
	run.Status.Conditions = nil
	_, err = fs.runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = fs.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: string(fs.run.UID), RegistrationId: fs.reg.GetRegistrationId()})
	require.NoError(t, err)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Go(func() {
			rest, err := io.ReadAll(body)
			got[i], errs[i] = got[i]+string(rest), err
		})
	}
	wg.Wait()
	var want strings.Builder
	for i, id := range []string{"before", "inv-1", "inv-2", "inv-3"} {
		if i > 0 {
			want.WriteString("\n")
		}
		want.WriteString("[invocation/" + id + "] hello from " + id + "\n[invocation/" + id + "] partial")
	}
	for i := range got {
		require.NoError(t, errs[i], "follow %d", i)
		assert.Equal(t, want.String(), got[i], "follow %d has every invocation's lines, marked", i)
	}
}
