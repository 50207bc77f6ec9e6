package invoke

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// A follow of a task the Runtime Server does not know (yet) tries again
// every followNotFoundRetry for followNotFoundWait.
const (
	followNotFoundRetry = 10 * time.Millisecond
	followNotFoundWait  = 3 * time.Second
)

// FollowTasks lets s serve FollowLog: the output of the task attempts the
// Pod podUID executes, read from the Runtime Server tasks. Follows end
// (Unavailable) when ctx ends, so that runtimed's shutdown does not wait
// for them: the apiserver follows again from the offset it reached.
func (s *Server) FollowTasks(ctx context.Context, tasks runtimev1.RuntimeClient, podUID types.UID) *Server {
	s.tasks, s.podUID, s.stopping = tasks, podUID, ctx.Done()
	return s
}

// FollowLog implements runtimedv1.RuntimedServer: it passes the Runtime
// Server's stream of the task attempt, or of the function Run's
// registration (req.Function, admitted by the gate as an invocation
// would be), on, response by response, so the follower's pace is the only
// buffer: nothing here grows with the log.
func (s *Server) FollowLog(req *runtimedv1.FollowLogRequest, stream runtimedv1.Runtimed_FollowLogServer) error {
	if s.tasks == nil && !req.GetFunction() {
		return status.Error(codes.Unimplemented, "this runtimed does not serve task logs")
	}
	switch {
	case req.GetRunUid() == "" || req.GetAttempt() < 1:
		return status.Error(codes.InvalidArgument, "run_uid and an attempt of at least 1 name the execution to follow")
	case req.GetOffset() < 0:
		return status.Error(codes.InvalidArgument, "offset must not be negative")
	case types.UID(req.GetPodUid()) != s.podUID:
		return status.Errorf(codes.FailedPrecondition, "the follow is addressed to Pod UID %q; this is Pod UID %q", req.GetPodUid(), s.podUID)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	var err error
	if req.GetFunction() {
		err = s.followFunctionLog(ctx, req, stream)
	} else {
		err = s.followLog(ctx, req, stream)
	}
	if err != nil && stream.Context().Err() == nil && isClosed(s.stopping) {
		return status.Error(codes.Unavailable, "runtimed is shutting down; follow again from the offset reached")
	}
	return err
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// followFunctionLog passes the Runtime Server's stream of the function
// Run's registration on, once the gate admitted the fencing tuple as it
// would admit an invocation.
func (s *Server) followFunctionLog(ctx context.Context, req *runtimedv1.FollowLogRequest, stream runtimedv1.Runtimed_FollowLogServer) error {
	id, err := s.gate.Admit(types.UID(req.GetRunUid()), req.GetAttempt(), types.UID(req.GetPodUid()))
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	up, err := s.runtimeServer.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: req.GetRunUid(), RegistrationId: id, Offset: req.GetOffset(), CommandId: req.GetCommand()})
	if err != nil {
		return err
	}
	return relay(up, stream)
}

// relay sends what up sends, response by response, until it ends.
func relay(up grpc.ServerStreamingClient[runtimev1.FollowLogResponse], stream runtimedv1.Runtimed_FollowLogServer) error {
	for {
		resp, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *Server) followLog(ctx context.Context, req *runtimedv1.FollowLogRequest, stream runtimedv1.Runtimed_FollowLogServer) error {
	id := runstatus.ExecutionID(types.UID(req.GetRunUid()), req.GetAttempt())
	// The apiserver follows an attempt as soon as the Run says Running,
	// which runtimed writes right before it executes the task: a task not
	// there yet is waited for a moment, so the first line is not late.
	notYet := time.Now().Add(followNotFoundWait)
	var up grpc.ServerStreamingClient[runtimev1.FollowLogResponse]
	var first *runtimev1.FollowLogResponse
	for {
		var err error
		up, err = s.tasks.FollowLog(ctx, &runtimev1.FollowLogRequest{TaskId: id, Offset: req.GetOffset()})
		if err != nil {
			return err
		}
		// A stream's error arrives with its first message.
		first, err = up.Recv()
		if status.Code(err) != codes.NotFound || time.Now().After(notYet) {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			break
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(followNotFoundRetry):
		}
	}
	if err := stream.Send(first); err != nil {
		return err
	}
	return relay(up, stream)
}
