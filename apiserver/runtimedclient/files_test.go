package runtimedclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/sandboxfile"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// archiveServer answers WriteFile as a Runtime Server extracting archives
// would, and records what reached it.
type archiveServer struct {
	echoRuntimeServer
	first    *runtimev1.WriteFileRequest
	received int64
	largest  int
	refuse   bool
}

func (s *archiveServer) WriteFile(stream runtimev1.FunctionRuntime_WriteFileServer) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if s.first == nil {
			s.first = msg
		}
		s.received += int64(len(msg.GetData()))
		s.largest = max(s.largest, len(msg.GetData()))
	}
	if s.refuse {
		return status.Error(codes.InvalidArgument, `the archive's entry "../x" leaves the directory it is extracted into`)
	}
	return stream.SendAndClose(&runtimev1.WriteFileResponse{Path: s.first.GetPath(), Size: 42, Files: 3})
}

func TestExtractTarPassesTheArchiveOnThroughRuntimed(t *testing.T) {
	rs := &archiveServer{}
	client, _ := runtimedWith(t, rs)
	key := runtimedclient.FileKey{RunUID: "run-uid", Attempt: 1, PodUID: "pod-uid", Caller: "alice"}
	body := bytes.Repeat([]byte("t"), 2*sandboxfile.ChunkBytes+5)

	got, err := client.ExtractTar(context.Background(), key, "proj", bytes.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, runtimedclient.Extracted{Files: 3, Bytes: 42}, got)
	require.NotNil(t, rs.first)
	assert.Equal(t, runtimev1.Extract_EXTRACT_TAR, rs.first.GetExtract(), "the Runtime Server is told to extract")
	assert.Equal(t, "proj", rs.first.GetPath())
	assert.Equal(t, "reg-1", rs.first.GetRegistrationId(), "runtimed names the live registration")
	assert.Equal(t, int64(len(body)), rs.received)
	assert.LessOrEqual(t, rs.largest, sandboxfile.ChunkBytes, "streamed in chunks")

	*rs = archiveServer{refuse: true}
	_, err = client.ExtractTar(context.Background(), key, "proj", bytes.NewReader(body))
	require.Error(t, err)
	assert.True(t, apierrors.IsBadRequest(err), "a refused archive is a 400: %v", err)

	rs.refuse = false
	_, err = client.ExtractTar(context.Background(), runtimedclient.FileKey{RunUID: "run-uid", Attempt: 2, PodUID: "pod-uid"}, "proj", bytes.NewReader(body))
	var se *apierrors.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, int32(http.StatusServiceUnavailable), se.ErrStatus.Code, "another attempt's tuple is refused before anything is sent on")
}

// directoryServer answers ReadFile as a Runtime Server writing archives
// would, and records what reached it.
type directoryServer struct {
	echoRuntimeServer
	req  *runtimev1.ReadFileRequest
	body []byte
	fail error
}

func (s *directoryServer) ReadFile(req *runtimev1.ReadFileRequest, stream runtimev1.FunctionRuntime_ReadFileServer) error {
	s.req = req
	if s.fail != nil {
		return s.fail
	}
	for data := s.body; len(data) > 0; {
		n := min(sandboxfile.ChunkBytes, len(data))
		if err := stream.Send(&runtimev1.FileChunk{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func TestReadArchivePassesTheArchiveOnThroughRuntimed(t *testing.T) {
	rs := &directoryServer{body: bytes.Repeat([]byte("a"), 2*sandboxfile.ChunkBytes+3)}
	client, _ := runtimedWith(t, rs)
	key := runtimedclient.FileKey{RunUID: "run-uid", Attempt: 1, PodUID: "pod-uid", Caller: "alice"}

	for format, want := range map[kruntimes.RunFilesArchive]runtimev1.Archive{
		kruntimes.RunFilesArchiveTar:     runtimev1.Archive_ARCHIVE_TAR,
		kruntimes.RunFilesArchiveTarGzip: runtimev1.Archive_ARCHIVE_TAR_GZIP,
	} {
		archive, err := client.ReadArchive(context.Background(), key, "proj", format)
		require.NoError(t, err)
		var out bytes.Buffer
		_, err = archive.WriteTo(&out)
		require.NoError(t, err)
		assert.Equal(t, rs.body, out.Bytes(), "%s: the archive is passed on whole", format)
		assert.Equal(t, want, rs.req.GetArchive(), "%s: the Runtime Server is told which archive", format)
		assert.Equal(t, "proj", rs.req.GetPath())
		assert.Equal(t, "reg-1", rs.req.GetRegistrationId(), "runtimed names the live registration")
	}

	rs.fail = status.Error(codes.NotFound, `no file "proj" in the sandbox's workspace`)
	_, err := client.ReadArchive(context.Background(), key, "proj", kruntimes.RunFilesArchiveTar)
	assert.True(t, apierrors.IsNotFound(err), "a missing directory is a 404 before the answer starts: %v", err)
	rs.fail = status.Error(codes.InvalidArgument, `"proj" is not a directory`)
	_, err = client.ReadArchive(context.Background(), key, "proj", kruntimes.RunFilesArchiveTar)
	assert.True(t, apierrors.IsBadRequest(err), "a file is a 400: %v", err)

	rs.req = nil
	_, err = client.ReadArchive(context.Background(), key, "proj", "zip")
	assert.True(t, apierrors.IsBadRequest(err), "an unknown format is a 400: %v", err)
	assert.Nil(t, rs.req, "and nothing is asked of the sandbox")
}
