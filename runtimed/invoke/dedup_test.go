package invoke_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/invocation"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/invoke"
)

// liveGate admits the Run run-uid on pod-uid at the attempt and
// registration ID it holds now.
type liveGate struct {
	mu      sync.Mutex
	attempt int32
	id      string
}

func (g *liveGate) Admit(uid types.UID, attempt int32, podUID types.UID) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if uid != "run-uid" || attempt != g.attempt || podUID != "pod-uid" {
		return "", errors.New("not the live registration of this Pod")
	}
	return g.id, nil
}

func (g *liveGate) set(attempt int32, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.attempt, g.id = attempt, id
}

// counting answers each invocation with its number: a replay is told from
// a second run by its output.
func counting(rs *customRuntimeServer) func(context.Context, *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
	return func(_ context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
		n := rs.calls.Load()
		return &runtimev1.InvokeFunctionResponse{InvocationId: req.GetInvocationId(), Output: []byte{'0' + byte(n)}, ContentType: "application/json",
			DurationNanos: int64(n), WorkerWarm: true}, nil
	}
}

type dedupRig struct {
	rs     *customRuntimeServer
	gate   *liveGate
	clock  *clocktesting.FakePassiveClock
	client runtimedv1.RuntimedClient
}

func newDedupRig(t *testing.T, window time.Duration) *dedupRig {
	return newDedupRigWith(t, invoke.DedupConfig{Window: window, MaxEntries: 1000, MaxBytes: 4 << 20})
}

func newDedupRigWith(t *testing.T, cfg invoke.DedupConfig) *dedupRig {
	r := &dedupRig{rs: &customRuntimeServer{}, gate: &liveGate{attempt: 2, id: "reg-1"}, clock: clocktesting.NewFakePassiveClock(time.Now())}
	r.rs.answer = counting(r.rs)
	cfg.Clock = r.clock
	r.client = runtimedWith(t, r.rs, r.gate, func(s *invoke.Server) { s.Deduplicate(cfg) })
	return r
}

// invoke sends id (caller-sent when callerSent) at attempt 2 and returns
// the answer and whether runtimed marked it replayed.
func (r *dedupRig) invoke(t *testing.T, ctx context.Context, id string, callerSent bool) (*runtimedv1.InvokeResponse, bool, error) {
	t.Helper()
	return r.invokeAs(t, ctx, "alice", id, callerSent)
}

// invokeAs is invoke by the caller named caller.
func (r *dedupRig) invokeAs(t *testing.T, ctx context.Context, caller, id string, callerSent bool) (*runtimedv1.InvokeResponse, bool, error) {
	t.Helper()
	r.gate.mu.Lock()
	attempt := r.gate.attempt
	r.gate.mu.Unlock()
	var md metadata.MD
	resp, err := r.client.Invoke(ctx, &runtimedv1.InvokeRequest{RunUid: "run-uid", Attempt: attempt, PodUid: "pod-uid", InvocationId: id,
		Input: []byte(`{}`), ContentType: "application/json", TimeoutMillis: 5000, CallerSentId: callerSent, Caller: caller}, grpc.Header(&md))
	replayed := len(md.Get(invocation.MetadataDeduplicated)) == 1 && md.Get(invocation.MetadataDeduplicated)[0] == "true"
	return resp, replayed, err
}

// sameAnswer compares two answers but for runtimed's own time.
func sameAnswer(t *testing.T, a, b *runtimedv1.InvokeResponse) {
	t.Helper()
	a, b = proto.Clone(a).(*runtimedv1.InvokeResponse), proto.Clone(b).(*runtimedv1.InvokeResponse)
	a.RuntimedNanos, b.RuntimedNanos = 0, 0
	assert.True(t, proto.Equal(a, b), "answers differ: %v vs %v", a, b)
}

func TestDedupSameCallerIDRunsOnce(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	first, replayed1, err := r.invoke(t, t.Context(), "id-1", true)
	require.NoError(t, err)
	second, replayed2, err := r.invoke(t, t.Context(), "id-1", true)
	require.NoError(t, err)
	assert.Equal(t, int32(1), r.rs.calls.Load(), "the handler ran once")
	assert.False(t, replayed1, "the first answer is not marked replayed")
	assert.True(t, replayed2, "the repeat is marked replayed")
	sameAnswer(t, first, second)
	assert.Equal(t, "1", string(second.GetOutput()))
	assert.True(t, first.GetWorkerWarm())
	assert.Positive(t, first.GetRuntimedNanos())
	assert.Positive(t, second.GetRuntimedNanos())

	_, replayed, err := r.invoke(t, t.Context(), "id-2", true)
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.Equal(t, int32(2), r.rs.calls.Load(), "another ID runs")
}

func TestDedupIsPerCaller(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	_, _, err := r.invokeAs(t, t.Context(), "alice", "shared", true)
	require.NoError(t, err)
	resp, replayed, err := r.invokeAs(t, t.Context(), "mallory", "shared", true)
	require.NoError(t, err)
	assert.False(t, replayed, "another caller's ID of the same value is its own invocation")
	assert.Equal(t, "2", string(resp.GetOutput()))
	resp, replayed, err = r.invokeAs(t, t.Context(), "alice", "shared", true)
	require.NoError(t, err)
	assert.True(t, replayed)
	assert.Equal(t, "1", string(resp.GetOutput()), "alice's own outcome")
}

func TestDedupMintedIDsAreNeverDeduplicated(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	for range 2 {
		_, replayed, err := r.invoke(t, t.Context(), "minted", false)
		require.NoError(t, err)
		assert.False(t, replayed)
	}
	assert.Equal(t, int32(2), r.rs.calls.Load())
}

func TestDedupReplaysFunctionErrorsAndUnknownOutcomes(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	r.rs.answer = answers(&runtimev1.InvokeFunctionResponse{InvocationId: "fe", Error: &runtimev1.FunctionError{Type: "ValueError", Message: "no"}}, nil)
	first, _, err := r.invoke(t, t.Context(), "fe", true)
	require.NoError(t, err)
	second, replayed, err := r.invoke(t, t.Context(), "fe", true)
	require.NoError(t, err)
	assert.True(t, replayed)
	sameAnswer(t, first, second)
	assert.Equal(t, "ValueError", second.GetError().GetType())
	assert.Equal(t, int32(1), r.rs.calls.Load())

	// An outcome nobody knows (the handler may have run) is kept too: at
	// most once.
	r.rs.answer = answers(nil, status.Error(codes.Internal, "connection broke"))
	_, _, err1 := r.invoke(t, t.Context(), "unknown", true)
	_, replayed, err2 := r.invoke(t, t.Context(), "unknown", true)
	assert.Equal(t, codes.Aborted, status.Code(err1), "%v", err1)
	assert.Equal(t, codes.Aborted, status.Code(err2), "%v", err2)
	assert.Equal(t, status.Convert(err1).Message(), status.Convert(err2).Message())
	assert.True(t, replayed, "a replayed error is marked too")
	assert.Equal(t, int32(2), r.rs.calls.Load())
}

func TestDedupRefusalsBeforeTheHandlerAreNotRecorded(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	r.rs.answer = answers(nil, runtimev1.NotStartedError(codes.ResourceExhausted, "one at a time"))
	_, _, err := r.invoke(t, t.Context(), "busy", true)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	r.rs.answer = counting(r.rs)
	resp, replayed, err := r.invoke(t, t.Context(), "busy", true)
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.Equal(t, "2", string(resp.GetOutput()), "the repeat ran")
}

func TestDedupRepeatInFlightWaitsForTheFirst(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	count := counting(r.rs)
	r.rs.answer = func(ctx context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return count(ctx, req)
	}
	type answer struct {
		resp     *runtimedv1.InvokeResponse
		replayed bool
		err      error
	}
	// The first caller goes away while its invocation runs: the invocation
	// runs on, and the repeats get its outcome.
	firstCtx, cancelFirst := context.WithCancel(t.Context())
	firstDone := make(chan error, 1)
	go func() { _, _, err := r.invoke(t, firstCtx, "slow", true); firstDone <- err }()
	<-started
	repeats := make(chan answer, 2)
	for range 2 {
		go func() {
			resp, replayed, err := r.invoke(t, t.Context(), "slow", true)
			repeats <- answer{resp, replayed, err}
		}()
	}
	// A repeat that gives up waiting is not told that nothing started.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, _, err := r.invoke(t, ctx, "slow", true)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.False(t, runtimev1.IsNotStarted(err))

	cancelFirst()
	assert.Equal(t, codes.Canceled, status.Code(<-firstDone))
	close(release)
	for range 2 {
		a := <-repeats
		require.NoError(t, a.err, "a repeat in flight waits instead of a 429")
		assert.True(t, a.replayed)
		assert.Equal(t, "1", string(a.resp.GetOutput()))
	}
	assert.Equal(t, int32(1), r.rs.calls.Load(), "the handler ran once, to its end")
}

func TestDedupWindow(t *testing.T) {
	r := newDedupRig(t, time.Minute)
	_, _, err := r.invoke(t, t.Context(), "w", true)
	require.NoError(t, err)
	r.clock.SetTime(r.clock.Now().Add(59 * time.Second))
	_, replayed, err := r.invoke(t, t.Context(), "w", true)
	require.NoError(t, err)
	assert.True(t, replayed, "inside the window")
	r.clock.SetTime(r.clock.Now().Add(time.Second))
	resp, replayed, err := r.invoke(t, t.Context(), "w", true)
	require.NoError(t, err)
	assert.False(t, replayed, "after the window")
	assert.Equal(t, "2", string(resp.GetOutput()))
}

func TestDedupWindowZeroIsOff(t *testing.T) {
	r := newDedupRig(t, 0)
	for range 2 {
		_, replayed, err := r.invoke(t, t.Context(), "x", true)
		require.NoError(t, err)
		assert.False(t, replayed)
	}
	assert.Equal(t, int32(2), r.rs.calls.Load())
}

func TestDedupNewRegistrationStartsEmpty(t *testing.T) {
	r := newDedupRig(t, 10*time.Minute)
	_, _, err := r.invoke(t, t.Context(), "a", true)
	require.NoError(t, err)

	r.gate.set(2, "reg-2") // the Runtime Server registered again
	_, replayed, err := r.invoke(t, t.Context(), "a", true)
	require.NoError(t, err)
	assert.False(t, replayed, "a new registration ID starts empty")

	r.gate.set(3, "reg-3") // a new attempt
	resp, replayed, err := r.invoke(t, t.Context(), "a", true)
	require.NoError(t, err)
	assert.False(t, replayed, "a new attempt starts empty")
	assert.Equal(t, "3", string(resp.GetOutput()))

	_, replayed, err = r.invoke(t, t.Context(), "a", true)
	require.NoError(t, err)
	assert.True(t, replayed, "and then records")
}

func TestDedupPodBudgetBoundsWhatIsKept(t *testing.T) {
	// Room for one outcome on the whole Pod, however much each Run may keep.
	r := newDedupRigWith(t, invoke.DedupConfig{Window: 10 * time.Minute, MaxEntries: 1000, MaxBytes: 4 << 20, MaxPodBytes: 1})
	for _, id := range []string{"a", "b"} {
		_, replayed, err := r.invoke(t, t.Context(), id, true)
		require.NoError(t, err)
		require.False(t, replayed)
	}
	_, replayed, err := r.invoke(t, t.Context(), "b", true)
	require.NoError(t, err)
	assert.True(t, replayed, "the newest outcome is kept")
	_, replayed, err = r.invoke(t, t.Context(), "a", true)
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "the older one went to stay within the Pod's budget: %v", err)
	assert.False(t, replayed)
	assert.Equal(t, int32(2), r.rs.calls.Load(), "and a repeat of it did not run")
}

func TestErrorsCarryRuntimedTime(t *testing.T) {
	rs := &customRuntimeServer{answer: answers(nil, status.Error(codes.Internal, "broke"))}
	client := runtimedInFront(t, rs)
	var md metadata.MD
	_, err := client.Invoke(t.Context(), &runtimedv1.InvokeRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid", InvocationId: "e",
		Input: []byte(`{}`), TimeoutMillis: 5000}, grpc.Header(&md))
	require.Equal(t, codes.Aborted, status.Code(err))
	v := md.Get(invocation.MetadataRuntimedNanos)
	require.Len(t, v, 1, "an error says runtimed's time in a header")
	nanos, perr := strconv.ParseInt(v[0], 10, 64)
	require.NoError(t, perr)
	assert.Positive(t, nanos)
}
