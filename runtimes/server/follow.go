package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/runlog"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// followBatchBytes bounds the data of one FollowLog response, and so what a
// follower holds beyond gRPC's flow-control window.
const followBatchBytes = 64 << 10

// FollowLog implements runtimev1.RuntimeServer. Each follower reads the
// task's bounded log on its own: a write never waits for a follower, and a
// follower that fell behind the kept tail skips ahead, told how many bytes
// it missed.
func (s *Server) FollowLog(req *runtimev1.FollowLogRequest, stream runtimev1.Runtime_FollowLogServer) error {
	t, err := s.lookupTask(req.GetTaskId())
	if err != nil {
		return err
	}
	return followRecorder(stream.Context(), t.log, t.done, req.GetOffset(), "task "+t.id, false, stream)
}

// FollowFunctionLog implements runtimev1.FunctionRuntimeServer: as
// FollowLog, over the bounded tail of what the generation's invocations
// wrote, until the generation ends; or, with a command_id, over what that
// background command wrote, until it ends.
func (s *Server) FollowFunctionLog(req *runtimev1.FollowFunctionLogRequest, stream runtimev1.FunctionRuntime_FollowFunctionLogServer) error {
	reg, err := s.lookupRegistration(req.GetRunUid(), req.GetRegistrationId())
	if err != nil {
		return err
	}
	if id := req.GetCommandId(); id != "" {
		log, done, ok := reg.commands.lookup(id)
		if !ok {
			return status.Errorf(codes.NotFound, "Run %s has no background command %q: start_command answers the IDs, and the %d most recent commands are kept", reg.runUID, id, maxCommandLogs)
		}
		// A command's end comes when it exits or the function's worker goes,
		// the generation's end included.
		return followRecorder(stream.Context(), log, done, req.GetOffset(), "command "+id+" of Run "+reg.runUID, true, stream)
	}
	// The first response comes at once, empty when nothing is kept: it
	// tells where the log stands, and that the follow was accepted.
	return followRecorder(stream.Context(), reg.log, reg.ctx.Done(), req.GetOffset(), "the registration of Run "+reg.runUID, true, stream)
}

// followRecorder sends what log holds from off on, and what is written to
// it after, until done is closed and everything before was sent. With
// announce, the first response is sent even when it holds nothing.
func followRecorder(ctx context.Context, log *runlog.Recorder, done <-chan struct{}, off int64, what string, announce bool, stream grpc.ServerStreamingServer[runtimev1.FollowLogResponse]) error {
	for first := true; ; first = false {
		// Both before the read: a write after it closes changed, and a log
		// that was done before it has nothing more to write.
		changed := log.Changed()
		ended := isClosed(done)
		chunks, start, skipped, written, ok := log.Read(off, followBatchBytes)
		if !ok {
			return status.Errorf(codes.OutOfRange, "offset %d is past the %d bytes %s wrote", off, written, what)
		}
		if len(chunks) > 0 || skipped > 0 || (first && announce) {
			resp := &runtimev1.FollowLogResponse{Offset: start, SkippedBytes: skipped, Written: written, Chunks: make([]*runtimev1.LogChunk, len(chunks))}
			off = start
			for i, c := range chunks {
				resp.Chunks[i] = logChunk(c)
				off += int64(len(c.Data))
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
			continue
		}
		if ended {
			return nil
		}
		select {
		case <-changed:
		case <-done:
		case <-ctx.Done():
			return followEnded(ctx)
		}
	}
}

func followEnded(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "the follow reached its deadline; follow again from the offset reached")
	}
	return status.FromContextError(ctx.Err()).Err()
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func logChunk(c runlog.Chunk) *runtimev1.LogChunk {
	stream := runtimev1.LogStream_LOG_STREAM_STDOUT
	if c.Stream == runlog.StreamStderr {
		stream = runtimev1.LogStream_LOG_STREAM_STDERR
	}
	return &runtimev1.LogChunk{Stream: stream, UnixNano: c.Time.UnixNano(), Data: c.Data, InvocationId: c.Invocation}
}
