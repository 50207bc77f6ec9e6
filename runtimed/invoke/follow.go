package invoke

import (
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// FollowTasks lets s serve FollowLog: the output of the task attempts the
// Pod podUID executes, read from the Runtime Server tasks.
func (s *Server) FollowTasks(tasks runtimev1.RuntimeClient, podUID types.UID) *Server {
	s.tasks, s.podUID = tasks, podUID
	return s
}

// FollowLog implements runtimedv1.RuntimedServer: it passes the Runtime
// Server's stream of the attempt on, response by response, so the
// follower's pace is the only buffer: nothing here grows with the log.
func (s *Server) FollowLog(req *runtimedv1.FollowLogRequest, stream runtimedv1.Runtimed_FollowLogServer) error {
	if s.tasks == nil {
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
	up, err := s.tasks.FollowLog(stream.Context(), &runtimev1.FollowLogRequest{
		TaskId: runstatus.ExecutionID(types.UID(req.GetRunUid()), req.GetAttempt()),
		Offset: req.GetOffset(),
	})
	if err != nil {
		return err
	}
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
