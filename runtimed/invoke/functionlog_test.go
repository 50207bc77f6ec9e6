package invoke_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
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
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
)

// registrationGate admits the one registration it holds, as runtimed's
// function controller does.
type registrationGate struct {
	uid     types.UID
	attempt int32
	podUID  types.UID
	id      string
}

func (g registrationGate) Admit(uid types.UID, attempt int32, podUID types.UID) (string, error) {
	if uid != g.uid || attempt != g.attempt || podUID != g.podUID {
		return "", errors.New("not the live registration of this Pod")
	}
	return g.id, nil
}

// TestFollowFunctionLogThroughRuntimed follows a function Run of a real
// bash Runtime Server through runtimed's gRPC server on loopback: each
// invocation's log arrives marked with its invocation ID, only for the
// fencing tuple of the live registration.
func TestFollowFunctionLogThroughRuntimed(t *testing.T) {
	dir := t.TempDir()
	b := bash.New("", dir)
	srv, err := server.New(server.Options{Language: b, Functions: b, StateDir: filepath.Join(dir, "state"), BaseEnv: []string{"PATH=" + os.Getenv("PATH")}})
	require.NoError(t, err)
	sock := filepath.Join(dir, "runtime.sock")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	gs := grpc.NewServer(transport.ServerOptions()...)
	srv.Register(gs)
	serve(t, gs, lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	rsConn, err := grpc.NewClient("unix://"+sock, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rsConn.Close() })
	functions := runtimev1.NewFunctionRuntimeClient(rsConn)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.sh"), []byte("echo \"hello from $KRUNTIMES_INVOCATION_ID\" >&2\necho '{}'\n"), 0o644))
	reg, err := functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{RunUid: "fn-uid", RegistrationAttempt: 2, RegistrationDigest: "d", WorkingDir: dir, Handler: "hello.sh"})
	require.NoError(t, err)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, reg.GetState(), reg.GetFatalError())

	g := registrationGate{uid: "fn-uid", attempt: 2, podUID: "pod-uid", id: reg.GetRegistrationId()}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rgs := grpc.NewServer(transport.RuntimedServerOptions()...)
	runtimedv1.RegisterRuntimedServer(rgs, invoke.NewServer(g, functions, "bash").FollowTasks(t.Context(), runtimev1.NewRuntimeClient(rsConn), "pod-uid"))
	serve(t, rgs, tcp)
	conn, err := grpc.NewClient(tcp.Addr().String(), append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	runtimed := runtimedv1.NewRuntimedClient(conn)

	stream, err := runtimed.FollowLog(ctx, &runtimedv1.FollowLogRequest{RunUid: "fn-uid", Attempt: 2, PodUid: "pod-uid", Function: true})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err, "the follow is admitted at once")
	assert.Empty(t, first.GetChunks())

	_, err = runtimed.Invoke(ctx, &runtimedv1.InvokeRequest{RunUid: "fn-uid", Attempt: 2, PodUid: "pod-uid", InvocationId: "inv-7", Input: []byte(`{}`)})
	require.NoError(t, err)
	var got []string
	for len(got) < 1 {
		resp, err := stream.Recv()
		require.NoError(t, err)
		for _, c := range resp.GetChunks() {
			got = append(got, c.GetInvocationId()+" "+c.GetStream().String()+" "+string(c.GetData()))
		}
	}
	assert.Equal(t, []string{"inv-7 LOG_STREAM_STDERR hello from inv-7\n"}, got, "a bash handler's stdout is its output; its stderr is its log")

	for name, req := range map[string]*runtimedv1.FollowLogRequest{
		"another attempt": {RunUid: "fn-uid", Attempt: 1, PodUid: "pod-uid", Function: true},
		"another Pod":     {RunUid: "fn-uid", Attempt: 2, PodUid: "another-pod", Function: true},
		"another Run":     {RunUid: "other", Attempt: 2, PodUid: "pod-uid", Function: true},
	} {
		s, err := runtimed.FollowLog(ctx, req)
		require.NoError(t, err)
		_, err = s.Recv()
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", name, err)
	}
}
