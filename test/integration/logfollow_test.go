package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesclient "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimed/runstatus"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
	"kruntimes.io/kruntimes/test/bench/cputime"
)

// taskLogServer is kruntimes-apiserver with a request timeout of 2 s
// whose invoke router reaches pod-a's real runtimed FollowLog server over
// mutual TLS, in front of a real bash Runtime Server on a unix socket.
type taskLogServer struct {
	*invokeServer
	dir   string
	tasks runtimev1.RuntimeClient
	// follows counts the FollowLog streams runtimed opened on the Runtime
	// Server.
	follows *countingFollows
	runs    kruntimesclient.RunInterface
	httpc   *http.Client
}

func (ts *taskLogServer) logURL(name, query string) string {
	return ts.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/" + name + "/log?" + query
}

func startTaskLogServer(t testing.TB) *taskLogServer {
	s := startInvokeServerWith(t, func(c *apiserver.Config) { c.GenericConfig.RequestTimeout = 2 * time.Second })

	// The Runtime Server of pod-a, behind its runtimed.
	dir := t.TempDir()
	rs, err := server.New(server.Options{Language: bash.New("", dir), StateDir: filepath.Join(dir, "state"), BaseEnv: []string{"PATH=" + os.Getenv("PATH")}})
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
	tasks := runtimev1.NewRuntimeClient(conn)
	follows := &countingFollows{RuntimeClient: tasks}
	var logs runtimedv1.RuntimedServer = invoke.NewServer(nil, nil, "bash").FollowTasks(t.Context(), follows, "uid-a")
	s.runtimed.logs.Store(&logs)

	client, err := versioned.NewForConfig(s.config)
	require.NoError(t, err)
	return &taskLogServer{
		invokeServer: s, dir: dir, tasks: tasks, follows: follows,
		runs:  client.KruntimesV1alpha1().Runs(namespace),
		httpc: httpClient(t, s.config, false, true),
	}
}

// countingFollows counts the FollowLog streams opened on the Runtime
// Server.
type countingFollows struct {
	runtimev1.RuntimeClient
	opened atomic.Int32
}

func (c *countingFollows) FollowLog(ctx context.Context, in *runtimev1.FollowLogRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[runtimev1.FollowLogResponse], error) {
	c.opened.Add(1)
	return c.RuntimeClient.FollowLog(ctx, in, opts...)
}

// TestRunLogFollowsARunningTask follows a task of a real bash Runtime
// Server through kruntimes-apiserver's runs/log?follow=true, the invoke
// router's Pod and mutual TLS to runtimed's real FollowLog server. The
// server's request timeout is 2 s and the task runs 3 s: a follow is
// long-running.
func TestRunLogFollowsARunningTask(t *testing.T) {
	ts := startTaskLogServer(t)
	ctx, dir, tasks, runs, httpc, logURL := t.Context(), ts.dir, ts.tasks, ts.runs, ts.httpc, ts.logURL

	t.Run("a follower gets each line before the next is printed, from before the task started to its end", func(t *testing.T) {
		run, err := runs.Create(ctx, taskRun("numbered"), metav1.CreateOptions{})
		require.NoError(t, err)

		// The follow starts while the Run is Pending: it waits.
		resp, err := httpc.Get(logURL("numbered", "follow=true"))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		lines := make(chan string, 64)
		arrived := make(chan time.Time, 64)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				if line != "" {
					arrived <- time.Now()
					lines <- line
				}
				if err != nil {
					return
				}
			}
		}()

		for _, step := range steps(scheduled, running) {
			step(&run.Status)
			run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		const n = 15
		id := runstatus.ExecutionID(run.UID, 1)
		_, err = tasks.Execute(ctx, &runtimev1.ExecuteRequest{
			TaskId:     id,
			Program:    &runtimev1.ExecuteRequest_Script{Script: fmt.Sprintf(`for i in $(seq 1 %d); do echo "line $i $(date +%%s%%N)"; sleep 0.2; done; printf 'bytes \377\000\033[31m\n' >&2`, n)},
			WorkingDir: dir,
		})
		require.NoError(t, err)

		var got []string
		var at []time.Time
		for len(got) < n+1 {
			select {
			case l := <-lines:
				got = append(got, l)
				at = append(at, <-arrived)
			case <-time.After(30 * time.Second):
				t.Fatalf("only %d lines arrived: %q", len(got), got)
			}
		}
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the follow did not end after the task's last byte")
		}
		var latencies []time.Duration
		for i := 0; i < n; i++ {
			fields := strings.Fields(got[i])
			require.Len(t, fields, 3, got[i])
			assert.Equal(t, strconv.Itoa(i+1), fields[1])
			ns, err := strconv.ParseInt(fields[2], 10, 64)
			require.NoError(t, err)
			printed := time.Unix(0, ns)
			latencies = append(latencies, at[i].Sub(printed))
			if i > 0 {
				assert.True(t, at[i-1].Before(printed), "line %d arrived at %v, after line %d was printed at %v", i, at[i-1], i+1, printed)
			}
		}
		t.Logf("print to follower through the apiserver: %v", latencies)
		assert.Equal(t, "bytes \xff\x00\x1b[31m\n", got[n], "bytes exact")

		st, err := tasks.Wait(ctx, &runtimev1.WaitRequest{TaskId: id, IncludeLogs: true})
		require.NoError(t, err)
		var kept []byte
		for _, c := range st.GetLog().GetChunks() {
			kept = append(kept, c.GetData()...)
		}
		assert.Equal(t, string(kept), strings.Join(got, ""), "the follow matches the kept log")

		// Once ended and kept, a follow answers the kept log and ends, with
		// the options applied.
		keptLog := &v1alpha1.RunLog{}
		for _, c := range st.GetLog().GetChunks() {
			stream := v1alpha1.RunLogStreamStdout
			if c.GetStream() == runtimev1.LogStream_LOG_STREAM_STDERR {
				stream = v1alpha1.RunLogStreamStderr
			}
			keptLog.Chunks = append(keptLog.Chunks, v1alpha1.RunLogChunk{Stream: stream, UnixNano: c.GetUnixNano(), Data: c.GetData()})
		}
		require.NoError(t, runs.SaveLog(ctx, "numbered", 1, keptLog))
		succeeded(&run.Status)
		_, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
		body := func(query string) string {
			a := do(httpc, http.MethodGet, logURL("numbered", query), nil)
			require.Equal(t, http.StatusOK, a.code, a.body)
			return a.body
		}
		assert.Equal(t, strings.TrimSpace(string(kept)), body("follow=true"))
		assert.Equal(t, strings.TrimSpace(got[n-1]+got[n]), body("follow=true&tailLines=2"))
		assert.Equal(t, "line", body("follow=true&limitBytes=4"))
		assert.Equal(t, "bytes \xff\x00\x1b[31m", body("follow=true&stream=Stderr"))
	})

	t.Run("a Run that never starts: the follow ends empty when the request's deadline passes", func(t *testing.T) {
		_, err := runs.Create(ctx, taskRun("waiting"), metav1.CreateOptions{})
		require.NoError(t, err)
		reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, logURL("waiting", "follow=true"), nil)
		require.NoError(t, err)
		started := time.Now()
		resp, err := httpc.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Empty(t, b)
		assert.GreaterOrEqual(t, time.Since(started), 2*time.Second, "it waited")
	})

	t.Run("an attempt that ended before the follow", func(t *testing.T) {
		run, err := runs.Create(ctx, taskRun("ended"), metav1.CreateOptions{})
		require.NoError(t, err)
		for _, step := range steps(scheduled, running) {
			step(&run.Status)
			run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		require.NoError(t, runs.SaveLog(ctx, "ended", 1, &v1alpha1.RunLog{Chunks: []v1alpha1.RunLogChunk{{Stream: v1alpha1.RunLogStreamStdout, UnixNano: 1, Data: []byte("kept\n")}}}))
		run.Status.Phase, run.Status.ExitCode = lifecycle.Failed, ptr[int32](3)
		run.Status.CompletionTime = ptr(metav1.NowMicro())
		_, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
		a := do(httpc, http.MethodGet, logURL("ended", "follow=true"), nil)
		assert.Equal(t, http.StatusOK, a.code)
		assert.Equal(t, "kept", a.body)
	})
}

// startGatedTask creates a task Run named name, walks it to Running on
// pod-a and executes it: it prints "ready", waits for the file gate in its
// working directory, then runs rest.
func (ts *taskLogServer) startGatedTask(t *testing.T, name, rest string) string {
	run, err := ts.runs.Create(t.Context(), taskRun(name), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, step := range steps(scheduled, running) {
		step(&run.Status)
		run, err = ts.runs.UpdateStatus(t.Context(), run, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	id := runstatus.ExecutionID(run.UID, 1)
	_, err = ts.tasks.Execute(t.Context(), &runtimev1.ExecuteRequest{
		TaskId:     id,
		Program:    &runtimev1.ExecuteRequest_Script{Script: `echo ready; while [ ! -e gate-` + name + ` ]; do sleep 0.01; done; ` + rest},
		WorkingDir: ts.dir,
	})
	require.NoError(t, err)
	return id
}

func (ts *taskLogServer) openGate(t *testing.T, name string) {
	require.NoError(t, os.WriteFile(filepath.Join(ts.dir, "gate-"+name), nil, 0o644))
}

// followReady opens a follow of name and reads its first line, "ready":
// from then on the follow is live.
func (ts *taskLogServer) followReady(t *testing.T, name string) (*http.Response, *bufio.Reader) {
	resp, err := ts.httpc.Get(ts.logURL(name, "follow=true"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := bufio.NewReader(resp.Body)
	line, err := body.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return resp, body
}

// TestTaskFollowersShareOneUpstream: ten follows of one running task
// through kruntimes-apiserver get identical bytes, the whole log, and
// runtimed opens one stream on the Runtime Server for all of them.
func TestTaskFollowersShareOneUpstream(t *testing.T) {
	ts := startTaskLogServer(t)
	id := ts.startGatedTask(t, "shared", `for i in $(seq 1 3000); do echo "line $i"; done`)
	const n = 10
	bodies := make([]*bufio.Reader, n)
	for i := range bodies {
		resp, body := ts.followReady(t, "shared")
		t.Cleanup(func() { _ = resp.Body.Close() })
		bodies[i] = body
	}
	ts.openGate(t, "shared")
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Go(func() { got[i], errs[i] = io.ReadAll(bodies[i]) })
	}
	wg.Wait()

	st, err := ts.tasks.Wait(t.Context(), &runtimev1.WaitRequest{TaskId: id, IncludeLogs: true})
	require.NoError(t, err)
	var kept []byte
	for _, c := range st.GetLog().GetChunks() {
		kept = append(kept, c.GetData()...)
	}
	for i := range got {
		require.NoError(t, errs[i], "follower %d", i)
		assert.Equal(t, string(kept), "ready\n"+string(got[i]), "follower %d has the whole log", i)
	}
	assert.Equal(t, int32(1), ts.follows.opened.Load(), "runtimed opened one stream on the Runtime Server for %d follows", n)
}

// TestLateTaskFollowerTailsWhereTheLogStands: a follow with tailLines
// that joins a shared stream which brought the task's lines in several
// responses gets the last lines written by now, not the last lines of the
// shared stream's first response.
func TestLateTaskFollowerTailsWhereTheLogStands(t *testing.T) {
	ts := startTaskLogServer(t)
	ts.startGatedTask(t, "tailed", `echo one; sleep 0.1; echo two; sleep 0.1; echo three; while [ ! -e gate-tailed-end ]; do sleep 0.01; done`)
	resp, body := ts.followReady(t, "tailed")
	defer resp.Body.Close()
	ts.openGate(t, "tailed")
	for _, want := range []string{"one\n", "two\n", "three\n"} {
		line, err := body.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, want, line)
	}
	late, err := ts.httpc.Get(ts.logURL("tailed", "follow=true&tailLines=1"))
	require.NoError(t, err)
	defer late.Body.Close()
	require.Equal(t, http.StatusOK, late.StatusCode)
	line, err := bufio.NewReader(late.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "three\n", line, "tailLines=1: the last line written")
	assert.Equal(t, int32(1), ts.follows.opened.Load(), "the late follow read from the shared stream")
	ts.openGate(t, "tailed-end")
}

// TestIdleTaskFollowersCost opens 1,000 follows of one running task
// through kruntimes-apiserver, runtimed and the Runtime Server, all in this
// process with their HTTP client, and reports what each costs while idle.
func TestIdleTaskFollowersCost(t *testing.T) {
	ts := startTaskLogServer(t)
	ts.startGatedTask(t, "idle", "echo done")
	measure := func() (uint64, int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc, runtime.NumGoroutine()
	}
	warm, _ := ts.followReady(t, "idle") // connections, TLS and caches warm before measuring
	defer warm.Body.Close()
	const n = 1000
	heap0, g0 := measure()
	opened0 := ts.follows.opened.Load()
	bodies := make([]*http.Response, 0, n)
	for range n {
		resp, _ := ts.followReady(t, "idle")
		bodies = append(bodies, resp)
	}
	heap1, g1 := measure()
	perFollower := float64(int64(heap1)-int64(heap0)) / 1024 / n
	t.Logf("%d idle task followers: %.1f KiB of heap and %.1f goroutines per follower, %d streams opened on the Runtime Server (apiserver + runtimed + Runtime Server + HTTP/2 client, one process)",
		n, perFollower, float64(g1-g0)/n, ts.follows.opened.Load()-opened0)
	assert.Less(t, perFollower, 256.0, "an idle follower costs a bounded amount, not a log's worth")
	assert.Equal(t, opened0, ts.follows.opened.Load(), "the follows share the first one's stream on the Runtime Server")
	for _, b := range bodies {
		_ = b.Body.Close()
	}
	ts.openGate(t, "idle")
}

// BenchmarkWaitingTaskFollowers measures the CPU of this process (the
// apiserver, its clients) while 0 or 100 follows of runs/log wait for a
// task Run that has not started: each operation is one second of them
// waiting, so the difference ÷ 100 is one waiting follow's CPU per second.
// Report, don't assert:
//
//	go test -tags fieldsv1string ./test/integration -run '^$' -bench BenchmarkWaitingTaskFollowers -benchtime 5x
func BenchmarkWaitingTaskFollowers(b *testing.B) {
	for _, n := range []int{0, 100} {
		b.Run(fmt.Sprintf("follows=%d", n), func(b *testing.B) {
			ts := startTaskLogServer(b)
			name := fmt.Sprintf("pending-%d", n)
			_, err := ts.runs.Create(b.Context(), taskRun(name), metav1.CreateOptions{})
			require.NoError(b, err)
			for range n {
				resp, err := ts.httpc.Get(ts.logURL(name, "follow=true"))
				require.NoError(b, err)
				require.Equal(b, http.StatusOK, resp.StatusCode)
				b.Cleanup(func() { _ = resp.Body.Close() })
			}
			start := cputime.Now()
			for b.Loop() {
				time.Sleep(time.Second) // the operation: a second of waiting
			}
			cputime.Report(b, start)
		})
	}
}
