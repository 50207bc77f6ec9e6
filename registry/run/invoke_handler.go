package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
)

// deadlineMargin is kept between the invocation's deadline and the
// request's, so that this server's typed 504 arrives before kube-apiserver
// gives up on the request with a plain one.
const deadlineMargin = time.Second

// rpcSlack lets the Runtime Server stop a handler at its deadline, and say
// so, before the call itself is cut.
const rpcSlack = 200 * time.Millisecond

// retryAfterSeconds is what 429 and 503 ask clients to wait.
const retryAfterSeconds = 1

// statusClientClosedRequest is what the metrics record when the caller went
// away before an answer: nobody reads one.
const statusClientClosedRequest = 499

// invokeHandler serves one invocation of the Run name.
type invokeHandler struct {
	router     Router
	maxTimeout time.Duration
	namespace  string
	name       string
	uid        types.UID
	responder  rest.Responder
}

func (h *invokeHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	started := time.Now()
	invokeInFlight.Inc()
	code := h.serve(w, req)
	invokeInFlight.Dec()
	invokeRequests.WithLabelValues(strconv.Itoa(code)).Inc()
	invokeDuration.Observe(time.Since(started).Seconds())
}

// serve answers the invocation and returns the HTTP status it answered.
func (h *invokeHandler) serve(w http.ResponseWriter, req *http.Request) int {
	ctx := req.Context()
	// Minted here and nowhere else: every hop after this one is handed it.
	invocationID := req.Header.Get(invocation.HeaderID)
	if len(invocationID) > invocation.MaxIDBytes {
		return h.fail(apierrors.NewBadRequest(fmt.Sprintf("%s has %d bytes; at most %d are allowed", invocation.HeaderID, len(invocationID), invocation.MaxIDBytes)))
	}
	if invocationID == "" {
		invocationID = newInvocationID()
	}
	w.Header().Set(invocation.HeaderID, invocationID)

	if err := checkContentType(req.Header.Get("Content-Type")); err != nil {
		return h.fail(err)
	}
	uid := h.uid
	if header := types.UID(req.Header.Get(invocation.HeaderRunUID)); header != "" {
		if uid != "" && uid != header {
			return h.fail(apierrors.NewBadRequest(fmt.Sprintf("?uid=%s and %s: %s name different Runs", uid, invocation.HeaderRunUID, header)))
		}
		uid = header
	}
	input, err := readInput(w, req)
	if err != nil {
		return h.fail(err)
	}
	route, err := h.router.Route(ctx, h.namespace, h.name, uid)
	if err != nil {
		return h.fail(routeStatus(err))
	}
	timeout, err := h.invocationTimeout(ctx, route.Deadline)
	if err != nil {
		return h.fail(err)
	}
	caller := ""
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		caller = user.GetName()
	}
	rpcCtx, cancel := context.WithTimeout(ctx, timeout+rpcSlack)
	defer cancel()
	var dispatched peer.Peer
	resp, err := route.Runtimed.Invoke(rpcCtx, &runtimedv1.InvokeRequest{
		RunUid:        string(route.RunUID),
		Attempt:       route.Attempt,
		PodUid:        string(route.PodUID),
		InvocationId:  invocationID,
		Input:         input,
		ContentType:   invocation.ContentTypeJSON, // readInput validated it: nothing downstream scans it again
		TimeoutMillis: timeout.Milliseconds(),
		Caller:        caller,
	}, grpc.Peer(&dispatched))
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return statusClientClosedRequest
		}
		return h.fail(rpcStatus(err, dispatched.Addr != nil, timeout))
	}
	if e := resp.GetError(); e != nil {
		w.Header().Set(invocation.HeaderFunctionError, e.GetType())
	}
	h.responder.Object(http.StatusOK, invokeResult(resp))
	return http.StatusOK
}

// fail answers with err as a metav1.Status (Retry-After on 429 and 503
// comes from its details) and returns its code.
func (h *invokeHandler) fail(err error) int {
	h.responder.Error(err)
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	return http.StatusInternalServerError
}

// invocationTimeout is the request's own deadline less the margin, bounded
// by the server's maximum and the Run's remaining lifetime (runDeadline,
// zero when the Run has none).
func (h *invokeHandler) invocationTimeout(ctx context.Context, runDeadline time.Time) (time.Duration, error) {
	timeout := h.maxTimeout
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline) - deadlineMargin
		if left <= 0 {
			return 0, apierrors.NewBadRequest(fmt.Sprintf("the request's timeout leaves no time to invoke: pass ?timeout= longer than %s", deadlineMargin))
		}
		timeout = min(timeout, left)
	}
	if !runDeadline.IsZero() {
		left := time.Until(runDeadline)
		if left <= 0 {
			return 0, unavailable("the Run's spec.timeout has passed; it is ending")
		}
		timeout = min(timeout, left)
	}
	return timeout, nil
}

// checkContentType accepts JSON, with parameters or without a type at all
// (kubectl create --raw sends none).
func checkContentType(contentType string) error {
	if contentType == "" {
		return nil
	}
	media, _, err := mime.ParseMediaType(contentType)
	if err == nil && media == invocation.ContentTypeJSON {
		return nil
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("Content-Type %q is not supported: the input of a function is JSON (application/json)", contentType),
	}}
}

// readInput reads the body, at most MaxInputBytes of it (a larger body is
// refused without reading the rest), and checks that it is JSON: the one
// scan of the input on its way to the handler.
func readInput(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	tooLarge := apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the input of a function is at most %d bytes", invocation.MaxInputBytes))
	if req.ContentLength > invocation.MaxInputBytes {
		return nil, tooLarge
	}
	size := 512
	if req.ContentLength > 0 {
		size = int(req.ContentLength)
	}
	buf := make([]byte, 0, size)
	body := http.MaxBytesReader(w, req.Body, invocation.MaxInputBytes)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, tooLarge
		}
		if err != nil {
			return nil, apierrors.NewBadRequest("reading the input: " + err.Error())
		}
	}
	if !json.Valid(buf) {
		return nil, apierrors.NewBadRequest("the input is not valid JSON")
	}
	return buf, nil
}

func unavailable(message string) error {
	err := apierrors.NewServiceUnavailable(message)
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds}
	return err
}

// routeStatus is the answer to an invocation the router could not route:
// its API error, with Retry-After when it is a 503.
func routeStatus(err error) error {
	switch {
	case apierrors.IsServiceUnavailable(err):
		var status apierrors.APIStatus
		errors.As(err, &status)
		return unavailable(status.Status().Message)
	case apierrors.IsNotFound(err), apierrors.IsBadRequest(err):
		return err
	}
	return apierrors.NewInternalError(err)
}

// rpcStatus maps runtimed's answer; whether the handler may have run
// decides between the codes that promise it did not (429, 503) and those
// that do not (502, 504).
func rpcStatus(err error, dispatched bool, timeout time.Duration) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.FailedPrecondition:
		return unavailable("the owning runtimed refused the invocation: " + st.Message())
	case codes.ResourceExhausted:
		return apierrors.NewTooManyRequests("the function already has an invocation in flight; one at a time is served", retryAfterSeconds)
	case codes.DeadlineExceeded:
		return apierrors.NewTimeoutError(fmt.Sprintf("the invocation did not complete within %s and was stopped", timeout.Round(time.Millisecond)), 0)
	case codes.InvalidArgument:
		return apierrors.NewBadRequest(st.Message())
	}
	if !dispatched {
		return unavailable("the owning runtimed is unreachable: " + st.Message())
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonInternalError,
		Message: "the invocation was dispatched and its outcome is unknown (the connection to runtimed failed): " + st.Message(),
	}}
}

// invokeResult is runtimed's answer as the API's InvokeResult: the one copy
// of the response shape on this hop. A handler error is still a result.
func invokeResult(resp *runtimedv1.InvokeResponse) *kruntimes.InvokeResult {
	result := &kruntimes.InvokeResult{
		InvocationID:   resp.GetInvocationId(),
		Output:         runtime.RawExtension{Raw: jsonOutput(resp.GetOutput(), resp.GetContentType())},
		Outputs:        resp.GetOutputs(),
		DurationMillis: resp.GetDurationNanos() / int64(time.Millisecond),
	}
	if len(resp.GetStdout()) > 0 || len(resp.GetStderr()) > 0 {
		result.Logs = &kruntimes.InvokeLogs{Stdout: string(resp.GetStdout()), Stderr: string(resp.GetStderr()),
			StdoutTruncated: resp.GetStdoutTruncated(), StderrTruncated: resp.GetStderrTruncated()}
	}
	if e := resp.GetError(); e != nil {
		result.Error = &kruntimes.InvokeError{Type: e.GetType(), Message: e.GetMessage()}
	}
	return result
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

func newInvocationID() string {
	b := make([]byte, 16)
	// crypto/rand.Read never fails on supported platforms.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
