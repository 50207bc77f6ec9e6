package invoke_test

import (
	"context"
	"errors"
	"io"
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

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimed/runstatus"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
)

// TestFollowLogThroughRuntimed follows a real task of a real bash Runtime
// Server through runtimed's gRPC server on loopback.
func TestFollowLogThroughRuntimed(t *testing.T) {
	dir := t.TempDir()
	srv, err := server.New(server.Options{
		Language: bash.New("", dir), StateDir: filepath.Join(dir, "state"),
		BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
	})
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
	tasks := runtimev1.NewRuntimeClient(rsConn)

	stopping, stop := context.WithCancel(t.Context())
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rgs := grpc.NewServer(transport.RuntimedServerOptions()...)
	runtimedv1.RegisterRuntimedServer(rgs, invoke.NewServer(gate{}, runtimev1.NewFunctionRuntimeClient(rsConn), "bash").FollowTasks(stopping, tasks, "pod-uid"))
	serve(t, rgs, tcp)
	conn, err := grpc.NewClient(tcp.Addr().String(), append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	runtimed := runtimedv1.NewRuntimedClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = tasks.Execute(ctx, &runtimev1.ExecuteRequest{
		TaskId:     runstatus.ExecutionID("run-uid", 2),
		Program:    &runtimev1.ExecuteRequest_Script{Script: `echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three`},
		WorkingDir: dir,
	})
	require.NoError(t, err)

	read := func(req *runtimedv1.FollowLogRequest) (string, error) {
		stream, err := runtimed.FollowLog(ctx, req)
		require.NoError(t, err)
		var out []byte
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return string(out), nil
			}
			if err != nil {
				return string(out), err
			}
			for _, c := range resp.GetChunks() {
				out = append(out, c.GetData()...)
			}
		}
	}
	got, err := read(&runtimedv1.FollowLogRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid"})
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\nthree\n", got, "the follow ends after the last byte")
	got, err = read(&runtimedv1.FollowLogRequest{RunUid: "run-uid", Attempt: 2, PodUid: "pod-uid", Offset: 4})
	require.NoError(t, err)
	assert.Equal(t, "two\nthree\n", got)

	_, err = read(&runtimedv1.FollowLogRequest{RunUid: "run-uid", Attempt: 2, PodUid: "another-pod"})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	_, err = read(&runtimedv1.FollowLogRequest{RunUid: "run-uid", Attempt: 1, PodUid: "pod-uid"})
	assert.Equal(t, codes.NotFound, status.Code(err), "an attempt this Pod never executed: %v", err)
	_, err = read(&runtimedv1.FollowLogRequest{RunUid: "run-uid", Attempt: 0, PodUid: "pod-uid"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	// runtimed's shutdown ends the follows of running tasks at once.
	_, err = tasks.Execute(ctx, &runtimev1.ExecuteRequest{
		TaskId: runstatus.ExecutionID("run-uid", 3), Program: &runtimev1.ExecuteRequest_Script{Script: `echo up; exec sleep 60`}, WorkingDir: dir,
	})
	require.NoError(t, err)
	stream, err := runtimed.FollowLog(ctx, &runtimedv1.FollowLogRequest{RunUid: "run-uid", Attempt: 3, PodUid: "pod-uid"})
	require.NoError(t, err)
	resp, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, "up\n", string(resp.GetChunks()[0].GetData()))
	stop()
	_, err = stream.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	_, err = tasks.Cancel(ctx, &runtimev1.CancelRequest{TaskId: runstatus.ExecutionID("run-uid", 3)})
	require.NoError(t, err)
}
