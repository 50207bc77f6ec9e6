package invoke

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
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
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

// handler serves one invocation of the Run name.
type handler struct {
	rest      *REST
	namespace string
	name      string
	uid       types.UID
	responder rest.Responder
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	started := time.Now()
	inFlight.Inc()
	code := h.serve(w, req)
	inFlight.Dec()
	requestsTotal.WithLabelValues(strconv.Itoa(code)).Inc()
	requestDuration.Observe(time.Since(started).Seconds())
}

// serve answers the invocation and returns the HTTP status it answered.
func (h *handler) serve(w http.ResponseWriter, req *http.Request) int {
	ctx := req.Context()
	invocationID := req.Header.Get(invocation.HeaderID)
	if len(invocationID) > invocation.MaxIDBytes {
		return h.fail(w, apierrors.NewBadRequest(fmt.Sprintf("%s has %d bytes; at most %d are allowed", invocation.HeaderID, len(invocationID), invocation.MaxIDBytes)))
	}
	if invocationID == "" {
		invocationID = newInvocationID()
	}
	w.Header().Set(invocation.HeaderID, invocationID)

	if h.rest.cache == nil {
		return h.fail(w, unavailable(h.rest.off))
	}
	if err := checkContentType(req.Header.Get("Content-Type")); err != nil {
		return h.fail(w, err)
	}
	uid := h.uid
	if header := types.UID(req.Header.Get(invocation.HeaderRunUID)); header != "" {
		if uid != "" && uid != header {
			return h.fail(w, apierrors.NewBadRequest(fmt.Sprintf("?uid=%s and %s: %s name different Runs", uid, invocation.HeaderRunUID, header)))
		}
		uid = header
	}
	input, err := readInput(w, req)
	if err != nil {
		return h.fail(w, err)
	}
	if !h.rest.cache.synced() {
		return h.fail(w, unavailable("the invoke routing cache is still starting"))
	}
	rt, err := h.rest.cache.lookup(ctx, h.namespace, h.name, uid)
	if err != nil {
		return h.fail(w, routeStatus(err, h.name))
	}
	timeout, err := h.invocationTimeout(ctx, rt)
	if err != nil {
		return h.fail(w, err)
	}
	client, err := h.rest.conns.client(rt.podIP, h.namespace, rt.runtime)
	if err != nil {
		return h.fail(w, unavailable(err.Error()))
	}
	caller := ""
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		caller = user.GetName()
	}
	rpcCtx, cancel := context.WithTimeout(ctx, timeout+rpcSlack)
	defer cancel()
	var dispatched peer.Peer
	resp, err := client.Invoke(rpcCtx, &runtimedv1.InvokeRequest{
		RunUid:        string(rt.runUID),
		Attempt:       rt.attempt,
		PodUid:        string(rt.podUID),
		InvocationId:  invocationID,
		Input:         input,
		TimeoutMillis: timeout.Milliseconds(),
		Caller:        caller,
	}, grpc.Peer(&dispatched))
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			return 499 // the caller went away; nobody reads an answer
		}
		return h.fail(w, rpcStatus(err, dispatched.Addr != nil, timeout))
	}
	return writeResult(w, resp)
}

// fail answers with err as a metav1.Status (Retry-After on 429 and 503
// comes from its details) and returns its code.
func (h *handler) fail(w http.ResponseWriter, err error) int {
	h.responder.Error(err)
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	return http.StatusInternalServerError
}

// invocationTimeout is the request's own deadline less the margin, bounded
// by the server's maximum and the Run's remaining lifetime.
func (h *handler) invocationTimeout(ctx context.Context, rt route) (time.Duration, error) {
	timeout := h.rest.maxTimeout
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline) - deadlineMargin
		if left <= 0 {
			return 0, apierrors.NewBadRequest(fmt.Sprintf("the request's timeout leaves no time to invoke: pass ?timeout= longer than %s", deadlineMargin))
		}
		timeout = min(timeout, left)
	}
	if !rt.deadline.IsZero() {
		left := time.Until(rt.deadline)
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
	if err == nil && media == "application/json" {
		return nil
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("Content-Type %q is not supported: the input of a function is JSON (application/json)", contentType),
	}}
}

// readInput reads the JSON body, at most MaxInputBytes of it: a larger body
// is refused without reading the rest.
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

// routeStatus is the answer to an invocation that could not be routed.
func routeStatus(err error, name string) error {
	var re *routeError
	if !errors.As(err, &re) {
		return apierrors.NewInternalError(err)
	}
	switch re.code {
	case http.StatusNotFound:
		return apierrors.NewNotFound(kruntimes.Resource("runs"), name)
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(re.message)
	}
	return unavailable(re.message)
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

// writeResult answers 200 with the InvokeResult; a handler error is still
// 200, with the error in the body and its type in a header.
func writeResult(w http.ResponseWriter, resp *runtimedv1.InvokeResponse) int {
	output := resp.GetOutput()
	if len(output) > 0 && !json.Valid(output) {
		// A handler (bash) that printed text: its output arrives as a JSON
		// string, the body staying one JSON document.
		output, _ = json.Marshal(string(output))
	}
	result := v1alpha1.InvokeResult{
		TypeMeta:       metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "InvokeResult"},
		InvocationID:   resp.GetInvocationId(),
		Output:         runtime.RawExtension{Raw: output},
		Outputs:        resp.GetOutputs(),
		DurationMillis: resp.GetDurationNanos() / int64(time.Millisecond),
	}
	if len(resp.GetStdout()) > 0 || len(resp.GetStderr()) > 0 {
		result.Logs = &v1alpha1.InvokeLogs{Stdout: string(resp.GetStdout()), Stderr: string(resp.GetStderr()),
			StdoutTruncated: resp.GetStdoutTruncated(), StderrTruncated: resp.GetStderrTruncated()}
	}
	if e := resp.GetError(); e != nil {
		result.Error = &v1alpha1.InvokeError{Type: e.GetType(), Message: e.GetMessage()}
		w.Header().Set(invocation.HeaderFunctionError, e.GetType())
	}
	body, err := json.Marshal(&result)
	if err != nil {
		klog.Background().Error(err, "Encoding an invoke result failed", "invocationID", resp.GetInvocationId())
		w.WriteHeader(http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return http.StatusOK
}

func newInvocationID() string {
	b := make([]byte, 16)
	// crypto/rand.Read never fails on supported platforms.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
