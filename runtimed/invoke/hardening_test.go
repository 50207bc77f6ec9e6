package invoke_test

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/testutil"

	"kruntimes.io/kruntimes/apis/invocation"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

func heapBytes() uint64 {
	runtime.GC()
	runtime.GC() // the second empties the pools the first left
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestDedupRepeatsInFlightAreBounded: repeats of an invocation in flight,
// each with 1 MiB of input, are at most DefaultMaxWaiters waiting, none
// holding its input (the heap grows by less than two inputs); the others
// are refused at once, NotStarted.
func TestDedupRepeatsInFlightAreBounded(t *testing.T) {
	const repeats = 48
	r := newDedupRig(t, 10*time.Minute)
	release := make(chan struct{})
	count := counting(r.rs)
	r.rs.answer = func(ctx context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
		<-release
		return count(ctx, req)
	}
	input := bytes.Repeat([]byte{'1'}, invocation.MaxInputBytes)
	send := func(ctx context.Context) error {
		_, err := r.client.Invoke(ctx, &runtimedv1.InvokeRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid", CallerSentId: true, Caller: "alice",
			Invocation: &runtimev1.InvokeFunctionRequest{InvocationId: "big", Input: input, ContentType: "application/json", TimeoutMillis: 30000}})
		return err
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- send(t.Context()) }()
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return r.rs.calls.Load() == 1, nil
	}), "the first reaches the handler")
	metrics.Register()
	refusedBefore := refusedCount(t)
	before := heapBytes()

	var mu sync.Mutex
	var refused, waited int
	var wg sync.WaitGroup
	for range repeats {
		wg.Go(func() {
			err := send(t.Context())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status.Code(err) == codes.ResourceExhausted && runtimev1.IsNotStarted(err):
				refused++
			case err == nil:
				waited++
			default:
				t.Errorf("a repeat got %v; want a refusal or the first's outcome", err)
			}
		})
	}
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return refused == repeats-invoke.DefaultMaxWaiters, nil
	})
	mu.Lock()
	got := refused
	mu.Unlock()
	require.NoError(t, err, "%d of %d repeats were refused; want all but %d waiters", got, repeats, invoke.DefaultMaxWaiters)
	held := int64(heapBytes()) - int64(before)
	// Each holding its input would be DefaultMaxWaiters MiB.
	assert.Less(t, held, int64(2*invocation.MaxInputBytes), "the %d waiting repeats hold %d bytes; want less than two inputs together, none held while waiting", invoke.DefaultMaxWaiters, held)
	assert.Equal(t, float64(repeats-invoke.DefaultMaxWaiters), refusedCount(t)-refusedBefore, "kruntimes_runtimed_invocations_refused_total{reason=TooManyWaiters} counts each refusal")

	close(release)
	require.NoError(t, <-firstDone)
	wg.Wait()
	assert.Equal(t, invoke.DefaultMaxWaiters, waited, "the waiters got the first's outcome")
	assert.Equal(t, int32(1), r.rs.calls.Load(), "the handler ran once")
}

// refusedCount is kruntimes_runtimed_invocations_refused_total{reason="TooManyWaiters"}.
func refusedCount(t *testing.T) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(metrics.InvocationsRefused.WithLabelValues(metrics.ReasonTooManyWaiters))
	require.NoError(t, err)
	return v
}

// TestDedupEvictedIDIsNotRunAgain: an outcome evicted within its window
// leaves a tombstone, and a repeat of its ID is refused with
// AlreadyExists, which says the outcome is no longer known, rather than
// run a second time.
func TestDedupEvictedIDIsNotRunAgain(t *testing.T) {
	r := newDedupRigWith(t, invoke.DedupConfig{Window: 10 * time.Minute, MaxEntries: 1, MaxBytes: 4 << 20})
	for _, id := range []string{"a", "b"} {
		_, _, err := r.invoke(t, t.Context(), id, true)
		require.NoError(t, err)
	}
	_, replayed, err := r.invoke(t, t.Context(), "a", true)
	require.Error(t, err, "a, evicted for b, ran again")
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
	assert.False(t, runtimev1.IsNotStarted(err), "the first may have run: not a refusal to retry")
	assert.Contains(t, status.Convert(err).Message(), "no longer known")
	assert.False(t, replayed)
	assert.Equal(t, int32(2), r.rs.calls.Load(), "the handler ran once for each ID")

	r.clock.SetTime(r.clock.Now().Add(10 * time.Minute))
	_, _, err = r.invoke(t, t.Context(), "a", true)
	require.NoError(t, err, "after the window the ID runs again, as any other")
}
