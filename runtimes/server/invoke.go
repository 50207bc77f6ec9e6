package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/runlog"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/outputs"
)

// InvokeFunction implements runtimev1.FunctionRuntimeServer.
func (s *Server) InvokeFunction(ctx context.Context, req *runtimev1.InvokeFunctionRequest) (*runtimev1.InvokeFunctionResponse, error) {
	// Every refusal up to the handler's start carries NotStarted: runtimed
	// and the apiserver answer a retryable code only for those.
	invocationID := req.GetInvocationId()
	if err := invocation.CheckID(invocationID); err != nil {
		return nil, runtimev1.NotStartedError(codes.InvalidArgument, "invocation_id: %v: pass the ID the apiserver minted", err)
	}
	if len(req.GetInput()) > invocation.MaxInputBytes {
		return nil, runtimev1.NotStartedError(codes.InvalidArgument, "input has %d bytes; at most %d are allowed", len(req.GetInput()), invocation.MaxInputBytes)
	}
	contentType := req.GetContentType()
	if contentType == "" {
		// A caller that names no content type has not checked the input:
		// it is JSON by default, and validated here. application/json named
		// by the caller was validated by the apiserver and is not scanned
		// again.
		if !json.Valid(req.GetInput()) {
			return nil, runtimev1.NotStartedError(codes.InvalidArgument, "input is not valid JSON; send a JSON document or another content_type")
		}
		contentType = invocation.ContentTypeJSON
	}
	if req.GetTimeoutMillis() < 0 {
		return nil, runtimev1.NotStartedError(codes.InvalidArgument, "timeout_millis must not be negative")
	}
	reg, err := s.lookupRegistration(req.GetRunUid(), req.GetRegistrationId())
	if err != nil {
		return nil, runtimev1.MarkNotStarted(err)
	}

	select {
	case reg.slot <- struct{}{}:
	default:
		return nil, runtimev1.NotStartedError(codes.ResourceExhausted, "Run %s already has an invocation in flight; retry after it completes", reg.runUID)
	}
	defer func() { <-reg.slot }()

	reg.mu.Lock()
	fn, st := reg.fn, reg.statusLocked()
	switch {
	case reg.ended:
		reg.mu.Unlock()
		return nil, runtimev1.NotStartedError(codes.FailedPrecondition, "registration ID %q is stale: its generation ended", reg.id)
	case st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_DRAINING:
		reg.mu.Unlock()
		return nil, runtimev1.NotStartedError(codes.Unavailable, "Run %s is being unregistered and accepts no new invocations", reg.runUID)
	case st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_REGISTERING:
		reg.mu.Unlock()
		return nil, runtimev1.NotStartedError(codes.Unavailable, "Run %s is still registering; retry once RegisterFunction returned READY", reg.runUID)
	case st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_FAILED:
		reg.mu.Unlock()
		return nil, runtimev1.NotStartedError(codes.FailedPrecondition, "Run %s registration FAILED (%s); register a higher attempt", reg.runUID, st.GetFatalError())
	}
	started := s.opts.Clock.Now()
	reg.inFlight++
	reg.lastActivity = started
	reg.mu.Unlock()
	defer func() {
		reg.mu.Lock()
		reg.inFlight--
		reg.lastActivity = s.opts.Clock.Now()
		reg.mu.Unlock()
	}()

	invCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if ms := req.GetTimeoutMillis(); ms > 0 {
		var cancelTimeout context.CancelFunc
		invCtx, cancelTimeout = context.WithTimeout(invCtx, time.Duration(ms)*time.Millisecond)
		defer cancelTimeout()
	}
	stop := context.AfterFunc(reg.ctx, func() { cancel(context.Cause(reg.ctx)) })
	defer stop()

	deadline, _ := invCtx.Deadline()
	inv := language.Invocation{ID: invocationID, RunUID: reg.runUID, Input: req.GetInput(), ContentType: contentType, Deadline: deadline}
	logger := klog.FromContext(ctx)
	res, err := fn.Invoke(invCtx, inv)
	duration := s.opts.Clock.Since(started)
	if err != nil {
		code, msg := invokeErrorStatus(ctx, invCtx, reg, fn, err)
		logger.V(2).Info("Invocation failed", "runUID", reg.runUID, "invocationID", invocationID, "code", code.String())
		return nil, status.Errorf(code, "invocation %s: %s", invocationID, msg)
	}
	if logger.V(4).Enabled() {
		logger.V(4).Info("Invocation completed", "runUID", reg.runUID, "invocationID", invocationID, "duration", duration, "functionError", res.Error != nil)
	}
	resp := boundResult(invocationID, contentType, duration, res)
	// Followers of the Run's log get what the invocation wrote as it ends.
	reg.log.WriteInvocation(runlog.StreamStdout, invocationID, resp.GetStdout())
	reg.log.WriteInvocation(runlog.StreamStderr, invocationID, resp.GetStderr())
	return resp, nil
}

// invokeErrorStatus maps why an invocation produced no result to a code and
// a message that tells runtimed what happened to the registration.
func invokeErrorStatus(rpcCtx, invCtx context.Context, reg *registration, fn language.Function, err error) (codes.Code, string) {
	switch {
	case reg.ctx.Err() != nil || errors.Is(context.Cause(invCtx), errUnregistered):
		return codes.Aborted, "the registration was unregistered or superseded during the invocation; its outcome is unknown"
	case errors.Is(invCtx.Err(), context.DeadlineExceeded):
		return codes.DeadlineExceeded, "the invocation exceeded its deadline and was stopped; the registration stays usable"
	case rpcCtx.Err() != nil:
		return status.FromContextError(rpcCtx.Err()).Code(), "the caller went away; the invocation was stopped"
	case fn.Failure() != nil:
		return codes.FailedPrecondition, truncateMessage("the registration FAILED: " + fn.Failure().Error() + "; register a higher attempt")
	default:
		return codes.Internal, truncateMessage(err.Error())
	}
}

// boundResult applies the invoke contract's bounds to what the handler
// produced. Exceeding them is the handler's failure, so it becomes a function
// error rather than an RPC error.
func boundResult(invocationID, contentType string, duration time.Duration, res *language.Result) *runtimev1.InvokeFunctionResponse {
	resp := &runtimev1.InvokeFunctionResponse{
		InvocationId:    invocationID,
		Output:          res.Output,
		ContentType:     res.ContentType,
		Outputs:         res.Outputs,
		Stdout:          language.Truncate(res.Stdout, language.MaxInvocationLogBytes, false),
		Stderr:          language.Truncate(res.Stderr, language.MaxInvocationLogBytes, true),
		StdoutTruncated: res.StdoutTruncated || len(res.Stdout) > language.MaxInvocationLogBytes,
		StderrTruncated: res.StderrTruncated || len(res.Stderr) > language.MaxInvocationLogBytes,
		DurationNanos:   duration.Nanoseconds(),
		WorkerWarm:      res.WorkerWarm,
	}
	if resp.ContentType == "" {
		resp.ContentType = contentType
	}
	ferr := res.Error
	if ferr == nil && len(resp.Output) > invocation.MaxOutputBytes {
		ferr = &language.FunctionError{Type: "OutputTooLarge", Message: fmt.Sprintf("the handler returned %d bytes; at most %d are allowed", len(resp.Output), invocation.MaxOutputBytes)}
	}
	if ferr == nil {
		if err := outputs.Validate(resp.Outputs); err != nil {
			ferr = &language.FunctionError{Type: outputs.Reason(err), Message: err.Error()}
		}
	}
	if ferr != nil {
		resp.Output = nil
		resp.Outputs = nil
		// Protobuf strings must be UTF-8 (an invalid one fails the whole
		// answer), and a handler's bytes need not be: invalid bytes become
		// U+FFFD before the bounds are applied.
		resp.Error = &runtimev1.FunctionError{
			Type:    language.Truncate(validUTF8(ferr.Type), invocation.MaxIDBytes, false),
			Message: language.Truncate(validUTF8(ferr.Message), language.MaxErrorMessageBytes, false),
			Stack:   language.Truncate(validUTF8(ferr.Stack), language.MaxErrorStackBytes, true),
		}
	}
	return resp
}

// validUTF8 is s with each run of bytes that are not UTF-8 replaced by
// U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
