package invoke

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// ReadFile implements runtimedv1.RuntimedServer: once the gate admitted
// the fencing tuple as it would an invocation, it passes the Runtime
// Server's chunks of the file (or of a directory's archive) on, one by
// one: what runtimed holds of a file is a chunk, whatever its size.
func (s *Server) ReadFile(req *runtimedv1.ReadFileRequest, stream runtimedv1.Runtimed_ReadFileServer) (err error) {
	started, sent := time.Now(), int64(0)
	op := "read"
	if req.GetArchive() != runtimev1.Archive_ARCHIVE_NONE {
		op = "archive"
	}
	defer func() {
		s.fileLine(stream.Context(), op, req.GetRunUid(), req.GetAttempt(), req.GetCaller(), sent, started, err)
	}()
	id, err := s.admitFile(req.GetRunUid(), req.GetAttempt(), req.GetPodUid())
	if err != nil {
		return err
	}
	ctx, cancel := s.fileContext(stream.Context())
	defer cancel()
	up, err := s.runtimeServer.ReadFile(ctx, &runtimev1.ReadFileRequest{RunUid: req.GetRunUid(), RegistrationId: id, Path: req.GetPath(), Archive: req.GetArchive()})
	if err != nil {
		return err
	}
	for {
		chunk, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(chunk); err != nil {
			return err
		}
		sent += int64(len(chunk.GetData()))
	}
}

// WriteFile implements runtimedv1.RuntimedServer: it admits the fencing
// tuple of the first message and passes every message's file part on to
// the Runtime Server as it comes. Only the apiserver closing its side
// closes the Runtime Server's, which then replaces the file; any error
// cancels the call, and the Runtime Server drops what it received.
func (s *Server) WriteFile(stream runtimedv1.Runtimed_WriteFileServer) (err error) {
	started, written := time.Now(), int64(0)
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "the first message of WriteFile carries the fencing tuple and the path")
	}
	if err != nil {
		return err
	}
	op := "write"
	if first.GetFile().GetExtract() == runtimev1.Extract_EXTRACT_TAR {
		op = "extract"
	}
	defer func() {
		s.fileLine(stream.Context(), op, first.GetRunUid(), first.GetAttempt(), first.GetCaller(), written, started, err)
	}()
	id, err := s.admitFile(first.GetRunUid(), first.GetAttempt(), first.GetPodUid())
	if err != nil {
		return err
	}
	ctx, cancel := s.fileContext(stream.Context())
	defer cancel()
	up, err := s.runtimeServer.WriteFile(ctx)
	if err != nil {
		return err
	}
	file := first.GetFile()
	if file == nil {
		file = &runtimev1.WriteFileRequest{}
	}
	file.RunUid, file.RegistrationId = first.GetRunUid(), id
	for {
		if err := up.Send(file); err != nil {
			// The Runtime Server ended the call: its error comes with
			// CloseAndRecv.
			break
		}
		written += int64(len(file.GetData()))
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if file = msg.GetFile(); file == nil {
			file = &runtimev1.WriteFileRequest{}
		}
	}
	resp, err := up.CloseAndRecv()
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

// admitFile checks a file call's fencing tuple as the gate admits an
// invocation's, and returns the registration ID to call with.
func (s *Server) admitFile(runUID string, attempt int32, podUID string) (string, error) {
	if runUID == "" || attempt < 1 {
		return "", status.Error(codes.InvalidArgument, "run_uid and an attempt of at least 1 name the sandbox whose files are read or written")
	}
	id, err := s.gate.Admit(types.UID(runUID), attempt, types.UID(podUID))
	if err != nil {
		return "", status.Error(codes.FailedPrecondition, err.Error())
	}
	return id, nil
}

// fileContext is ctx, ended too when this Pod may no longer run anything
// (see Bound): a write after that would land in a workspace the Run left.
func (s *Server) fileContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.bound == nil {
		return context.WithCancel(ctx)
	}
	return s.bound.Bound(ctx)
}

// fileLine is the audit line of one file call: who read or wrote how much
// of which Run's workspace, and how it ended; never the path or the bytes.
func (s *Server) fileLine(ctx context.Context, op, runUID string, attempt int32, caller string, n int64, started time.Time, err error) {
	klog.FromContext(ctx).Info("Sandbox file", "op", op, "runtime", s.runtime, "runUID", runUID, "attempt", attempt,
		"caller", caller, "code", status.Code(err).String(), "bytes", n, "duration", time.Since(started))
}
