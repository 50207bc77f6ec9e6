package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/invocation"
	kruntimesv1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
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

// RunExpansion adds the runs/invoke subresource to the Runs client.
type RunExpansion interface {
	// Invoke runs the function Run name once with input, a JSON document,
	// and returns its result. A handler error is a result whose Error is
	// set; an error is returned when the invocation did not complete:
	// apierrors tells them apart (IsTooManyRequests and IsServiceUnavailable
	// promise the handler did not run; IsTimeout and a 502 do not). It is
	// sent once: client-go's retries of answers with Retry-After are off,
	// because a retried invocation would run again.
	Invoke(ctx context.Context, name string, input []byte, opts InvokeOptions) (*kruntimesv1alpha1.InvokeResult, error)
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
