package runtimedclient_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
)

// onlyRegistration admits the fencing tuple (run-uid, 1, pod-uid).
type onlyRegistration struct{}

func (onlyRegistration) Admit(uid types.UID, attempt int32, podUID types.UID) (string, error) {
	if uid != "run-uid" || attempt != 1 || podUID != "pod-uid" {
		return "", errors.New("not the live registration of this Pod")
	}
	return "reg-1", nil
}

// echoRuntimeServer answers every invocation with its input, a line of
// stdout and a function error, and counts the handlers it ran.
type echoRuntimeServer struct {
	runtimev1.UnimplementedFunctionRuntimeServer
	ran atomic.Int32
}

func (s *echoRuntimeServer) InvokeFunction(_ context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
	s.ran.Add(1)
	return &runtimev1.InvokeFunctionResponse{
		InvocationId: req.GetInvocationId(), Output: req.GetInput(), ContentType: invocation.ContentTypeJSON,
		Stdout: []byte("hello\n"), DurationNanos: int64(time.Millisecond),
		Error: &runtimev1.FunctionError{Type: "ValueError", Message: "m"},
	}, nil
}

// wire records what crossed the wire to runtimed's Invoke.
type wire struct {
	mu        sync.Mutex
	requests  []*runtimedv1.InvokeRequest
	responses []*runtimedv1.InvokeResponse
}

func (w *wire) record(req *runtimedv1.InvokeRequest, resp *runtimedv1.InvokeResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.requests = append(w.requests, proto.Clone(req).(*runtimedv1.InvokeRequest))
	if resp != nil {
		w.responses = append(w.responses, proto.Clone(resp).(*runtimedv1.InvokeResponse))
	}
}

func (w *wire) seen() ([]*runtimedv1.InvokeRequest, []*runtimedv1.InvokeResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*runtimedv1.InvokeRequest(nil), w.requests...), append([]*runtimedv1.InvokeResponse(nil), w.responses...)
}

// runtimed starts runtimed's real invoke server on loopback in front of rs
// (on a unix socket) and returns a Client of it as the apiserver makes
// one. With olderRelease, runtimed reads and answers only the fields of the
// release before the nested messages, as that release's binary did: it
// does not know field 30, so it finds no invocation ID and refuses the
// request before anything ran.
func runtimed(t *testing.T, rs *echoRuntimeServer, olderRelease bool) (*runtimedclient.Client, *wire) {
	t.Helper()
	return runtimedOf(t, rs, olderRelease)
}

// runtimedWith is runtimed in front of any Runtime Server.
func runtimedWith(t *testing.T, rs runtimev1.FunctionRuntimeServer) (*runtimedclient.Client, *wire) {
	t.Helper()
	return runtimedOf(t, rs, false)
}

func runtimedOf(t *testing.T, rs runtimev1.FunctionRuntimeServer, olderRelease bool) (*runtimedclient.Client, *wire) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "runtime.sock")
	rsLis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	rsServer := grpc.NewServer(transport.ServerOptions()...)
	runtimev1.RegisterFunctionRuntimeServer(rsServer, rs)
	serve(t, rsServer, rsLis)
	rsConn, err := grpc.NewClient("unix://"+sock, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rsConn.Close() })

	w := &wire{}
	intercept := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		in := req.(*runtimedv1.InvokeRequest)
		if olderRelease {
			w.record(in, nil)
			in = proto.Clone(in).(*runtimedv1.InvokeRequest)
			in.Invocation = nil // an unknown field to that release
			if err := invocation.CheckID(in.GetInvocationId()); err != nil {
				return nil, runtimev1.NotStartedError(codes.InvalidArgument, "invocation_id: %v", err)
			}
		}
		resp, err := handler(ctx, in)
		if !olderRelease {
			out, _ := resp.(*runtimedv1.InvokeResponse)
			w.record(in, out)
		}
		return resp, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(append(transport.RuntimedServerOptions(), grpc.ChainUnaryInterceptor(intercept))...)
	runtimedv1.RegisterRuntimedServer(gs, invoke.NewServer(onlyRegistration{}, runtimev1.NewFunctionRuntimeClient(rsConn), "echo"))
	serve(t, gs, lis)
	conn, err := grpc.NewClient(lis.Addr().String(), append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return runtimedclient.New(runtimedv1.NewRuntimedClient(conn), nil), w
}

func serve(t *testing.T, gs *grpc.Server, lis net.Listener) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
}

func invocationOf(id string) runtimedclient.Invocation {
	return runtimedclient.Invocation{RunUID: "run-uid", Attempt: 1, PodUID: "pod-uid", ID: id, Caller: "alice",
		Input: []byte(`{"n":1}`), Timeout: 10 * time.Second, CallSlack: time.Second}
}

// assertEchoed asserts answer is echoRuntimeServer's to the invocation id.
func assertEchoed(t *testing.T, answer *runtimedclient.Answer, id string) {
	t.Helper()
	require.NotNil(t, answer)
	assert.Equal(t, id, answer.Result.InvocationID)
	assert.JSONEq(t, `{"n":1}`, string(answer.Result.Output.Raw))
	require.NotNil(t, answer.Result.Logs)
	assert.Equal(t, "hello\n", answer.Result.Logs.Stdout)
	require.NotNil(t, answer.Result.Error)
	assert.Equal(t, "ValueError", answer.Result.Error.Type)
	assert.Equal(t, time.Millisecond, answer.Handler)
	assert.True(t, answer.Timed, "runtimed says how long it took")
}

func TestInvokeNestsTheRuntimeServersMessages(t *testing.T) {
	rs := &echoRuntimeServer{}
	client, w := runtimed(t, rs, false)

	answer, err := client.Invoke(context.Background(), invocationOf("inv-1"))
	require.NoError(t, err)
	assertEchoed(t, answer, "inv-1")

	requests, responses := w.seen()
	require.Len(t, requests, 1)
	req := requests[0]
	require.NotNil(t, req.GetInvocation(), "the request nests the Runtime Server's")
	assert.Equal(t, "inv-1", req.GetInvocation().GetInvocationId())
	assert.Equal(t, []byte(`{"n":1}`), req.GetInvocation().GetInput())
	assert.Empty(t, req.GetInvocationId(), "the deprecated fields stay empty")
	assert.Empty(t, req.GetInput(), "the input travels once")
	require.Len(t, responses, 1)
	require.NotNil(t, responses[0].GetResult(), "the answer nests the Runtime Server's")
	assert.Empty(t, responses[0].GetOutput(), "the output travels once")
	assert.Equal(t, int32(1), rs.ran.Load())
}

func TestInvokeAsksARuntimedOfTheReleaseBeforeInItsFields(t *testing.T) {
	rs := &echoRuntimeServer{}
	client, w := runtimed(t, rs, true)

	answer, err := client.Invoke(context.Background(), invocationOf("inv-1"))
	require.NoError(t, err, "the refusal of the nested request is asked again in the old fields")
	assertEchoed(t, answer, "inv-1")
	assert.Equal(t, int32(1), rs.ran.Load(), "the refused request ran nothing: the handler ran once")

	answer, err = client.Invoke(context.Background(), invocationOf("inv-2"))
	require.NoError(t, err)
	assertEchoed(t, answer, "inv-2")
	assert.Equal(t, int32(2), rs.ran.Load())

	requests, _ := w.seen()
	require.Len(t, requests, 3, "one refusal, then the old fields from then on")
	assert.NotNil(t, requests[0].GetInvocation(), "the first request is nested")
	for i, req := range requests[1:] {
		assert.Nil(t, req.GetInvocation(), "request %d is in the old fields", i+1)
		assert.Equal(t, []byte(`{"n":1}`), req.GetInput(), "request %d carries its input in the old field", i+1)
		assert.Equal(t, int64(10000), req.GetTimeoutMillis())
	}
}
