package logfanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
)

// runtimeServer is a real bash Runtime Server on a unix socket, and the
// gRPC client of it the fan-out's upstreams are opened on.
type runtimeServer struct {
	dir       string
	tasks     runtimev1.RuntimeClient
	functions runtimev1.FunctionRuntimeClient
	// opens counts the upstream streams opened.
	opens atomic.Int32
}

func startRuntimeServer(t *testing.T) *runtimeServer {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("bash is required to run tasks")
	}
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
	conn, err := grpc.NewClient("unix://"+sock, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rs.Close(ctx)
	})
	return &runtimeServer{dir: dir, tasks: runtimev1.NewRuntimeClient(conn), functions: runtimev1.NewFunctionRuntimeClient(conn)}
}

// start executes script as task id; it may wait for the file gate in its
// working directory, which open creates.
func (r *runtimeServer) start(t *testing.T, id, script string) {
	_, err := r.tasks.Execute(t.Context(), &runtimev1.ExecuteRequest{
		TaskId: id, Program: &runtimev1.ExecuteRequest_Script{Script: script}, WorkingDir: r.dir,
	})
	require.NoError(t, err)
}

func (r *runtimeServer) openGate(t *testing.T) {
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "gate"), nil, 0o644))
}

// waitForGate is the shell that holds a task until the test opens the gate.
const waitForGate = `while [ ! -e gate ]; do sleep 0.01; done; `

// open is the fan-out's Open for task id, counting what it opens.
func (r *runtimeServer) open(id string) Open {
	return func(ctx context.Context, offset int64) (Stream, error) {
		r.opens.Add(1)
		return r.tasks.FollowLog(ctx, &runtimev1.FollowLogRequest{TaskId: id, Offset: offset})
	}
}

// kept is the whole log of the ended task id, as the Runtime Server keeps
// it.
func (r *runtimeServer) kept(t *testing.T, id string) []byte {
	st, err := r.tasks.Wait(t.Context(), &runtimev1.WaitRequest{TaskId: id, IncludeLogs: true})
	require.NoError(t, err)
	require.Zero(t, st.GetLog().GetDroppedBytes(), "the test's log fits the Runtime Server's bound")
	var b []byte
	for _, c := range st.GetLog().GetChunks() {
		b = append(b, c.GetData()...)
	}
	return b
}

// read reads s until it ends, checking that its responses are consecutive
// from offset, or until it holds at least stopAt bytes (when positive).
func read(s Stream, offset int64, stopAt int) ([]byte, error) {
	var b []byte
	next := offset
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if resp.GetOffset() != next+resp.GetSkippedBytes() || resp.GetSkippedBytes() != 0 {
			return b, fmt.Errorf("response at offset %d skipped %d bytes after offset %d", resp.GetOffset(), resp.GetSkippedBytes(), next)
		}
		for _, c := range resp.GetChunks() {
			b = append(b, c.GetData()...)
		}
		next = offset + int64(len(b))
		if stopAt > 0 && len(b) >= stopAt {
			return b, nil
		}
	}
}

func pollUpstreams(t *testing.T, f *Fanout, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.Upstreams() == want, nil
	})
	require.NoError(t, err, "upstreams: %d, want %d", f.Upstreams(), want)
}

var key = Key{RunUID: "run-uid", Attempt: 1, PodUID: "pod-uid"}

// TestFollowersShareOneUpstream: N followers that joined before the task
// wrote get identical bytes, the whole log, through one upstream stream,
// which closes when they are done.
func TestFollowersShareOneUpstream(t *testing.T) {
	rs := startRuntimeServer(t)
	rs.start(t, "shared", waitForGate+`for i in $(seq 1 5000); do echo "line $i of the shared follow"; done`)
	f := New(0)
	const n = 8
	streams := make([]Stream, n)
	for i := range streams {
		streams[i] = f.Follow(t.Context(), key, 0, rs.open("shared"))
	}
	pollUpstreams(t, f, 1)
	rs.openGate(t)

	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { got[i], errs[i] = read(streams[i], 0, 0) })
	}
	wg.Wait()
	kept := rs.kept(t, "shared")
	require.Greater(t, len(kept), 100_000)
	for i := range got {
		require.NoError(t, errs[i], "follower %d", i)
		assert.Equal(t, kept, got[i], "follower %d has the whole log", i)
	}
	assert.Equal(t, int32(1), rs.opens.Load(), "one upstream for %d followers", n)
	pollUpstreams(t, f, 0)
}

// TestLateFollowerGetsTheWholeLog: a follower that joins at offset 0 after
// the shared stream moved past its window reads the start on its own, then
// joins the shared stream, and gets every byte.
func TestLateFollowerGetsTheWholeLog(t *testing.T) {
	rs := startRuntimeServer(t)
	rs.start(t, "late", `for i in $(seq 1 5000); do echo "line $i before"; done; `+waitForGate+`for i in $(seq 1 5000); do echo "line $i after"; done`)
	f := New(4 << 10)
	ctx := t.Context()
	first := f.Follow(ctx, key, 0, rs.open("late"))
	head, err := read(first, 0, 60_000)
	require.NoError(t, err)

	late := f.Follow(ctx, key, 0, rs.open("late"))
	lateHead, err := read(late, 0, len(head))
	require.NoError(t, err)
	assert.Equal(t, head, lateHead[:len(head)], "the late follower starts at its offset")
	assert.GreaterOrEqual(t, rs.opens.Load(), int32(2), "the late follower read the start on its own")

	rs.openGate(t)
	var wg sync.WaitGroup
	var firstRest, lateRest []byte
	var firstErr, lateErr error
	wg.Go(func() { firstRest, firstErr = read(first, int64(len(head)), 0) })
	wg.Go(func() { lateRest, lateErr = read(late, int64(len(lateHead)), 0) })
	wg.Wait()
	require.NoError(t, firstErr)
	require.NoError(t, lateErr)
	kept := rs.kept(t, "late")
	assert.Equal(t, kept, append(head, firstRest...), "the first follower has the whole log")
	assert.Equal(t, kept, append(lateHead, lateRest...), "the late follower has the whole log")
	pollUpstreams(t, f, 0)
}

// TestSlowFollowerDoesNotStallAFastOne: a follower that stops reading does
// not hold up the shared stream: a fast follower reads the whole log to
// its end meanwhile, and the slow one, reading again, still gets every
// byte from where it was.
func TestSlowFollowerDoesNotStallAFastOne(t *testing.T) {
	rs := startRuntimeServer(t)
	rs.start(t, "slow", waitForGate+`for i in $(seq 1 20000); do echo "line $i, written faster than one follower reads"; done`)
	f := New(4 << 10)
	ctx := t.Context()
	slow := f.Follow(ctx, key, 0, rs.open("slow"))
	fast := f.Follow(ctx, key, 0, rs.open("slow"))
	pollUpstreams(t, f, 1)
	rs.openGate(t)

	slowHead, err := read(slow, 0, 1)
	require.NoError(t, err)
	// The slow follower reads nothing more until the fast one is done.
	fastAll, err := read(fast, 0, 0)
	require.NoError(t, err)
	kept := rs.kept(t, "slow")
	require.Greater(t, len(kept), 500_000)
	assert.Equal(t, kept, fastAll, "the fast follower read the whole log while the slow one did not read")

	slowRest, err := read(slow, int64(len(slowHead)), 0)
	require.NoError(t, err)
	assert.Equal(t, kept, append(slowHead, slowRest...), "the slow follower has the whole log too")
	pollUpstreams(t, f, 0)
}

// TestUpstreamClosesWithTheLastFollower: followers that leave while the
// task runs close the shared stream; the next follow opens a new one.
func TestUpstreamClosesWithTheLastFollower(t *testing.T) {
	rs := startRuntimeServer(t)
	rs.start(t, "left", `echo started; `+waitForGate+`echo done`)
	f := New(0)
	ctxA, cancelA := context.WithCancel(t.Context())
	ctxB, cancelB := context.WithCancel(t.Context())
	a := f.Follow(ctxA, key, 0, rs.open("left"))
	b := f.Follow(ctxB, key, 0, rs.open("left"))
	for _, s := range []Stream{a, b} {
		got, err := read(s, 0, 1)
		require.NoError(t, err)
		assert.Equal(t, "started\n", string(got))
	}
	assert.Equal(t, 1, f.Upstreams())
	cancelA()
	_, err := a.Recv()
	require.Error(t, err, "a follower whose context ended is over")
	assert.Equal(t, 1, f.Upstreams(), "b still follows")
	cancelB()
	pollUpstreams(t, f, 0)

	c := f.Follow(t.Context(), key, 0, rs.open("left"))
	rs.openGate(t)
	got, err := read(c, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, "started\ndone\n", string(got))
	assert.Equal(t, int32(2), rs.opens.Load(), "the next follow opened a new upstream")
}

// TestFollowerFromAnOffsetInTheWindow: a follower that joins at an offset
// inside a chunk the shared stream already brought (a follow resumed after
// a break) gets the log from exactly there, from the shared stream.
func TestFollowerFromAnOffsetInTheWindow(t *testing.T) {
	rs := startRuntimeServer(t)
	rs.start(t, "resumed", `for i in $(seq 1 2000); do echo "line $i"; done; `+waitForGate+`echo done`)
	f := New(0)
	ctx := t.Context()
	first := f.Follow(ctx, key, 0, rs.open("resumed"))
	head, err := read(first, 0, 10_000)
	require.NoError(t, err)

	const offset = 4321 // inside a line, inside the window
	resumed := f.Follow(ctx, key, offset, rs.open("resumed"))
	rs.openGate(t)
	rest, err := read(resumed, offset, 0)
	require.NoError(t, err)
	firstRest, err := read(first, int64(len(head)), 0)
	require.NoError(t, err)
	kept := rs.kept(t, "resumed")
	assert.Equal(t, kept, append(head, firstRest...))
	assert.Equal(t, kept[offset:], rest, "the resumed follower has the log from its offset")
	assert.Equal(t, int32(1), rs.opens.Load(), "the resumed follower read from the shared stream")
}

// function is a Bash function registered on a runtimeServer, whose
// handler writes lines of its invocation ID to stderr.
type function struct {
	rs     *runtimeServer
	runUID string
	regID  string
}

// register registers a function whose invocations each write lines
// numbered lines to stderr.
func (r *runtimeServer) register(t *testing.T, lines int) *function {
	handler := fmt.Sprintf("for i in $(seq 1 %d); do echo \"line $i of $KRUNTIMES_INVOCATION_ID\" >&2; done\necho '{}'\n", lines)
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "handler.sh"), []byte(handler), 0o644))
	const runUID = "function-run-uid"
	reg, err := r.functions.RegisterFunction(t.Context(), &runtimev1.RegisterFunctionRequest{
		RunUid: runUID, RegistrationAttempt: 1, RegistrationDigest: "d", WorkingDir: r.dir, Handler: "handler.sh",
	})
	require.NoError(t, err)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, reg.GetState(), reg.GetFatalError())
	return &function{rs: r, runUID: runUID, regID: reg.GetRegistrationId()}
}

func (fn *function) invoke(t *testing.T, id string) {
	t.Helper()
	resp, err := fn.rs.functions.InvokeFunction(t.Context(), &runtimev1.InvokeFunctionRequest{RunUid: fn.runUID, RegistrationId: fn.regID, InvocationId: id, Input: []byte(`{}`)})
	require.NoError(t, err)
	require.Nil(t, resp.GetError())
}

func (fn *function) unregister(t *testing.T) {
	_, err := fn.rs.functions.UnregisterFunction(t.Context(), &runtimev1.UnregisterFunctionRequest{RunUid: fn.runUID, RegistrationId: fn.regID})
	require.NoError(t, err)
}

// open is the fan-out's Open for the function's registration, counting
// what it opens.
func (fn *function) open() Open {
	return func(ctx context.Context, offset int64) (Stream, error) {
		fn.rs.opens.Add(1)
		return fn.rs.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: fn.runUID, RegistrationId: fn.regID, Offset: offset})
	}
}

// kept is what the registration keeps from offset on, as one follow of
// its own reads it: the first response's offset, where the log ends, and
// the bytes between, each run of one invocation's bytes prefixed with its
// ID.
func (fn *function) kept(t *testing.T, offset int64) (from, written int64, log string) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := fn.open()(ctx, offset)
	require.NoError(t, err)
	resp, err := s.Recv()
	require.NoError(t, err)
	var l marked
	l.add(resp)
	for resp.GetOffset()+l.n < resp.GetWritten() {
		next, err := s.Recv()
		require.NoError(t, err)
		l.add(next)
	}
	return resp.GetOffset(), resp.GetOffset() + l.n, l.String()
}

// marked is a function's log as a follower read it: each run of one
// invocation's bytes prefixed with its ID, however the runs were cut into
// chunks.
type marked struct {
	b   []byte
	id  string
	n   int64
	any bool
}

func (m *marked) add(resp *runtimev1.FollowLogResponse) {
	for _, c := range resp.GetChunks() {
		if !m.any || c.GetInvocationId() != m.id {
			m.b = fmt.Appendf(m.b, "[%s]", c.GetInvocationId())
			m.id, m.any = c.GetInvocationId(), true
		}
		m.b = append(m.b, c.GetData()...)
		m.n += int64(len(c.GetData()))
	}
}

func (m *marked) String() string { return string(m.b) }

// readFunction reads s until it ends, or until it reached offset stopAt
// (when positive), checking that its responses are consecutive from
// offset after the first (which may skip to what the registration keeps).
func readFunction(s Stream, offset int64, stopAt int64) (*marked, error) {
	m := &marked{}
	next := offset
	for first := true; ; first = false {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, err
		}
		if resp.GetOffset() != next+resp.GetSkippedBytes() || (!first && resp.GetSkippedBytes() != 0) {
			return m, fmt.Errorf("response at offset %d skipped %d bytes after offset %d", resp.GetOffset(), resp.GetSkippedBytes(), next)
		}
		m.add(resp)
		next = resp.GetOffset()
		for _, c := range resp.GetChunks() {
			next += int64(len(c.GetData()))
		}
		if stopAt > 0 && next >= stopAt {
			return m, nil
		}
	}
}

var fnKey = Key{RunUID: "function-run-uid", Attempt: 1, PodUID: "pod-uid", Function: true}

// TestFunctionFollowersShareOneUpstream: N followers of a function's
// registration, joining one after another, each start with what it keeps
// (every byte of invocation "before"), then get identical bytes marked with
// their invocation IDs, through one upstream stream, which closes when the
// registration ends.
func TestFunctionFollowersShareOneUpstream(t *testing.T) {
	rs := startRuntimeServer(t)
	fn := rs.register(t, 200)
	fn.invoke(t, "before")
	_, _, before := fn.kept(t, 0)
	rs.opens.Store(0)

	f := New(0)
	const n = 8
	streams := make([]Stream, n)
	for i := range streams {
		streams[i] = f.Follow(t.Context(), fnKey, 0, fn.open())
		head, err := readFunction(streams[i], 0, int64(len(before)-len("[before]")))
		require.NoError(t, err)
		require.Equal(t, before, head.String(), "follower %d starts with what the registration keeps", i)
	}
	for _, id := range []string{"inv-1", "inv-2", "inv-3"} {
		fn.invoke(t, id)
	}
	_, _, all := fn.kept(t, 0)
	assert.Equal(t, int32(2), rs.opens.Load(), "one upstream for %d followers, and the test's own read", n)
	fn.unregister(t)

	got := make([]*marked, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { got[i], errs[i] = readFunction(streams[i], int64(len(before)-len("[before]")), 0) })
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i], "follower %d", i)
		assert.Equal(t, all, before+got[i].String(), "follower %d has every invocation's bytes, marked", i)
	}
	for _, id := range []string{"before", "inv-1", "inv-2", "inv-3"} {
		assert.Contains(t, all, "["+id+"]line 1 of "+id+"\n")
	}
	pollUpstreams(t, f, 0)
}

// TestFunctionFollowerIsAnsweredAtOnce: a follower that joins a shared
// function stream with nothing to read yet is answered at once with where
// the log stands, as FollowFunctionLog answers; one past what was written
// is OutOfRange at once. Neither opens a stream of its own.
func TestFunctionFollowerIsAnsweredAtOnce(t *testing.T) {
	rs := startRuntimeServer(t)
	fn := rs.register(t, 3)
	f := New(0)
	// Bounded, so that a Recv that waited fails the test rather than
	// hanging it: nothing is written while the test reads.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	first := f.Follow(ctx, fnKey, 0, fn.open())
	resp, err := first.Recv()
	require.NoError(t, err)
	assert.Empty(t, resp.GetChunks(), "nothing was written")
	assert.Zero(t, resp.GetWritten())

	second := f.Follow(ctx, fnKey, 0, fn.open())
	resp, err = second.Recv()
	require.NoError(t, err, "the second follower is answered without a write")
	assert.Empty(t, resp.GetChunks())
	assert.Zero(t, resp.GetWritten())

	fn.invoke(t, "one")
	for _, s := range []Stream{first, second} {
		got, err := readFunction(s, 0, int64(len("line 1 of one\nline 2 of one\nline 3 of one\n")))
		require.NoError(t, err)
		assert.Equal(t, "[one]line 1 of one\nline 2 of one\nline 3 of one\n", got.String())
	}
	written := int64(len("line 1 of one\nline 2 of one\nline 3 of one\n"))

	resumed := f.Follow(ctx, fnKey, written, fn.open())
	resp, err = resumed.Recv()
	require.NoError(t, err, "a follower resuming at the end is answered without a write")
	assert.Equal(t, written, resp.GetOffset())
	assert.Equal(t, written, resp.GetWritten())
	assert.Empty(t, resp.GetChunks())

	past := f.Follow(ctx, fnKey, written+1, fn.open())
	_, err = past.Recv()
	assert.Equal(t, codes.OutOfRange, status.Code(err), "an offset past what was written: %v", err)
	assert.Equal(t, int32(1), rs.opens.Load(), "every follower read from the shared stream")
	assert.Equal(t, 1, f.Upstreams())
}

// TestLateFunctionFollowerGetsWhatTheRegistrationKeeps: a follower that
// joins at offset 0 after the shared stream moved past its window reads
// what the registration still keeps (its bounded tail) on its own, then
// joins the shared stream, and reads what comes next from it.
func TestLateFunctionFollowerGetsWhatTheRegistrationKeeps(t *testing.T) {
	rs := startRuntimeServer(t)
	fn := rs.register(t, 2500) // ~48 KiB an invocation
	f := New(4 << 10)
	ctx := t.Context()
	first := f.Follow(ctx, fnKey, 0, fn.open())
	for i := range 6 {
		fn.invoke(t, fmt.Sprint("inv-", i))
	}
	keptFrom, written, kept := fn.kept(t, 0)
	require.Positive(t, keptFrom, "the registration no longer keeps its first bytes")
	// The first follower did not read meanwhile: it fell behind the
	// window, and reads what the registration keeps on its own.
	firstHead, err := readFunction(first, 0, written)
	require.NoError(t, err)
	assert.Equal(t, kept, firstHead.String())
	pollUpstreams(t, f, 1)
	opens := rs.opens.Load()

	late := f.Follow(ctx, fnKey, 0, fn.open())
	lateHead, err := readFunction(late, 0, written)
	require.NoError(t, err)
	assert.Equal(t, kept, lateHead.String(), "the late follower starts with what the registration keeps")
	assert.Equal(t, opens+1, rs.opens.Load(), "the late follower read it on its own")
	pollUpstreams(t, f, 1) // and then went back to the shared stream

	fn.invoke(t, "next")
	for _, s := range []Stream{first, late} {
		got, err := readFunction(s, written, written+1)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(got.String(), "[next]line 1 of next\nline 2 of next\n"), got.String()[:min(64, len(got.b))])
	}
	assert.Equal(t, opens+1, rs.opens.Load(), "both read the next invocation from the shared stream")
	fn.unregister(t)
	for _, s := range []Stream{first, late} {
		_, err := readFunction(s, 0, 0)
		require.NoError(t, err)
	}
	pollUpstreams(t, f, 0)
}

// TestJoiningFollowerIsToldWhereTheLogStands: a follower that joins a
// shared function stream reads what the window holds, and every response
// says how much the registration wrote by now, not when the window's
// response was cut: it has caught up (where tailLines cuts) only at the
// window's end, as a stream of its own would tell it.
func TestJoiningFollowerIsToldWhereTheLogStands(t *testing.T) {
	rs := startRuntimeServer(t)
	fn := rs.register(t, 3)
	f := New(0)
	ctx := t.Context()
	first := f.Follow(ctx, fnKey, 0, fn.open())
	for _, id := range []string{"inv-1", "inv-2", "inv-3"} {
		fn.invoke(t, id)
	}
	_, written, _ := fn.kept(t, 0)
	_, err := readFunction(first, 0, written)
	require.NoError(t, err)

	joined := f.Follow(ctx, fnKey, 0, fn.open())
	for end := int64(0); end < written; {
		resp, err := joined.Recv()
		require.NoError(t, err)
		end = resp.GetOffset()
		for _, c := range resp.GetChunks() {
			end += int64(len(c.GetData()))
		}
		assert.Equal(t, written, resp.GetWritten(), "the response ending at %d says where the log stands", end)
	}
	assert.Equal(t, int32(2), rs.opens.Load(), "the joining follower read from the shared stream")
}
