package runtimedclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/apiserver/logfanout"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// LogKey names a followed attempt on the Pod that runs it.
type LogKey struct {
	RunUID  types.UID
	Attempt int32
	PodUID  types.UID
	// Function says the attempt is a function Run's registration: its
	// follow answers at once (empty when nothing is kept from the offset
	// on), and its chunks carry invocation IDs.
	Function bool
	// Command, with Function, names a background command the
	// registration started (the sandbox's start_command): its output is
	// followed instead of the invocations', until the command ends.
	Command string
}

// LogStream is one follow of an attempt's log: responses until io.EOF
// (the attempt, or the function's registration, ended and everything was
// sent) or an error.
type LogStream interface {
	Recv() (*LogResponse, error)
}

// LogResponse is a stretch of an attempt's log: after SkippedBytes that
// are no longer kept, Chunks from Offset on.
type LogResponse struct {
	Offset, SkippedBytes int64
	Chunks               []runlog.Chunk
	// Written is how much the attempt had written when it was sent.
	Written int64
}

var (
	// ErrLogPastEnd says a follow's offset is past what the attempt
	// wrote: for a function, its Runtime Server restarted and registered
	// it again, so its log starts anew at 0.
	ErrLogPastEnd = errors.New("the offset is past what the attempt wrote")
	// ErrLogUnsupported says the Runtime Server serves no function logs.
	ErrLogUnsupported = errors.New("the Runtime Server does not serve function logs")
	// ErrLogNotFound says the registration has no such command.
	ErrLogNotFound = errors.New("the registration has no such command")
	// ErrLogNotAdmitted says the runtimed no longer admits the follow's
	// fencing tuple: the registration, or the Pod, is gone.
	ErrLogNotAdmitted = errors.New("the runtimed no longer admits the registration")
)

// FollowLog implements Interface. Follows of one task attempt, or of one
// function Run's registration, share one stream through the client's
// fan-out (the first opens it, the last closes it), so N followers cost
// the runtimed and the Runtime Server one.
func (c *Client) FollowLog(ctx context.Context, key LogKey, offset int64) (LogStream, error) {
	open := func(ctx context.Context, offset int64) (logfanout.Stream, error) {
		return c.rpc.FollowLog(ctx, &runtimedv1.FollowLogRequest{
			RunUid: string(key.RunUID), Attempt: key.Attempt, PodUid: string(key.PodUID), Offset: offset, Function: key.Function, Command: key.Command,
		})
	}
	if c.fanout == nil {
		up, err := open(ctx, offset)
		if err != nil {
			return nil, logError(err)
		}
		return logStream{up}, nil
	}
	return logStream{c.fanout.Follow(ctx, logfanout.Key(key), offset, open)}, nil
}

// logStream is runtimed's stream in runlog's terms.
type logStream struct{ up logfanout.Stream }

func (s logStream) Recv() (*LogResponse, error) {
	resp, err := s.up.Recv()
	if err != nil {
		return nil, logError(err)
	}
	out := &LogResponse{Offset: resp.GetOffset(), SkippedBytes: resp.GetSkippedBytes(), Written: resp.GetWritten(),
		Chunks: make([]runlog.Chunk, len(resp.GetChunks()))}
	for i, c := range resp.GetChunks() {
		out.Chunks[i] = chunkOf(c)
	}
	return out, nil
}

// logError marks the codes a follow acts on; io.EOF and the rest go as
// they are.
func logError(err error) error {
	switch status.Code(err) {
	case codes.OutOfRange:
		return fmt.Errorf("%w: %w", ErrLogPastEnd, err)
	case codes.Unimplemented:
		return fmt.Errorf("%w: %w", ErrLogUnsupported, err)
	case codes.NotFound:
		return fmt.Errorf("%w: %w", ErrLogNotFound, err)
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %w", ErrLogNotAdmitted, err)
	}
	return err
}

func chunkOf(c *runtimev1.LogChunk) runlog.Chunk {
	stream := runlog.StreamStdout
	if c.GetStream() == runtimev1.LogStream_LOG_STREAM_STDERR {
		stream = runlog.StreamStderr
	}
	return runlog.Chunk{Stream: stream, Time: time.Unix(0, c.GetUnixNano()), Data: c.GetData(), Invocation: c.GetInvocationId()}
}
