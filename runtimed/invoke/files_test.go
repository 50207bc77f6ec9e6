package invoke_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
)

// TestFilesThroughRuntimed writes and reads a file of several chunks
// through runtimed's gRPC server and a real Runtime Server, only for the
// fencing tuple of the live registration; a write the apiserver cancels
// leaves nothing behind.
func TestFilesThroughRuntimed(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	require.NoError(t, os.Mkdir(work, 0o755))
	b := bash.New("", dir)
	// The bash handler stands in for the sandbox: files are the server's.
	srv, err := server.New(server.Options{Language: b, Functions: b, FileHandlers: []string{"box.sh"}, StateDir: filepath.Join(dir, "state"), BaseEnv: []string{"PATH=" + os.Getenv("PATH")}})
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
	require.NoError(t, os.WriteFile(filepath.Join(work, "box.sh"), []byte("echo '{}'\n"), 0o644))
	reg, err := functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{RunUid: "sb-uid", RegistrationAttempt: 1, RegistrationDigest: "d", WorkingDir: work, Handler: "box.sh"})
	require.NoError(t, err)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, reg.GetState(), reg.GetFatalError())

	g := registrationGate{uid: "sb-uid", attempt: 1, podUID: "pod-uid", id: reg.GetRegistrationId()}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rgs := grpc.NewServer(transport.RuntimedServerOptions()...)
	runtimedv1.RegisterRuntimedServer(rgs, invoke.NewServer(g, functions, "bash"))
	serve(t, rgs, tcp)
	conn, err := grpc.NewClient(tcp.Addr().String(), append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	runtimed := runtimedv1.NewRuntimedClient(conn)

	data := make([]byte, 4*sandboxfile.ChunkBytes+7)
	_, _ = rand.Read(data)
	write := func(ctx context.Context, runUID string, attempt int32, podUID string, data []byte) (*runtimev1.WriteFileResponse, error) {
		stream, err := runtimed.WriteFile(ctx)
		require.NoError(t, err)
		msg := &runtimedv1.WriteFileRequest{RunUid: runUID, Attempt: attempt, PodUid: podUID, Caller: "alice", File: &runtimev1.WriteFileRequest{Path: "in/data.bin"}}
		for first := true; first || len(data) > 0; first = false {
			n := min(sandboxfile.ChunkBytes, len(data))
			msg.File.Data, data = data[:n], data[n:]
			if stream.Send(msg) != nil {
				break
			}
			msg = &runtimedv1.WriteFileRequest{File: &runtimev1.WriteFileRequest{}}
		}
		return stream.CloseAndRecv()
	}
	read := func(req *runtimedv1.ReadFileRequest) ([]byte, error) {
		stream, err := runtimed.ReadFile(ctx, req)
		require.NoError(t, err)
		var out bytes.Buffer
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return out.Bytes(), nil
			}
			if err != nil {
				return nil, err
			}
			out.Write(chunk.GetData())
		}
	}

	resp, err := write(ctx, "sb-uid", 1, "pod-uid", data)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), resp.GetSize())
	got, err := read(&runtimedv1.ReadFileRequest{RunUid: "sb-uid", Attempt: 1, PodUid: "pod-uid", Path: "in/data.bin"})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the file read back through runtimed is the one written")

	for name, tuple := range map[string]struct {
		uid     string
		attempt int32
		pod     string
	}{
		"another attempt": {"sb-uid", 2, "pod-uid"},
		"another Pod":     {"sb-uid", 1, "another-pod"},
		"another Run":     {"other", 1, "pod-uid"},
	} {
		_, err := write(ctx, tuple.uid, tuple.attempt, tuple.pod, []byte("x"))
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "write, %s: %v", name, err)
		_, err = read(&runtimedv1.ReadFileRequest{RunUid: tuple.uid, Attempt: tuple.attempt, PodUid: tuple.pod, Path: "in/data.bin"})
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "read, %s: %v", name, err)
	}

	// A write cancelled on the way: runtimed cancels its call, and the
	// Runtime Server drops its temporary file.
	upCtx, upCancel := context.WithCancel(ctx)
	stream, err := runtimed.WriteFile(upCtx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&runtimedv1.WriteFileRequest{RunUid: "sb-uid", Attempt: 1, PodUid: "pod-uid", File: &runtimev1.WriteFileRequest{Path: "in/data.bin", Data: []byte("partial")}}))
	temporary := func() int {
		entries, err := os.ReadDir(filepath.Join(work, "in"))
		require.NoError(t, err)
		n := 0
		for _, e := range entries {
			if strings.Contains(e.Name(), ".kruntimes-upload-") {
				n++
			}
		}
		return n
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return temporary() == 1, nil }))
	upCancel()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return temporary() == 0, nil }))
	got, err = os.ReadFile(filepath.Join(work, "in/data.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the file is still the one written whole")

	// A directory as an archive, relayed chunk by chunk, for the live
	// registration's tuple only.
	archive, err := read(&runtimedv1.ReadFileRequest{RunUid: "sb-uid", Attempt: 1, PodUid: "pod-uid", Path: "in", Archive: runtimev1.Archive_ARCHIVE_TAR})
	require.NoError(t, err)
	tr := tar.NewReader(bytes.NewReader(archive))
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "data.bin", hdr.Name)
	got, err = io.ReadAll(tr)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the archive holds the file")
	_, err = tr.Next()
	assert.ErrorIs(t, err, io.EOF, "and nothing else")
	_, err = read(&runtimedv1.ReadFileRequest{RunUid: "sb-uid", Attempt: 2, PodUid: "pod-uid", Path: "in", Archive: runtimev1.Archive_ARCHIVE_TAR})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "an archive of another attempt: %v", err)
	_, err = read(&runtimedv1.ReadFileRequest{RunUid: "sb-uid", Attempt: 1, PodUid: "pod-uid", Path: "in/data.bin", Archive: runtimev1.Archive_ARCHIVE_TAR})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "the Runtime Server's refusal is passed on: %v", err)
}
