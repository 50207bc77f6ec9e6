package runtimedclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// Invoke implements Interface. On an error runtimed answered, the Answer is
// set too, without a Result: whether runtimed replayed the error, and how
// long it took.
func (c *Client) Invoke(ctx context.Context, inv Invocation) (*Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, inv.Timeout+inv.CallSlack)
	defer cancel()
	var dispatched peer.Peer
	var header metadata.MD
	req := &runtimedv1.InvokeRequest{
		RunUid: string(inv.RunUID), Attempt: inv.Attempt, PodUid: string(inv.PodUID),
		CallerSentId: inv.CallerSentID, Caller: inv.Caller,
		Invocation: &runtimev1.InvokeFunctionRequest{
			InvocationId:  inv.ID,
			Input:         inv.Input,
			ContentType:   invocation.ContentTypeJSON,
			TimeoutMillis: inv.Timeout.Milliseconds(),
		},
	}
	if c.legacy.Load() {
		legacyRequest(req)
	}
	resp, err := c.rpc.Invoke(ctx, req, grpc.Peer(&dispatched), grpc.Header(&header))
	if err != nil && req.Invocation != nil && refusedAsLegacy(err) {
		// A runtimed of the release before reads only the fields that
		// release sent, and refused before anything ran: ask again in
		// them, and from now on.
		c.legacy.Store(true)
		legacyRequest(req)
		header = nil
		resp, err = c.rpc.Invoke(ctx, req, grpc.Peer(&dispatched), grpc.Header(&header))
	}
	replayed := replayedBy(header)
	if err != nil {
		var answer *Answer
		if v := header.Get(invocation.MetadataRuntimedNanos); len(v) == 1 {
			if nanos, perr := strconv.ParseInt(v[0], 10, 64); perr == nil {
				answer = &Answer{Runtimed: time.Duration(nanos), Timed: true}
			}
		}
		if answer == nil && replayed {
			answer = &Answer{}
		}
		if answer != nil {
			answer.Replayed = replayed
		}
		return answer, rpcStatus(err, dispatched.Addr != nil, inv.Timeout)
	}
	out := resp.GetResult()
	if out == nil {
		out = legacyResult(resp)
	}
	answer := &Answer{
		Handler:    time.Duration(out.GetDurationNanos()),
		Runtimed:   time.Duration(resp.GetRuntimedNanos()),
		Timed:      resp.GetRuntimedNanos() != 0,
		WorkerWarm: out.GetWorkerWarm(),
		Replayed:   replayed,
	}
	invokeResult(&answer.Result, out)
	return answer, nil
}

// legacyRefusal is how a runtimed of the release before refuses a request
// whose invocation ID it finds in no field it reads: NotStarted, so asking
// again cannot run the handler twice. This server always sends an ID.
const legacyRefusal = "invocation_id: an invocation ID must not be empty"

// refusedAsLegacy says err is a runtimed of the release before refusing
// the request that nests the Runtime Server's.
func refusedAsLegacy(err error) bool {
	st := status.Convert(err)
	return runtimev1.IsNotStarted(err) && st.Code() == codes.InvalidArgument && st.Message() == legacyRefusal
}

// legacyRequest moves req's invocation into the fields of the release
// before, which a runtimed of that release reads.
func legacyRequest(req *runtimedv1.InvokeRequest) {
	call := req.Invocation
	req.Invocation = nil
	req.InvocationId, req.Input, req.ContentType, req.TimeoutMillis = call.GetInvocationId(), call.GetInput(), call.GetContentType(), call.GetTimeoutMillis()
}

// legacyResult is the answer of a runtimed of the release before, which
// repeats the Runtime Server's fields in its own.
func legacyResult(resp *runtimedv1.InvokeResponse) *runtimev1.InvokeFunctionResponse {
	out := &runtimev1.InvokeFunctionResponse{
		InvocationId:    resp.GetInvocationId(),
		Output:          resp.GetOutput(),
		ContentType:     resp.GetContentType(),
		Outputs:         resp.GetOutputs(),
		Stdout:          resp.GetStdout(),
		Stderr:          resp.GetStderr(),
		StdoutTruncated: resp.GetStdoutTruncated(),
		StderrTruncated: resp.GetStderrTruncated(),
		DurationNanos:   resp.GetDurationNanos(),
		WorkerWarm:      resp.GetWorkerWarm(),
	}
	if e := resp.GetError(); e != nil {
		out.Error = &runtimev1.FunctionError{Type: e.GetType(), Message: e.GetMessage()}
	}
	return out
}

// rpcStatus maps runtimed's answer. Only an answer that carries
// runtimev1.NotStarted, or a call that never left this server, promises
// that the handler did not run, and only those get the codes that say so
// (429, 400, 503 + Retry-After); runtimed's AlreadyExists is the 409 of an
// evicted outcome; a code alone promises nothing else (an older or
// custom runtimed's FailedPrecondition, a ResourceExhausted after the
// handler ran), so every other error is 504 (stopped at its deadline) or
// 502 (outcome unknown).
func rpcStatus(err error, dispatched bool, timeout time.Duration) error {
	st := status.Convert(err)
	switch {
	case runtimev1.IsNotStarted(err):
		switch st.Code() {
		case codes.ResourceExhausted:
			// The function is busy, or enough repeats of this ID already
			// wait for the one in flight: runtimed says which.
			return apierrors.NewTooManyRequests("the function already has an invocation in flight ("+st.Message()+"); one at a time is served", retryAfterSeconds)
		case codes.InvalidArgument:
			return apierrors.NewBadRequest(st.Message())
		}
		// Closing for a move, or not (yet) the owner the route named:
		// the Run is about to say where the function went.
		return BecomingReady(Unavailable("the owning runtimed refused the invocation before it started: " + st.Message()))
	case !dispatched:
		return BecomingReady(Unavailable("the owning runtimed is unreachable: " + st.Message()))
	case st.Code() == codes.AlreadyExists:
		// runtimed's answer to a repeat of an ID whose outcome it evicted:
		// the only AlreadyExists that reaches here, since runtimed turns
		// every error of a Runtime Server into Aborted or NotStarted. A
		// 409, not a 502, so that no retry sends the same ID again.
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict, Message: st.Message(),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: invocation.CauseOutcomeEvicted,
				Message: "the outcome of this invocation ID is no longer known and it was not run again; use a new invocation ID"}}},
		}}
	case st.Code() == codes.DeadlineExceeded:
		return apierrors.NewTimeoutError(fmt.Sprintf("the invocation did not complete within %s and was stopped", timeout.Round(time.Millisecond)), 0)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonInternalError,
		Message: "the invocation was dispatched and its outcome is unknown: " + st.Message(),
	}}
}

// invokeResult writes runtimed's answer into result, the API's
// InvokeResult: the one copy of the response shape on this hop. A handler
// error is still a result.
func invokeResult(result *kruntimes.InvokeResult, resp *runtimev1.InvokeFunctionResponse) {
	result.InvocationID = resp.GetInvocationId()
	result.Output = runtime.RawExtension{Raw: jsonOutput(resp.GetOutput(), resp.GetContentType())}
	result.Outputs = resp.GetOutputs()
	result.DurationMillis = resp.GetDurationNanos() / int64(time.Millisecond)
	if len(resp.GetStdout()) > 0 || len(resp.GetStderr()) > 0 {
		// A handler writes bytes; the API's strings are UTF-8.
		result.Logs = &kruntimes.InvokeLogs{Stdout: validUTF8(resp.GetStdout()), Stderr: validUTF8(resp.GetStderr()),
			StdoutTruncated: resp.GetStdoutTruncated(), StderrTruncated: resp.GetStderrTruncated()}
	}
	if e := resp.GetError(); e != nil {
		result.Error = &kruntimes.InvokeError{Type: e.GetType(), Message: e.GetMessage()}
	}
}

// jsonOutput is the handler's output as one JSON value; nil (null) when it
// returned nothing. Output that runtimed says is JSON is not scanned here:
// the serializer's encoding is then its one scan in this server.
func jsonOutput(output []byte, contentType string) []byte {
	switch {
	case len(output) == 0:
		return nil
	case contentType == invocation.ContentTypeJSON, json.Valid(output):
		return output
	}
	// A handler that returned bytes: they arrive as a JSON string, the body
	// staying one JSON document.
	output, _ = json.Marshal(string(output))
	return output
}

// validUTF8 is b as a string, each run of bytes that are not UTF-8
// replaced by U+FFFD.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// replayedBy says runtimed marked its answer as the recorded outcome of an
// earlier invocation with the same caller-sent ID.
func replayedBy(header metadata.MD) bool {
	v := header.Get(invocation.MetadataDeduplicated)
	return len(v) == 1 && v[0] == "true"
}
