package invoke

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/invocation"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

// Gate says which registration, if any, may serve an invocation: the
// function controller's Admit.
type Gate interface {
	Admit(uid types.UID, attempt int32, podUID types.UID) (registrationID string, err error)
}

// Server serves Runtimed.Invoke.
type Server struct {
	runtimedv1.UnimplementedRuntimedServer
	gate          Gate
	runtimeServer runtimev1.FunctionRuntimeClient
	// runtime names the Runtime of this Pod, for the log line.
	runtime string
	// tasks and podUID serve FollowLog; see FollowTasks.
	tasks    runtimev1.RuntimeClient
	podUID   types.UID
	stopping <-chan struct{}
}

// NewServer returns the invoke server of the Runtime runtime: it admits
// through gate and invokes on runtimeServer.
func NewServer(gate Gate, runtimeServer runtimev1.FunctionRuntimeClient, runtime string) *Server {
	return &Server{gate: gate, runtimeServer: runtimeServer, runtime: runtime}
}

// Invoke implements runtimedv1.RuntimedServer. An error that carries
// runtimev1.NotStarted promises that no handler started: runtimed's own
// refusals, the Runtime Server's (which mark theirs) and a call that never
// reached the Runtime Server. DeadlineExceeded is an invocation stopped at
// its deadline; any other error is Aborted: the handler may have run.
func (s *Server) Invoke(ctx context.Context, req *runtimedv1.InvokeRequest) (*runtimedv1.InvokeResponse, error) {
	started := time.Now()
	resp, err := s.invoke(ctx, req)
	code := status.Code(err)
	metrics.Invocations.WithLabelValues(code.String()).Inc()
	// One line per invocation: who called what, and how it ended; never
	// the input, the output or a credential.
	klog.FromContext(ctx).Info("Invocation", "runtime", s.runtime, "runUID", req.GetRunUid(), "attempt", req.GetAttempt(),
		"invocationID", req.GetInvocationId(), "caller", req.GetCaller(), "code", code.String(), "duration", time.Since(started),
		"functionError", resp.GetError().GetType())
	return resp, err
}

func (s *Server) invoke(ctx context.Context, req *runtimedv1.InvokeRequest) (*runtimedv1.InvokeResponse, error) {
	if err := invocation.CheckID(req.GetInvocationId()); err != nil {
		return nil, runtimev1.NotStartedError(codes.InvalidArgument, "invocation_id: %v", err)
	}
	switch {
	case len(req.GetInput()) > invocation.MaxInputBytes:
		return nil, runtimev1.NotStartedError(codes.InvalidArgument, "input has %d bytes; at most %d are allowed", len(req.GetInput()), invocation.MaxInputBytes)
	case req.GetTimeoutMillis() < 0:
		return nil, runtimev1.NotStartedError(codes.InvalidArgument, "timeout_millis must not be negative")
	}
	id, err := s.gate.Admit(types.UID(req.GetRunUid()), req.GetAttempt(), types.UID(req.GetPodUid()))
	if err != nil {
		return nil, runtimev1.NotStartedError(codes.FailedPrecondition, "%s", err.Error())
	}
	// The content type goes on as it came: application/json says the
	// apiserver validated the input, so the Runtime Server does not scan it.
	var reached peer.Peer
	out, err := s.runtimeServer.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{
		RunUid:         req.GetRunUid(),
		RegistrationId: id,
		InvocationId:   req.GetInvocationId(),
		Input:          req.GetInput(),
		ContentType:    req.GetContentType(),
		TimeoutMillis:  req.GetTimeoutMillis(),
	}, grpc.Peer(&reached))
	if err != nil {
		return nil, invokeError(err, reached.Addr != nil)
	}
	resp := &runtimedv1.InvokeResponse{
		InvocationId:    out.GetInvocationId(),
		Output:          out.GetOutput(),
		Outputs:         out.GetOutputs(),
		Stdout:          out.GetStdout(),
		Stderr:          out.GetStderr(),
		StdoutTruncated: out.GetStdoutTruncated(),
		StderrTruncated: out.GetStderrTruncated(),
		DurationNanos:   out.GetDurationNanos(),
		ContentType:     out.GetContentType(),
	}
	if e := out.GetError(); e != nil {
		resp.Error = &runtimedv1.FunctionError{Type: e.GetType(), Message: e.GetMessage()}
	}
	return resp, nil
}

// invokeError maps the Runtime Server's answer to what the apiserver makes
// of it; reached says the call got to the Runtime Server. Only an explicit
// NotStarted, or a call that never left, says that nothing ran: a code
// alone does not (a custom Runtime Server may answer ResourceExhausted or
// FailedPrecondition after its handler ran).
func invokeError(err error, reached bool) error {
	st := status.Convert(err)
	switch {
	case runtimev1.IsNotStarted(err):
		return err
	case !reached:
		return runtimev1.NotStartedError(st.Code(), "the Runtime Server was not reached: %s", st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return err
	case st.Code() == codes.Canceled && errors.Is(err, context.Canceled):
		// The apiserver went away: nobody reads this answer.
		return err
	}
	// Any other error, and Unavailable, which is also how a connection that
	// broke mid-call ends: dispatched, outcome unknown.
	return status.Errorf(codes.Aborted, "the invocation was dispatched and its outcome is unknown (%s): %s", st.Code(), st.Message())
}
