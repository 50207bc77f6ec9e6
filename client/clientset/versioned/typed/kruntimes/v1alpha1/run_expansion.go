package v1alpha1

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/invocation"
	kruntimesv1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/clientset/versioned/scheme"
)

// InvokeOptions shape one invocation.
type InvokeOptions struct {
	// UID, when set, must be the Run's metadata.uid (404 otherwise).
	UID types.UID
	// Timeout is the request's timeout (Kubernetes' standard ?timeout=);
	// the invocation is stopped a little before it. Zero means the
	// server's default (60 s).
	Timeout time.Duration
	// InvocationID identifies the invocation (at most invocation.MaxIDBytes bytes); one is
	// generated when empty. The result carries it either way.
	InvocationID string
}

// RunExpansion adds the runs/invoke and runs/log subresources to the Runs
// client.
type RunExpansion interface {
	// GetLogs returns the request for the log of the task Run name, as
	// PodExpansion.GetLogs does for a Pod: DoRaw reads it, Stream(ctx)
	// copies it. The body is text exactly as the program wrote it.
	GetLogs(name string, opts *kruntimesv1alpha1.RunLogOptions) *rest.Request
	// SaveLog hands the kept log of one attempt of the task Run name to
	// kruntimes-apiserver (runtimed does, before it records the attempt's
	// outcome).
	SaveLog(ctx context.Context, name string, attempt int32, log *kruntimesv1alpha1.RunLog) error
	// Invoke runs the function Run name once with input, a JSON document,
	// and returns its result. A handler error is a result whose Error is
	// set; an error is returned when the invocation did not complete, and
	// ClassifyInvokeError says whether the handler may have run. It is
	// sent once: client-go's retries of answers with Retry-After are off,
	// because a retried invocation would run again.
	Invoke(ctx context.Context, name string, input []byte, opts InvokeOptions) (*kruntimesv1alpha1.InvokeResult, error)
	// GetFile returns the request for a file of the sandbox name's
	// workspace (runs/files): Stream(ctx) reads it as it comes.
	GetFile(name, path string) *rest.Request
	// PutFile replaces the file path of the sandbox name's workspace with
	// what body reads, streamed, atomically, and returns the bytes
	// written. It is sent once: body is read as it goes.
	PutFile(ctx context.Context, name, path string, body io.Reader) (int64, error)
	// GetArchive returns the request for the directory dir of the sandbox
	// name's workspace as an archive of format (runs/files?archive=):
	// Stream(ctx) reads it as the sandbox walks the directory.
	GetArchive(name, dir string, format kruntimesv1alpha1.RunFilesArchive) *rest.Request
	// PutArchive streams archive, a tar archive (gzip-compressed or not),
	// into the sandbox name, which extracts it into the directory dir
	// (runs/files?extract=tar), all or nothing; it returns the regular
	// files extracted and their bytes. It is sent once.
	PutArchive(ctx context.Context, name, dir string, archive io.Reader) (files, bytes int64, err error)
}

// GetArchive implements RunExpansion.
func (c *runs) GetArchive(name, dir string, format kruntimesv1alpha1.RunFilesArchive) *rest.Request {
	return c.GetClient().Get().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("files").
		VersionedParams(&kruntimesv1alpha1.RunFilesOptions{Path: dir, Archive: string(format)}, scheme.ParameterCodec)
}

// PutArchive implements RunExpansion.
func (c *runs) PutArchive(ctx context.Context, name, dir string, archive io.Reader) (int64, int64, error) {
	raw, err := c.GetClient().Put().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("files").
		VersionedParams(&kruntimesv1alpha1.RunFilesOptions{Path: dir, Extract: string(kruntimesv1alpha1.RunFilesExtractTar)}, scheme.ParameterCodec).
		SetHeader("Content-Type", "application/octet-stream").
		Body(archive).
		MaxRetries(0).
		Do(ctx).Raw()
	if err != nil {
		return 0, 0, err
	}
	var extracted struct {
		Files int64 `json:"files"`
		Bytes int64 `json:"bytes"`
	}
	if err := json.Unmarshal(raw, &extracted); err != nil {
		return 0, 0, fmt.Errorf("read the answer of PUT runs/%s/files?extract=tar: %w", name, err)
	}
	return extracted.Files, extracted.Bytes, nil
}

// GetFile implements RunExpansion.
func (c *runs) GetFile(name, path string) *rest.Request {
	return c.GetClient().Get().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("files").
		VersionedParams(&kruntimesv1alpha1.RunFilesOptions{Path: path}, scheme.ParameterCodec)
}

// PutFile implements RunExpansion.
func (c *runs) PutFile(ctx context.Context, name, path string, body io.Reader) (int64, error) {
	raw, err := c.GetClient().Put().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("files").
		VersionedParams(&kruntimesv1alpha1.RunFilesOptions{Path: path}, scheme.ParameterCodec).
		SetHeader("Content-Type", "application/octet-stream").
		Body(body).
		MaxRetries(0).
		Do(ctx).Raw()
	if err != nil {
		return 0, err
	}
	var written struct {
		Size int64 `json:"size"`
	}
	if err := json.Unmarshal(raw, &written); err != nil {
		return 0, fmt.Errorf("read the answer of PUT runs/%s/files: %w", name, err)
	}
	return written.Size, nil
}

// GetLogs implements RunExpansion.
func (c *runs) GetLogs(name string, opts *kruntimesv1alpha1.RunLogOptions) *rest.Request {
	return c.GetClient().Get().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("log").
		VersionedParams(opts, scheme.ParameterCodec)
}

// SaveLog implements RunExpansion. The log goes in the client's content
// type: protobuf, as runtimed's client speaks, carries the bytes as they
// are, where JSON's base64 adds a third.
func (c *runs) SaveLog(ctx context.Context, name string, attempt int32, log *kruntimesv1alpha1.RunLog) error {
	return c.GetClient().Post().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("log").
		Param("attempt", strconv.Itoa(int(attempt))).
		Body(log).
		Do(ctx).
		Error()
}

// Invoke implements RunExpansion.
func (c *runs) Invoke(ctx context.Context, name string, input []byte, opts InvokeOptions) (*kruntimesv1alpha1.InvokeResult, error) {
	req := c.GetClient().Post().
		Namespace(c.GetNamespace()).
		Resource("runs").
		Name(name).
		SubResource("invoke").
		SetHeader("Content-Type", invocation.ContentTypeJSON).
		SetHeader("Accept", invocation.ContentTypeJSON).
		Body(input).
		MaxRetries(0)
	if opts.UID != "" {
		req = req.Param("uid", string(opts.UID))
	}
	if opts.Timeout > 0 {
		req = req.Timeout(opts.Timeout)
	}
	if opts.InvocationID != "" {
		req = req.SetHeader(invocation.HeaderID, opts.InvocationID)
	}
	res := req.Do(ctx)
	// Error, not Raw's error: it decodes the server's Status (reason,
	// message, retryAfterSeconds) into an apierrors.StatusError.
	if err := res.Error(); err != nil {
		return nil, err
	}
	body, err := res.Raw()
	if err != nil {
		return nil, err
	}
	result := &kruntimesv1alpha1.InvokeResult{}
	if err := json.Unmarshal(body, result); err != nil {
		return nil, fmt.Errorf("decode the result of invoking Run %s: %w", name, err)
	}
	return result, nil
}

// InvokeOutcome is what an error of Invoke tells about the handler.
type InvokeOutcome int

const (
	// InvokeRefused: the request was refused for what it is (400, 403,
	// 404, 413, 415, 422 …) or could not be sent; the handler did not run,
	// and sending it again unchanged will not help.
	InvokeRefused InvokeOutcome = iota
	// InvokeNotRun: kruntimes promised the handler did not run — a 429, or
	// kruntimes' own 503 carrying retryAfterSeconds — and the same
	// invocation may be sent again after RetryAfter.
	InvokeNotRun
	// InvokeTimedOut: a 504; the handler ran and was stopped at its
	// deadline, or may still be running.
	InvokeTimedOut
	// InvokeOutcomeUnknown: the request was sent and no answer says what
	// happened — a 502, any other 5xx (a plain 503 from a proxy on the way
	// included), a connection that broke. The handler may have run.
	InvokeOutcomeUnknown
)

// String names the outcome as docs/invoke.md does.
func (o InvokeOutcome) String() string {
	switch o {
	case InvokeNotRun:
		return "did not run"
	case InvokeTimedOut:
		return "timed out"
	case InvokeOutcomeUnknown:
		return "outcome unknown"
	}
	return "refused"
}

// ClassifyInvokeError tells what an error of Invoke says about the handler.
// Only kruntimes-apiserver's own answers promise that it did not run: a 503
// that kube-apiserver's aggregation proxy writes when kruntimes-apiserver
// is down or its connection breaks is plain text without Retry-After, and
// may come after the invocation was dispatched.
func ClassifyInvokeError(err error) InvokeOutcome {
	if err == nil {
		return InvokeRefused
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		if notSent(err) {
			return InvokeRefused
		}
		return InvokeOutcomeUnknown
	}
	st := status.Status()
	switch {
	case st.Code == http.StatusTooManyRequests:
		return InvokeNotRun
	case st.Code == http.StatusServiceUnavailable && fromServer(st) && st.Details.RetryAfterSeconds > 0:
		return InvokeNotRun
	case st.Code == http.StatusGatewayTimeout:
		return InvokeTimedOut
	case st.Code == http.StatusNotImplemented:
		return InvokeRefused
	case st.Code >= http.StatusInternalServerError:
		return InvokeOutcomeUnknown
	case st.Code == 0:
		// Not an HTTP answer: client-go's own error, e.g. a body it
		// could not read.
		return InvokeOutcomeUnknown
	}
	return InvokeRefused
}

// fromServer says whether st was decoded from a Status the server wrote,
// not made by client-go from a body that was no Status (what it marks with
// an UnexpectedServerResponse cause).
func fromServer(st metav1.Status) bool {
	if st.Details == nil {
		return false
	}
	for _, c := range st.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return false
		}
	}
	return true
}

// notSent says whether err is a failure to connect: nothing reached the
// server.
func notSent(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}
