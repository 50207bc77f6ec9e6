package runtimedclient

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apiserver/logfanout"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
)

// Interface is what the run registry asks of the runtimed of one Pod.
type Interface interface {
	// Invoke runs inv on its function and returns the handler's answer, a
	// handler error included. Its errors are API errors that say whether
	// the handler ran: 429, 400 and 503 + Retry-After (the latter marked
	// ErrBecomingReady) promise it did not; 504 says it was stopped at
	// its deadline; 502 that its outcome is unknown.
	Invoke(ctx context.Context, inv Invocation) (*Answer, error)
	// FollowLog streams the log of the attempt key from offset on, live,
	// ending (io.EOF) after its last byte once the attempt ended. Its
	// errors name what a follow acts on: ErrLogPastEnd and
	// ErrLogUnsupported; any other is worth another try.
	FollowLog(ctx context.Context, key LogKey, offset int64) (LogStream, error)
	// ReadFile opens the file path of the sandbox key names. Its errors
	// are API errors: 404 for a missing file, 400 for a path refused, 503
	// when the sandbox cannot serve it now. FileReader's WriteTo fails
	// only when the stream broke after its first chunk.
	ReadFile(ctx context.Context, key FileKey, path string) (FileReader, error)
	// ReadArchive opens the directory dir of the sandbox key names as an
	// archive of the given format, written as it is read. Its errors are
	// ReadFile's (400 too for a dir that is not a directory); WriteTo
	// fails when the stream broke after its first chunk, and what was
	// written is then an archive cut short.
	ReadArchive(ctx context.Context, key FileKey, dir string, format kruntimes.RunFilesArchive) (FileReader, error)
	// WriteFile replaces the file path of the sandbox key names with
	// body, and returns its size; on any error nothing was written.
	WriteFile(ctx context.Context, key FileKey, path string, body io.Reader) (int64, error)
	// ExtractTar extracts the tar archive body (gzip-compressed or not)
	// into the directory dir of the sandbox key names, made when missing.
	// On any error nothing was extracted; the errors are WriteFile's.
	ExtractTar(ctx context.Context, key FileKey, dir string, body io.Reader) (Extracted, error)
}

// Invocation is one invocation of a Ready function Run, with the fencing
// tuple runtimed checks against its own live registration.
type Invocation struct {
	RunUID  types.UID
	Attempt int32
	PodUID  types.UID
	// ID names the invocation on every hop, at most 128 bytes.
	ID string
	// CallerSentID says the caller sent ID rather than the apiserver
	// minting it: only such an ID is deduplicated.
	CallerSentID bool
	// Caller is the authenticated user, for runtimed's audit line.
	Caller string
	// Input is JSON that the caller of Invoke validated: nothing
	// downstream scans it again.
	Input []byte
	// Timeout bounds the invocation; the call itself may last CallSlack
	// longer, so that the Runtime Server stops the handler at its deadline,
	// and says so, before the call is cut.
	Timeout, CallSlack time.Duration
}

// Answer is runtimed's answer to one invocation.
type Answer struct {
	// Result is the handler's answer as the API serves it; empty when
	// Invoke failed. It is held by value: an answer costs one allocation.
	Result kruntimes.InvokeResult
	// Handler is how long the handler ran.
	Handler time.Duration
	// Runtimed is how long runtimed spent on the call, Handler included;
	// Timed says runtimed told it (an older one does not).
	Runtimed time.Duration
	Timed    bool
	// WorkerWarm says the worker that ran the handler was already running.
	WorkerWarm bool
	// Replayed says the answer is the recorded outcome of an earlier
	// invocation with the same caller-sent ID: the handler did not run
	// for it.
	Replayed bool
}

// Client is the Interface of one runtimed over its gRPC connection.
type Client struct {
	rpc runtimedv1.RuntimedClient
	// fanout shares one log stream among the follows of one attempt; nil
	// opens one per follow.
	fanout *logfanout.Fanout
	// legacy says this runtimed is of the release before: it reads only
	// the invoke request's fields of that release (see Invoke).
	legacy atomic.Bool
}

var _ Interface = &Client{}

// New returns the client of the runtimed that rpc reaches; its log follows
// share their streams through fanout, the server's one, when it is set.
func New(rpc runtimedv1.RuntimedClient, fanout *logfanout.Fanout) *Client {
	return &Client{rpc: rpc, fanout: fanout}
}

// retryAfterSeconds is what 429 and 503 ask clients to wait.
const retryAfterSeconds = 1

// Unavailable is a 503 + Retry-After: the handler did not run, and asking
// again shortly may find the function served.
func Unavailable(message string) *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(message)
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds}
	return err
}

// ErrBecomingReady marks a 503 for a function Run on its way to Ready:
// just created, being scheduled, registering, relocating or recovered, or
// its runtimed refused the invocation before it started. Such a Run is
// expected to be routable soon; a Run the scheduler parked (no such
// Runtime, no capacity) is not.
var ErrBecomingReady = errors.New("the function is on its way to Ready")

// BecomingReady marks err, a 503, as ErrBecomingReady.
func BecomingReady(err *apierrors.StatusError) error {
	return becomingReadyError{err}
}

// becomingReadyError is still the API error it holds, for the responder
// (which asks the error itself, not its chain, for its status).
type becomingReadyError struct{ *apierrors.StatusError }

func (becomingReadyError) Is(target error) bool { return target == ErrBecomingReady }
