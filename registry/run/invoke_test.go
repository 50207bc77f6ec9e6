package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics/testutil"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/install"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/toolschema"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// codecs serializes as the API server's scheme does.
var codecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	unversioned := schema.GroupVersion{Version: "v1"}
	metav1.AddToGroupVersion(scheme, unversioned)
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{})
	return serializer.NewCodecFactory(scheme)
}()

// responder writes as the API server's responder for runs/invoke does:
// objects and errors negotiated through the scheme's serializers.
type responder struct {
	w   http.ResponseWriter
	req *http.Request
}

func (r responder) Object(code int, obj runtime.Object) {
	responsewriters.WriteObjectNegotiated(codecs, negotiation.DefaultEndpointRestrictions, v1alpha1.SchemeGroupVersion, r.w, r.req, code, obj, false)
}

func (r responder) Error(err error) {
	responsewriters.ErrorNegotiated(err, codecs, v1alpha1.SchemeGroupVersion, r.w, r.req)
}

// fakeRouter routes every invocation to its runtimed, or refuses with err.
type fakeRouter struct {
	err      error
	deadline time.Time
	runtimed *fakeRuntimed
	// asked is the UID precondition the handler routed with.
	asked types.UID
	// input is the Run's compiled input schema; nil when it has none.
	input *toolschema.Validator
	// client is runtimed's, made at the first Route, as the router keeps
	// one per Pod.
	client *runtimedclient.Client
}

func (r *fakeRouter) Route(_ context.Context, namespace, name string, uid types.UID) (*Route, error) {
	r.asked = uid
	if r.err != nil {
		return nil, r.err
	}
	if namespace != "ns" || name != "fn" {
		return nil, apierrors.NewNotFound(kruntimes.Resource("runs"), name)
	}
	if r.client == nil {
		r.client = runtimedclient.New(r.runtimed, nil)
	}
	return &Route{RunUID: "run-uid", Attempt: 2, PodUID: "pod-uid", Deadline: r.deadline, Runtimed: r.client, Input: r.input}, nil
}

// fakeRuntimed answers as runtimed would: with respond's result, or err
// after the call was dispatched (or not).
type fakeRuntimed struct {
	respond    func(*runtimedv1.InvokeRequest) *runtimedv1.InvokeResponse
	err        error
	dispatched bool
	// during happens while the call is in flight.
	during func()
	// got is the request it was sent; nil when it was not called.
	got *runtimedv1.InvokeRequest
	// deadline is the call's.
	deadline time.Time
	// header is the gRPC response header it answers with.
	header metadata.MD
}

// FollowLog is not what these tests call.
func (f *fakeRuntimed) FollowLog(context.Context, *runtimedv1.FollowLogRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[runtimev1.FollowLogResponse], error) {
	return nil, status.Error(codes.Unimplemented, "not in this test")
}

// ReadFile and WriteFile are not what these tests call.
func (f *fakeRuntimed) ReadFile(context.Context, *runtimedv1.ReadFileRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[runtimev1.FileChunk], error) {
	return nil, status.Error(codes.Unimplemented, "not in this test")
}

func (f *fakeRuntimed) WriteFile(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[runtimedv1.WriteFileRequest, runtimev1.WriteFileResponse], error) {
	return nil, status.Error(codes.Unimplemented, "not in this test")
}

func (f *fakeRuntimed) Invoke(ctx context.Context, in *runtimedv1.InvokeRequest, opts ...grpc.CallOption) (*runtimedv1.InvokeResponse, error) {
	f.got = in
	f.deadline, _ = ctx.Deadline()
	if f.during != nil {
		f.during()
	}
	if f.dispatched || f.err == nil {
		for _, opt := range opts {
			if p, ok := opt.(grpc.PeerCallOption); ok {
				p.PeerAddr.Addr = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 9443}
			}
			if h, ok := opt.(grpc.HeaderCallOption); ok && f.header != nil {
				*h.HeaderAddr = f.header
			}
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	if f.respond != nil {
		return f.respond(in), nil
	}
	return &runtimedv1.InvokeResponse{InvocationId: in.GetInvocation().GetInvocationId(), Output: []byte(`{"ok":true}`), DurationNanos: int64(12 * time.Millisecond)}, nil
}

// call is one request to runs/invoke.
type call struct {
	body        []byte
	contentType string
	headers     map[string]string
	uid         string
	// timeout is the request's deadline (?timeout=); none when zero.
	timeout time.Duration
	ctx     context.Context
}

// answer is what the handler wrote, and the code it counted.
type answer struct {
	code    int
	written int
	header  http.Header
	body    []byte
}

func (a answer) status(t *testing.T) metav1.Status {
	t.Helper()
	var st metav1.Status
	require.NoError(t, json.Unmarshal(a.body, &st), "an error body is a metav1.Status: %s", a.body)
	assert.Equal(t, "Status", st.Kind)
	assert.Equal(t, int32(a.code), st.Code)
	return st
}

func (a answer) result(t *testing.T) v1alpha1.InvokeResult {
	t.Helper()
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	var r v1alpha1.InvokeResult
	require.NoError(t, json.Unmarshal(a.body, &r), "%s", a.body)
	assert.Equal(t, metav1.TypeMeta{Kind: "InvokeResult", APIVersion: "kruntimes.io/v1alpha1"}, r.TypeMeta)
	return r
}

// invoke serves inv with the REST over router, as the API server does for
// POST …/namespaces/ns/runs/fn/invoke.
func invoke(t *testing.T, router Router, maxTimeout time.Duration, inv call) answer {
	t.Helper()
	return invokeWith(t, router, InvokeSettings{MaxTimeout: maxTimeout}, inv)
}

// invokeWith serves inv with the REST over router and settings.
func invokeWith(t *testing.T, router Router, settings InvokeSettings, inv call) answer {
	t.Helper()
	return invokeOn(t, newInvokeREST(router, settings), inv)
}

// invokeOn serves inv through r, which keeps what its invocations share.
func invokeOn(t *testing.T, r *InvokeREST, inv call) answer {
	t.Helper()
	if inv.body == nil {
		inv.body = []byte(`{}`)
	}
	ctx := inv.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	if inv.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, inv.timeout)
		t.Cleanup(cancel)
	}
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "alice"})
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/fn/invoke", bytes.NewReader(inv.body))
	if inv.contentType != "" {
		req.Header.Set("Content-Type", inv.contentType)
	}
	for k, v := range inv.headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	handler, err := r.Connect(genericapirequest.WithNamespace(ctx, "ns"), "fn",
		&kruntimes.RunInvokeOptions{UID: inv.uid}, responder{w: rec, req: req})
	require.NoError(t, err)
	code := handler.(*invokeHandler).serve(rec, req)
	return answer{code: code, written: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func runtimedAnswers(resp *runtimedv1.InvokeResponse) *fakeRuntimed {
	return &fakeRuntimed{respond: func(in *runtimedv1.InvokeRequest) *runtimedv1.InvokeResponse {
		resp.InvocationId = in.GetInvocation().GetInvocationId()
		return resp
	}}
}

func TestInvokeAnswers(t *testing.T) {
	oneMiB := append(append([]byte(`"`), bytes.Repeat([]byte("x"), 1<<20-2)...), '"')
	cases := []struct {
		name     string
		inv      call
		router   *fakeRouter
		runtimed *fakeRuntimed
		// code is the answer counted; written the one on the wire, when
		// another; retryAfter its Retry-After header.
		code       int
		written    int
		retryAfter string
		reason     metav1.StatusReason
		// ran says the request reached runtimed.
		ran bool
		// noID says the answer carries no invocation ID: the caller's
		// was refused.
		noID  bool
		check func(t *testing.T, a answer, sent *runtimedv1.InvokeRequest)
	}{
		{
			name: "a completed invocation is 200 with the handler's output",
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				r := a.result(t)
				assert.JSONEq(t, `{"ok":true}`, string(r.Output.Raw))
				assert.Equal(t, int64(12), r.DurationMillis)
				assert.Nil(t, r.Error)
				assert.Nil(t, r.Logs)
				assert.Equal(t, "application/json", a.header.Get("Content-Type"))
				assert.Empty(t, a.header.Get(invocation.HeaderFunctionError))
			},
		},
		{
			name: "a handler error is still 200, its type in X-Kruntime-Function-Error and the error in the body",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{
				Error:  &runtimedv1.FunctionError{Type: "ValueError", Message: "no good"},
				Stderr: []byte("Traceback …\n"), StderrTruncated: true,
			}),
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				r := a.result(t)
				assert.Equal(t, "ValueError", a.header.Get(invocation.HeaderFunctionError))
				assert.Equal(t, &v1alpha1.InvokeError{Type: "ValueError", Message: "no good"}, r.Error)
				assert.Equal(t, &v1alpha1.InvokeLogs{Stderr: "Traceback …\n", StderrTruncated: true}, r.Logs)
				assert.Contains(t, string(a.body), `"output":null`, "a failed handler has no output")
			},
		},
		{
			name:     "the handler's outputs and logs are in the result",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: []byte(`[1,2]`), Outputs: map[string]string{"k": "v"}, Stdout: []byte("hi\n")}),
			code:     http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				r := a.result(t)
				assert.JSONEq(t, `[1,2]`, string(r.Output.Raw))
				assert.Equal(t, map[string]string{"k": "v"}, r.Outputs)
				assert.Equal(t, &v1alpha1.InvokeLogs{Stdout: "hi\n"}, r.Logs)
			},
		},
		{
			name:     "output runtimed says is JSON is written as it is, compacted",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: []byte(`{ "a": [1, 2] }`), ContentType: "application/json"}),
			code:     http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.Equal(t, `{"a":[1,2]}`, string(a.result(t).Output.Raw))
			},
		},
		{
			name:     "output that is not JSON, of another type, arrives as a JSON string",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: []byte("plain \"text\"\n"), ContentType: "application/octet-stream"}),
			code:     http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.JSONEq(t, `"plain \"text\"\n"`, string(a.result(t).Output.Raw))
			},
		},
		{
			name:     "output that is not JSON, from a runtimed that names no type, arrives as a JSON string",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: []byte("plain")}),
			code:     http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.JSONEq(t, `"plain"`, string(a.result(t).Output.Raw))
			},
		},
		{
			name:     "output of another type that is JSON stays JSON",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: []byte(`{"a":1}`), ContentType: "application/octet-stream"}),
			code:     http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.JSONEq(t, `{"a":1}`, string(a.result(t).Output.Raw))
			},
		},
		{
			name:     "output mislabelled as JSON never reaches the wire: the encoder's scan refuses it with a 500",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: []byte(`{not json`), ContentType: "application/json"}),
			code:     http.StatusOK, written: http.StatusInternalServerError, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.NotContains(t, string(a.body), "not json")
			},
		},
		{
			name: "the fencing tuple, the caller and the input, validated as JSON, go to runtimed",
			inv:  call{body: []byte(`{"x": [1, 2]}`)},
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, sent *runtimedv1.InvokeRequest) {
				assert.Equal(t, "run-uid", sent.GetRunUid())
				assert.Equal(t, int32(2), sent.GetAttempt())
				assert.Equal(t, "pod-uid", sent.GetPodUid())
				assert.Equal(t, "alice", sent.GetCaller())
				assert.Equal(t, `{"x": [1, 2]}`, string(sent.GetInvocation().GetInput()), "the input is passed on as it came")
				assert.Equal(t, "application/json", sent.GetInvocation().GetContentType(), "and says it is JSON that was checked")
			},
		},
		{
			name: "an invocation ID is minted when the caller sends none, returned, and handed to runtimed",
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, sent *runtimedv1.InvokeRequest) {
				id := a.header.Get(invocation.HeaderID)
				assert.Regexp(t, `^[0-9a-f]{32}$`, id)
				assert.Equal(t, id, sent.GetInvocation().GetInvocationId())
				assert.Equal(t, id, a.result(t).InvocationID)
			},
		},
		{
			name: "the caller's invocation ID of 128 bytes is passed on and returned",
			inv:  call{headers: map[string]string{invocation.HeaderID: strings.Repeat("i", 128)}},
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, sent *runtimedv1.InvokeRequest) {
				assert.Equal(t, strings.Repeat("i", 128), a.header.Get(invocation.HeaderID))
				assert.Equal(t, strings.Repeat("i", 128), sent.GetInvocation().GetInvocationId())
			},
		},
		{
			name: "an invocation ID of 129 bytes is 400, and not echoed",
			inv:  call{headers: map[string]string{invocation.HeaderID: strings.Repeat("i", 129)}},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, noID: true,
		},
		{
			name: "a body of exactly 1 MiB is accepted",
			inv:  call{body: oneMiB},
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, _ answer, sent *runtimedv1.InvokeRequest) {
				assert.Len(t, sent.GetInvocation().GetInput(), 1<<20)
			},
		},
		{
			name: "a body of 1 MiB + 1 byte is 413",
			inv:  call{body: append(oneMiB, ' ')},
			code: http.StatusRequestEntityTooLarge, reason: metav1.StatusReasonRequestEntityTooLarge,
		},
		{
			name: "application/json with a charset is accepted",
			inv:  call{contentType: "application/json; charset=utf-8"},
			code: http.StatusOK, ran: true,
		},
		{
			name: "text/plain is 415",
			inv:  call{contentType: "text/plain"},
			code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
		},
		{
			name: "a body that is not JSON is 400",
			inv:  call{body: []byte(`{not json`)},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "an input nested MaxInputDepth deep is dispatched",
			inv:  call{body: []byte(strings.Repeat("[", invocation.MaxInputDepth) + strings.Repeat("]", invocation.MaxInputDepth))},
			code: http.StatusOK, ran: true,
		},
		{
			name: "an input nested deeper than MaxInputDepth is 400, and not dispatched",
			inv:  call{body: []byte(strings.Repeat("[", invocation.MaxInputDepth+1) + strings.Repeat("]", invocation.MaxInputDepth+1))},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name: "an empty body is not JSON: 400",
			inv:  call{body: []byte{}},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name:   "an unknown Run is 404",
			router: &fakeRouter{err: apierrors.NewNotFound(kruntimes.Resource("runs"), "fn")},
			code:   http.StatusNotFound, reason: metav1.StatusReasonNotFound,
		},
		{
			name:   "a task Run is 400",
			router: &fakeRouter{err: apierrors.NewBadRequest("Run ns/fn is a task; only function Runs are invoked")},
			code:   http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
		},
		{
			name:   "a Run that cannot be routed is 503 with Retry-After",
			router: &fakeRouter{err: apierrors.NewServiceUnavailable("Run ns/fn is not Ready; retry shortly")},
			code:   http.StatusServiceUnavailable, retryAfter: "1", reason: metav1.StatusReasonServiceUnavailable,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.Equal(t, "Run ns/fn is not Ready; retry shortly", a.status(t).Message)
			},
		},
		{
			name:   "a router error that is no API error is 500",
			router: &fakeRouter{err: io.ErrUnexpectedEOF},
			code:   http.StatusInternalServerError, reason: metav1.StatusReasonInternalError,
		},
		{
			name:     "runtimed refusing the fencing tuple is 503 with Retry-After",
			runtimed: &fakeRuntimed{err: runtimev1.NotStartedError(codes.FailedPrecondition, "attempt 2 is not registered"), dispatched: true},
			code:     http.StatusServiceUnavailable, retryAfter: "1", reason: metav1.StatusReasonServiceUnavailable, ran: true,
		},
		{
			name:     "an invocation already in flight is 429 with Retry-After",
			runtimed: &fakeRuntimed{err: runtimev1.NotStartedError(codes.ResourceExhausted, "busy"), dispatched: true},
			code:     http.StatusTooManyRequests, retryAfter: "1", reason: metav1.StatusReasonTooManyRequests, ran: true,
		},
		{
			name:     "an invocation stopped at its deadline is 504",
			runtimed: &fakeRuntimed{err: status.Error(codes.DeadlineExceeded, "stopped"), dispatched: true},
			code:     http.StatusGatewayTimeout, reason: metav1.StatusReasonTimeout, ran: true,
		},
		{
			name:     "an input runtimed refuses is 400",
			runtimed: &fakeRuntimed{err: runtimev1.NotStartedError(codes.InvalidArgument, "input too large"), dispatched: true},
			code:     http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, ran: true,
		},
		{
			name:     "a runtimed that cannot be reached is 503 with Retry-After: nothing was dispatched",
			runtimed: &fakeRuntimed{err: status.Error(codes.Unavailable, "connection refused")},
			code:     http.StatusServiceUnavailable, retryAfter: "1", reason: metav1.StatusReasonServiceUnavailable, ran: true,
		},
		{
			name:     "a connection that fails after dispatch is 502 without Retry-After: the outcome is unknown",
			runtimed: &fakeRuntimed{err: status.Error(codes.Unavailable, "connection reset"), dispatched: true},
			code:     http.StatusBadGateway, reason: metav1.StatusReasonInternalError, ran: true,
		},
		{
			name:     "an invocation runtimed reports aborted is 502 without Retry-After",
			runtimed: &fakeRuntimed{err: status.Error(codes.Aborted, "the invocation was dispatched and its outcome is unknown"), dispatched: true},
			code:     http.StatusBadGateway, reason: metav1.StatusReasonInternalError, ran: true,
		},
		{
			name:     "a repeat of an ID whose outcome runtimed evicted is 409 without Retry-After: use a new ID",
			runtimed: &fakeRuntimed{err: status.Error(codes.AlreadyExists, `the outcome of invocation ID "a" is no longer known`), dispatched: true},
			code:     http.StatusConflict, reason: metav1.StatusReasonConflict, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				st := a.status(t)
				assert.Contains(t, st.Message, "no longer known")
				require.NotNil(t, st.Details)
				require.Len(t, st.Details.Causes, 1)
				assert.Equal(t, metav1.CauseType(invocation.CauseOutcomeEvicted), st.Details.Causes[0].Type)
				assert.Contains(t, st.Details.Causes[0].Message, "new invocation ID")
			},
		},
		{
			name:     "too many repeats waiting for the one in flight is 429 with Retry-After, saying so",
			runtimed: &fakeRuntimed{err: runtimev1.NotStartedError(codes.ResourceExhausted, `8 repeats of invocation ID "a" already wait for the one in flight`), dispatched: true},
			code:     http.StatusTooManyRequests, retryAfter: "1", reason: metav1.StatusReasonTooManyRequests, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				assert.Contains(t, a.status(t).Message, "already wait for the one in flight")
			},
		},
		{
			name:   "an ended or deleting Run is 409 without Retry-After",
			router: &fakeRouter{err: apierrors.NewConflict(kruntimes.Resource("runs"), "fn", errors.New("it ended (Succeeded) and is not invoked any more"))},
			code:   http.StatusConflict, reason: metav1.StatusReasonConflict,
		},
		{
			name: "a 409 from the router that asks for a retry still gets no Retry-After",
			router: &fakeRouter{err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusConflict,
				Reason: metav1.StatusReasonConflict, Details: &metav1.StatusDetails{Name: "fn", RetryAfterSeconds: 3}}}},
			code: http.StatusConflict, reason: metav1.StatusReasonConflict,
		},
		{
			name: "invoke turned off is 501 without Retry-After",
			router: &fakeRouter{err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotImplemented,
				Reason: "NotImplemented", Message: "invoke is not configured"}}},
			code: http.StatusNotImplemented, reason: "NotImplemented",
		},
		{
			name: "stdout and stderr that are not UTF-8 are 200, each invalid run of bytes a U+FFFD",
			runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{
				Stdout: []byte("ok\xff\xfe\n"), Stderr: []byte("bad \xff byte\n"),
				Error: &runtimedv1.FunctionError{Type: "NonZeroExit", Message: "handler exited with code 1"},
			}),
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, _ *runtimedv1.InvokeRequest) {
				r := a.result(t)
				require.NotNil(t, r.Logs)
				assert.Equal(t, "ok\uFFFD\n", r.Logs.Stdout)
				assert.Equal(t, "bad \uFFFD byte\n", r.Logs.Stderr)
				assert.True(t, utf8.Valid(a.body), "the body is UTF-8")
				assert.Equal(t, "NonZeroExit", r.Error.Type)
			},
		},
		{
			name: "an invocation ID that is not UTF-8 is 400, and not echoed",
			inv:  call{headers: map[string]string{invocation.HeaderID: "id-\xff"}},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, noID: true,
		},
		{
			name: "an invocation ID with a control character is 400, and not echoed",
			inv:  call{headers: map[string]string{invocation.HeaderID: "id\tone"}},
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, noID: true,
		},
		{
			name: "a UTF-8 invocation ID beyond ASCII is passed on",
			inv:  call{headers: map[string]string{invocation.HeaderID: "commande-n°42"}},
			code: http.StatusOK, ran: true,
			check: func(t *testing.T, a answer, sent *runtimedv1.InvokeRequest) {
				assert.Equal(t, "commande-n°42", sent.GetInvocation().GetInvocationId())
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			router := tc.router
			if router == nil {
				router = &fakeRouter{}
			}
			if router.runtimed = tc.runtimed; router.runtimed == nil {
				router.runtimed = &fakeRuntimed{}
			}
			a := invoke(t, router, time.Minute, tc.inv)
			require.Equal(t, tc.code, a.code, "%s", a.body)
			if tc.written == 0 {
				tc.written = tc.code
			}
			require.Equal(t, tc.written, a.written, "the code written")
			assert.Equal(t, tc.retryAfter, a.header.Get("Retry-After"), "Retry-After only on 429 and 503")
			if !tc.noID {
				assert.NotEmpty(t, a.header.Get(invocation.HeaderID), "every other answer carries the invocation ID")
			} else {
				assert.Empty(t, a.header.Get(invocation.HeaderID))
			}
			if tc.code != http.StatusOK {
				assert.Equal(t, tc.reason, a.status(t).Reason)
				assert.Empty(t, a.header.Get(invocation.HeaderFunctionError))
			}
			if tc.ran {
				require.NotNil(t, router.runtimed.got, "runtimed was called")
			} else {
				assert.Nil(t, router.runtimed.got, "runtimed was not called")
			}
			if tc.check != nil {
				tc.check(t, a, router.runtimed.got)
			}
		})
	}
}

// TestInvokeClassifiesRuntimedErrors: only an answer that carries
// NotStarted, or a call that never left, gets a code that promises the
// handler did not run. The same gRPC code without it (an older runtimed, a
// custom Runtime Server's answer after its handler ran) is 502, or 504 for
// DeadlineExceeded.
func TestInvokeClassifiesRuntimedErrors(t *testing.T) {
	type want struct {
		code       int
		retryAfter string
	}
	unavailable := want{http.StatusServiceUnavailable, "1"}
	unknown := want{http.StatusBadGateway, ""}
	cases := []struct {
		code       codes.Code
		notStarted want
		without    want
	}{
		{codes.ResourceExhausted, want{http.StatusTooManyRequests, "1"}, unknown},
		{codes.InvalidArgument, want{http.StatusBadRequest, ""}, unknown},
		{codes.FailedPrecondition, unavailable, unknown},
		{codes.NotFound, unavailable, unknown},
		{codes.Unavailable, unavailable, unknown},
		{codes.Aborted, unavailable, unknown},
		{codes.Internal, unavailable, unknown},
		{codes.Unknown, unavailable, unknown},
		{codes.DeadlineExceeded, unavailable, want{http.StatusGatewayTimeout, ""}},
		// runtimed's answer to a repeat of an ID whose outcome it evicted.
		{codes.AlreadyExists, unavailable, want{http.StatusConflict, ""}},
	}
	for _, tc := range cases {
		for _, variant := range []struct {
			name string
			err  error
			want want
		}{
			{"with NotStarted", runtimev1.NotStartedError(tc.code, "refused"), tc.notStarted},
			{"without NotStarted", status.Error(tc.code, "failed"), tc.without},
		} {
			t.Run(fmt.Sprintf("%s %s", tc.code, variant.name), func(t *testing.T) {
				router := &fakeRouter{runtimed: &fakeRuntimed{err: variant.err, dispatched: true}}
				a := invoke(t, router, time.Minute, call{})
				require.Equal(t, variant.want.code, a.code, "%s", a.body)
				assert.Equal(t, variant.want.retryAfter, a.header.Get("Retry-After"))
				a.status(t)
			})
		}
		t.Run(fmt.Sprintf("%s never sent", tc.code), func(t *testing.T) {
			router := &fakeRouter{runtimed: &fakeRuntimed{err: status.Error(tc.code, "not sent")}}
			a := invoke(t, router, time.Minute, call{})
			require.Equal(t, http.StatusServiceUnavailable, a.code, "%s", a.body)
			assert.Equal(t, "1", a.header.Get("Retry-After"))
		})
	}
}

func TestInvokeRunUIDPrecondition(t *testing.T) {
	cases := []struct {
		name   string
		inv    call
		code   int
		routed types.UID
	}{
		{"none routes by name alone", call{}, http.StatusOK, ""},
		{"?uid= is the router's precondition", call{uid: "u1"}, http.StatusOK, "u1"},
		{"the X-Kruntime-Run-UID header is the router's precondition", call{headers: map[string]string{invocation.HeaderRunUID: "u1"}}, http.StatusOK, "u1"},
		{"?uid= and the header naming the same Run route by it", call{uid: "u1", headers: map[string]string{invocation.HeaderRunUID: "u1"}}, http.StatusOK, "u1"},
		{"?uid= and the header naming different Runs is 400", call{uid: "u1", headers: map[string]string{invocation.HeaderRunUID: "u2"}}, http.StatusBadRequest, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			router := &fakeRouter{runtimed: &fakeRuntimed{}}
			a := invoke(t, router, time.Minute, tc.inv)
			require.Equal(t, tc.code, a.code, "%s", a.body)
			assert.Equal(t, tc.routed, router.asked)
		})
	}

	t.Run("a UID the router does not know is 404, without Retry-After", func(t *testing.T) {
		router := &fakeRouter{err: apierrors.NewNotFound(kruntimes.Resource("runs"), "fn")}
		a := invoke(t, router, time.Minute, call{uid: "earlier"})
		require.Equal(t, http.StatusNotFound, a.code, "%s", a.body)
		assert.Equal(t, types.UID("earlier"), router.asked)
		assert.Empty(t, a.header.Get("Retry-After"))
	})
}

func TestInvokeTimeout(t *testing.T) {
	cases := []struct {
		name string
		// request is the request's deadline; none when zero.
		request time.Duration
		// max is the server's maximum; runLeft the Run's remaining
		// lifetime (none when zero; negative when it passed).
		max     time.Duration
		runLeft time.Duration
		code    int
		// sent bounds the timeout handed to runtimed.
		sentMin, sentMax time.Duration
	}{
		{name: "without ?timeout= the server maximum bounds the invocation", max: 5 * time.Second,
			code: http.StatusOK, sentMin: 5 * time.Second, sentMax: 5 * time.Second},
		{name: "?timeout= less a second of margin bounds the invocation", request: 20 * time.Second, max: time.Minute,
			code: http.StatusOK, sentMin: 15 * time.Second, sentMax: 19 * time.Second},
		{name: "?timeout=1s keeps nine tenths of it", request: time.Second, max: time.Minute,
			code: http.StatusOK, sentMin: 600 * time.Millisecond, sentMax: 900 * time.Millisecond},
		{name: "?timeout=100ms keeps nine tenths of it", request: 100 * time.Millisecond, max: time.Minute,
			code: http.StatusOK, sentMin: 10 * time.Millisecond, sentMax: 90 * time.Millisecond},
		{name: "the server maximum bounds a longer ?timeout=", request: 50 * time.Second, max: 5 * time.Second,
			code: http.StatusOK, sentMin: 5 * time.Second, sentMax: 5 * time.Second},
		{name: "the Run's remaining lifetime bounds the invocation", request: 50 * time.Second, max: time.Minute, runLeft: 3 * time.Second,
			code: http.StatusOK, sentMin: time.Second, sentMax: 3 * time.Second},
		{name: "a ?timeout= of a millisecond leaves no time: 400", request: time.Millisecond, max: time.Minute,
			code: http.StatusBadRequest},
		{name: "a Run past its spec.timeout is 503 with Retry-After", max: time.Minute, runLeft: -time.Second,
			code: http.StatusServiceUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			router := &fakeRouter{runtimed: &fakeRuntimed{}}
			if tc.runLeft != 0 {
				router.deadline = time.Now().Add(tc.runLeft)
			}
			started := time.Now()
			requested := started.Add(tc.request)
			a := invoke(t, router, tc.max, call{timeout: tc.request})
			require.Equal(t, tc.code, a.code, "%s", a.body)
			if tc.code != http.StatusOK {
				assert.Nil(t, router.runtimed.got, "nothing was sent")
				return
			}
			sent := time.Duration(router.runtimed.got.GetInvocation().GetTimeoutMillis()) * time.Millisecond
			assert.GreaterOrEqual(t, sent, tc.sentMin)
			assert.LessOrEqual(t, sent, tc.sentMax)
			if tc.request > 0 {
				// The call's slack past the invocation's deadline ends
				// before the request's own deadline.
				assert.True(t, router.runtimed.deadline.Before(requested), "the call ends %s before the request", requested.Sub(router.runtimed.deadline))
				assert.Greater(t, router.runtimed.deadline.Sub(started), sent, "the call outlives the invocation by its slack")
			}
		})
	}

	t.Run("no maximum configured is the default of 55s", func(t *testing.T) {
		router := &fakeRouter{runtimed: &fakeRuntimed{}}
		require.Equal(t, http.StatusOK, invoke(t, router, 0, call{}).code)
		assert.Equal(t, invocation.DefaultMaxTimeout.Milliseconds(), router.runtimed.got.GetInvocation().GetTimeoutMillis())
	})
}

func TestInvokeByACallerWhoWentAway(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	router := &fakeRouter{runtimed: &fakeRuntimed{err: status.Error(codes.Canceled, "context canceled"), dispatched: true, during: cancel}}
	a := invoke(t, router, time.Minute, call{ctx: ctx})
	assert.Equal(t, statusClientClosedRequest, a.code, "counted as 499")
	assert.Empty(t, a.body, "nothing is written: nobody reads it")
}

func TestInvokeIsCountedByCode(t *testing.T) {
	count := func(code string) float64 {
		v, err := testutil.GetCounterMetricValue(invokeRequests.WithLabelValues(code))
		require.NoError(t, err)
		return v
	}
	router := &fakeRouter{runtimed: &fakeRuntimed{}}
	ok, unsupported := count("200"), count("415")
	rest := newInvokeREST(router, InvokeSettings{MaxTimeout: time.Minute})
	for _, contentType := range []string{"application/json", "text/plain"} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/invoke", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		handler, err := rest.Connect(genericapirequest.WithNamespace(t.Context(), "ns"), "fn", nil, responder{w: rec, req: req})
		require.NoError(t, err)
		handler.ServeHTTP(rec, req)
	}
	assert.Equal(t, ok+1, count("200"))
	assert.Equal(t, unsupported+1, count("415"))
	inFlight, err := testutil.GetGaugeMetricValue(invokeInFlight)
	require.NoError(t, err)
	assert.Zero(t, inFlight)
}

// FuzzInvokeInput sends any body with any content type: the answer is 200
// exactly when the body is JSON of at most 1 MiB, sent as JSON, and never a
// server error.
func FuzzInvokeInput(f *testing.F) {
	f.Add([]byte(`{"a":1}`), "application/json")
	f.Add([]byte(`{not json`), "")
	f.Add([]byte(`"\xff"`), "application/json; charset=utf-8")
	f.Add([]byte(`[]`), "application/json; =")
	f.Add([]byte(`null`), "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		router := &fakeRouter{runtimed: &fakeRuntimed{}}
		a := invoke(t, router, time.Minute, call{body: body, contentType: contentType})
		require.Less(t, a.code, http.StatusInternalServerError, "%s", a.body)
		if a.code == http.StatusOK {
			require.True(t, json.Valid(body))
			require.Equal(t, body, router.runtimed.got.GetInvocation().GetInput())
		}
	})
}

// BenchmarkInvokeOutput writes a 256 KiB output: as runtimed labels it
// (written without a scan before the encoder's) and unlabelled (checked
// first, as every output was before runtimed said).
func BenchmarkInvokeOutput(b *testing.B) {
	output, err := json.Marshal(map[string]string{"data": strings.Repeat("0123456789abcdef", 1<<14)})
	require.NoError(b, err)
	for _, contentType := range []string{"application/json", ""} {
		b.Run("content type "+strconv.Quote(contentType), func(b *testing.B) {
			rest := newInvokeREST(&fakeRouter{runtimed: runtimedAnswers(&runtimedv1.InvokeResponse{Output: output, ContentType: contentType})}, InvokeSettings{MaxTimeout: time.Minute})
			ctx := genericapirequest.WithNamespace(b.Context(), "ns")
			b.SetBytes(int64(len(output)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/invoke", strings.NewReader(`{}`))
				rec := httptest.NewRecorder()
				handler, err := rest.Connect(ctx, "fn", nil, responder{w: rec, req: req})
				require.NoError(b, err)
				handler.ServeHTTP(rec, req)
				require.Equal(b, http.StatusOK, rec.Code)
			}
		})
	}
}

// weatherSchema is a function's input schema in the tests below.
const weatherSchema = `{"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":16}},"required":["city"],"additionalProperties":false}`

func TestInvokeValidatesInputAgainstSchema(t *testing.T) {
	validator, err := toolschema.Compile([]byte(weatherSchema))
	require.NoError(t, err)

	t.Run("a body that breaks the schema is 400 with every violation, and nothing is dispatched", func(t *testing.T) {
		runtimed := &fakeRuntimed{}
		a := invoke(t, &fakeRouter{runtimed: runtimed, input: validator}, 0, call{body: []byte(`{"days":40,"color":"red"}`)})
		require.Equal(t, http.StatusBadRequest, a.code, "%s", a.body)
		assert.Nil(t, runtimed.got, "the handler must not run on input that breaks its schema")
		st := a.status(t)
		assert.Equal(t, metav1.StatusReasonBadRequest, st.Reason)
		assert.Contains(t, st.Message, "did not run")
		require.NotNil(t, st.Details)
		causes := map[string]metav1.CauseType{}
		for _, c := range st.Details.Causes {
			causes[c.Field] = c.Type
			assert.NotEmpty(t, c.Message, "cause %s", c.Field)
		}
		assert.Equal(t, map[string]metav1.CauseType{
			"input.city":  metav1.CauseTypeFieldValueRequired,
			"input.days":  metav1.CauseTypeFieldValueInvalid,
			"input.color": metav1.CauseType(field.ErrorTypeForbidden),
		}, causes)
		assert.Empty(t, a.header.Get("Retry-After"), "the same body never becomes valid")
		assert.NotEmpty(t, a.header.Get(invocation.HeaderID))
	})
	t.Run("a body that matches the schema is dispatched as sent", func(t *testing.T) {
		runtimed := &fakeRuntimed{}
		body := []byte(`{"city":"Oslo","days":3}`)
		a := invoke(t, &fakeRouter{runtimed: runtimed, input: validator}, 0, call{body: body})
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		require.NotNil(t, runtimed.got)
		assert.Equal(t, body, runtimed.got.GetInvocation().GetInput())
	})
	t.Run("a Run without a schema takes any JSON", func(t *testing.T) {
		runtimed := &fakeRuntimed{}
		a := invoke(t, &fakeRouter{runtimed: runtimed}, 0, call{body: []byte(`{"days":40,"color":"red"}`)})
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		require.NotNil(t, runtimed.got)
	})
}

// BenchmarkInvokeInputValidation measures what validating a 1 KiB input
// against a 20-property schema adds to an invocation through the handler
// (runtimed faked), against the same invocation of a Run without a schema.
func BenchmarkInvokeInputValidation(b *testing.B) {
	var props, values []string
	for i := range 20 {
		props = append(props, fmt.Sprintf(`"p%02d":{"type":"string","maxLength":100}`, i))
		values = append(values, fmt.Sprintf(`"p%02d":%q`, i, strings.Repeat("v", 42)))
	}
	schema := `{"type":"object","properties":{` + strings.Join(props, ",") + `},"required":["p00","p19"],"additionalProperties":false}`
	body := []byte("{" + strings.Join(values, ",") + "}")
	require.InDelta(b, 1024, len(body), 64, "a 1 KiB input")
	validator, err := toolschema.Compile([]byte(schema))
	require.NoError(b, err)
	require.Empty(b, validator.Validate(body))

	// The same input with p19 renamed p20: p19 is missing and p20 is not
	// allowed.
	invalid := bytes.Replace(body, []byte(`"p19"`), []byte(`"p20"`), 1)
	require.Len(b, validator.Validate(invalid), 2)

	for _, bc := range []struct {
		name       string
		input      []byte
		violations int
	}{{"validate only", body, 0}, {"validate only, two violations", invalid, 2}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				errs := validator.Validate(bc.input)
				took = append(took, time.Since(start))
				if len(errs) != bc.violations {
					b.Fatal(errs)
				}
			}
			reportPercentiles(b, took)
		})
	}
	for _, bc := range []struct {
		name  string
		input *toolschema.Validator
	}{{"invoke without schema", nil}, {"invoke with schema", validator}} {
		b.Run(bc.name, func(b *testing.B) {
			router := &fakeRouter{runtimed: &fakeRuntimed{}, input: bc.input}
			rest := newInvokeREST(router, InvokeSettings{})
			ctx := genericapirequest.WithNamespace(genericapirequest.WithUser(b.Context(), &user.DefaultInfo{Name: "alice"}), "ns")
			b.ReportAllocs()
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/fn/invoke", bytes.NewReader(body))
				rec := httptest.NewRecorder()
				handler, _ := rest.Connect(ctx, "fn", &kruntimes.RunInvokeOptions{}, responder{w: rec, req: req})
				code := handler.(*invokeHandler).serve(rec, req)
				took = append(took, time.Since(start))
				if code != http.StatusOK {
					b.Fatalf("%d: %s", code, rec.Body)
				}
			}
			reportPercentiles(b, took)
		})
	}
}

// reportPercentiles reports the p50 and p99 of took: with other work on
// the machine, the mean of a microsecond operation is mostly its pauses.
func reportPercentiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
}
