package invoke_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
)

// gate admits the fencing tuple (run-uid, 2, pod-uid) as registration
// reg-1, and nothing else.
type gate struct{}

func (gate) Admit(uid types.UID, attempt int32, podUID types.UID) (string, error) {
	if uid != "run-uid" || attempt != 2 || podUID != "pod-uid" {
		return "", errors.New("not the live registration of this Pod")
	}
	return "reg-1", nil
}

// customRuntimeServer is a Runtime Server of someone else's making: it
// answers what answer says, and counts its calls.
type customRuntimeServer struct {
	runtimev1.UnimplementedFunctionRuntimeServer
	answer func(ctx context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error)
	calls  atomic.Int32
}

func (s *customRuntimeServer) InvokeFunction(ctx context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
	s.calls.Add(1)
	return s.answer(ctx, req)
}

// serve serves gs on lis until the test ends.
func serve(t *testing.T, gs *grpc.Server, lis net.Listener) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
}

// runtimedInFront starts runtimed's invoke server on loopback TCP in front
// of rs, served on a unix socket (nil: no Runtime Server listens there),
// and returns a client of it as the apiserver dials one.
func runtimedInFront(t *testing.T, rs *customRuntimeServer) runtimedv1.RuntimedClient {
	t.Helper()
	return runtimedWith(t, rs, gate{}, nil)
}

// runtimedWith is runtimedInFront with the gate g, and configure (when not
// nil) applied to the invoke server before it serves.
func runtimedWith(t *testing.T, rs *customRuntimeServer, g invoke.Gate, configure func(*invoke.Server)) runtimedv1.RuntimedClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "runtime.sock")
	if rs != nil {
		lis, err := net.Listen("unix", sock)
		require.NoError(t, err)
		gs := grpc.NewServer(transport.ServerOptions()...)
		runtimev1.RegisterFunctionRuntimeServer(gs, rs)
		serve(t, gs, lis)
	}
	rsConn, err := grpc.NewClient("unix://"+sock, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rsConn.Close() })

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(transport.RuntimedServerOptions()...)
	server := invoke.NewServer(g, runtimev1.NewFunctionRuntimeClient(rsConn), "custom")
	if configure != nil {
		configure(server)
	}
	runtimedv1.RegisterRuntimedServer(gs, server)
	serve(t, gs, lis)
	conn, err := grpc.NewClient(lis.Addr().String(), append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return runtimedv1.NewRuntimedClient(conn)
}

func answers(resp *runtimev1.InvokeFunctionResponse, err error) func(context.Context, *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
	return func(context.Context, *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
		return resp, err
	}
}

func TestInvokeInFrontOfACustomRuntimeServer(t *testing.T) {
	valid := func(mutate ...func(*runtimedv1.InvokeRequest)) *runtimedv1.InvokeRequest {
		req := &runtimedv1.InvokeRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid", InvocationId: "inv-1", Input: []byte(`{}`), ContentType: "application/json", TimeoutMillis: 5000}
		for _, m := range mutate {
			m(req)
		}
		return req
	}
	cases := []struct {
		name   string
		req    *runtimedv1.InvokeRequest
		answer func(context.Context, *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error)
		// code and notStarted are what runtimed answers; reached says the
		// Runtime Server was called.
		code       codes.Code
		notStarted bool
		reached    bool
		check      func(t *testing.T, resp *runtimedv1.InvokeResponse)
		// deadline is the call's, 30 s when zero.
		deadline time.Duration
	}{
		{
			name: "a completed invocation passes the answer on",
			req:  valid(),
			answer: answers(&runtimev1.InvokeFunctionResponse{InvocationId: "inv-1", Output: []byte(`{"ok":1}`), ContentType: "application/json",
				Stderr: []byte("bad \xff\n"), Error: &runtimev1.FunctionError{Type: "ValueError", Message: "m\uFFFD", Stack: "s"}}, nil),
			code: codes.OK, reached: true,
			check: func(t *testing.T, resp *runtimedv1.InvokeResponse) {
				assert.Equal(t, "inv-1", resp.GetInvocationId())
				assert.Equal(t, []byte("bad \xff\n"), resp.GetStderr(), "bytes travel as they are")
				assert.Equal(t, &runtimedv1.FunctionError{Type: "ValueError", Message: "m\uFFFD"}, &runtimedv1.FunctionError{Type: resp.GetError().GetType(), Message: resp.GetError().GetMessage()})
			},
		},
		{
			name: "a tuple the gate refuses is FailedPrecondition with NotStarted, and the Runtime Server is not called",
			req:  valid(func(r *runtimedv1.InvokeRequest) { r.Attempt = 1 }),
			code: codes.FailedPrecondition, notStarted: true,
		},
		{
			name: "an invocation ID with a control character is InvalidArgument with NotStarted",
			req:  valid(func(r *runtimedv1.InvokeRequest) { r.InvocationId = "a\nb" }),
			code: codes.InvalidArgument, notStarted: true,
		},
		{
			name: "an invocation ID over 128 bytes is InvalidArgument with NotStarted",
			req:  valid(func(r *runtimedv1.InvokeRequest) { r.InvocationId = strings.Repeat("i", 129) }),
			code: codes.InvalidArgument, notStarted: true,
		},
		{
			name:   "the Runtime Server's busy refusal with NotStarted is passed on",
			req:    valid(),
			answer: answers(nil, runtimev1.NotStartedError(codes.ResourceExhausted, "one at a time")),
			code:   codes.ResourceExhausted, notStarted: true, reached: true,
		},
		{
			name:   "the Runtime Server's InvalidArgument with NotStarted is passed on",
			req:    valid(),
			answer: answers(nil, runtimev1.NotStartedError(codes.InvalidArgument, "bad input")),
			code:   codes.InvalidArgument, notStarted: true, reached: true,
		},
		{
			name:   "ResourceExhausted without NotStarted (after the handler ran) is Aborted: no 429",
			req:    valid(),
			answer: answers(nil, status.Error(codes.ResourceExhausted, "out of memory after the handler ran")),
			code:   codes.Aborted, reached: true,
		},
		{
			name:   "FailedPrecondition without NotStarted (a worker restarted under the handler) is Aborted: no 503",
			req:    valid(),
			answer: answers(nil, status.Error(codes.FailedPrecondition, "the registration FAILED")),
			code:   codes.Aborted, reached: true,
		},
		{
			name:   "Internal is Aborted",
			req:    valid(),
			answer: answers(nil, status.Error(codes.Internal, "boom")),
			code:   codes.Aborted, reached: true,
		},
		{
			name:   "an invocation stopped at its deadline stays DeadlineExceeded",
			req:    valid(),
			answer: answers(nil, status.Error(codes.DeadlineExceeded, "stopped at its deadline")),
			code:   codes.DeadlineExceeded, reached: true,
		},
		{
			name:     "a call cut at runtimed's deadline while the handler runs is DeadlineExceeded, without NotStarted",
			req:      valid(),
			deadline: 2 * time.Second,
			answer: func(ctx context.Context, _ *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			},
			code: codes.DeadlineExceeded, reached: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := &customRuntimeServer{answer: tc.answer}
			if rs.answer == nil {
				rs.answer = answers(nil, status.Error(codes.Internal, "not expected to be called"))
			}
			client := runtimedInFront(t, rs)
			if tc.deadline == 0 {
				tc.deadline = 30 * time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
			defer cancel()
			resp, err := client.Invoke(ctx, tc.req)
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Equal(t, tc.notStarted, runtimev1.IsNotStarted(err), "NotStarted on %v", err)
			if tc.reached {
				assert.Equal(t, int32(1), rs.calls.Load(), "the Runtime Server was called once")
			} else {
				assert.Zero(t, rs.calls.Load(), "the Runtime Server was not called")
			}
			if tc.check != nil {
				tc.check(t, resp)
			}
		})
	}

	t.Run("a Runtime Server that does not listen is Unavailable with NotStarted: the call never reached it", func(t *testing.T) {
		client := runtimedInFront(t, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := client.Invoke(ctx, valid())
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.True(t, runtimev1.IsNotStarted(err), "%v", err)
	})
}
