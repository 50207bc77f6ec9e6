package invoke_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/invoke"
)

// lapse is a Bounder whose contexts end, with cause errLapsed, when it is
// closed: a heartbeat Lease that lapses on cue.
type lapse chan struct{}

var errLapsed = errors.New("the heartbeat Lease lapsed")

func (l lapse) Bound(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-l:
			cancel(errLapsed)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// TestLapseStopsTheInvocationInFlight: an invocation admitted while the
// Lease was fresh does not run on past its lapse, when recovery may
// register the function elsewhere; its caller hears "outcome unknown".
func TestLapseStopsTheInvocationInFlight(t *testing.T) {
	stopped := make(chan error, 1)
	rs := &customRuntimeServer{answer: func(ctx context.Context, _ *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
		<-ctx.Done()
		stopped <- ctx.Err()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	l := make(lapse)
	client := runtimedWith(t, rs, gate{}, func(s *invoke.Server) { s.Bound(l) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		_, err := client.Invoke(ctx, &runtimedv1.InvokeRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid",
			InvocationId: "inv-1", Input: []byte(`{}`), ContentType: "application/json", TimeoutMillis: 20000})
		answered <- err
	}()
	require.Eventually(t, func() bool { return rs.calls.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "the handler runs")
	close(l)

	select {
	case err := <-stopped:
		assert.ErrorIs(t, err, context.Canceled, "the Runtime Server saw the invocation cancelled")
	case <-ctx.Done():
		t.Fatal("the invocation was not stopped when the Lease lapsed")
	}
	err := <-answered
	assert.Equal(t, codes.Aborted, status.Code(err), "%v", err)
	assert.False(t, runtimev1.IsNotStarted(err), "it started: not a refusal")
	assert.Contains(t, status.Convert(err).Message(), errLapsed.Error())
}

// TestBoundLeavesAnInvocationThatEndsFirstAlone: the bound costs nothing
// to an invocation that ends before the Lease lapses.
func TestBoundLeavesAnInvocationThatEndsFirstAlone(t *testing.T) {
	rs := &customRuntimeServer{answer: answers(&runtimev1.InvokeFunctionResponse{InvocationId: "inv-1", Output: []byte(`1`)}, nil)}
	l := make(lapse)
	client := runtimedWith(t, rs, gate{}, func(s *invoke.Server) { s.Bound(l) })
	resp, err := client.Invoke(context.Background(), &runtimedv1.InvokeRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid",
		InvocationId: "inv-1", Input: []byte(`{}`), ContentType: "application/json", TimeoutMillis: 5000})
	require.NoError(t, err)
	assert.Equal(t, `1`, string(resp.GetOutput()))
}
