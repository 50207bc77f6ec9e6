package runtimev1_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

func TestNotStarted(t *testing.T) {
	refused := runtimev1.NotStartedError(codes.ResourceExhausted, "Run %s is busy", "u1")
	assert.True(t, runtimev1.IsNotStarted(refused))
	assert.Equal(t, codes.ResourceExhausted, status.Code(refused))
	assert.Equal(t, "Run u1 is busy", status.Convert(refused).Message())

	// The detail survives the wire form a gRPC status takes.
	wire := status.FromProto(status.Convert(refused).Proto()).Err()
	assert.True(t, runtimev1.IsNotStarted(wire))

	marked := runtimev1.MarkNotStarted(status.Error(codes.Unavailable, "connection refused"))
	assert.True(t, runtimev1.IsNotStarted(marked))
	assert.Equal(t, codes.Unavailable, status.Code(marked))
	assert.Equal(t, "connection refused", status.Convert(marked).Message())
	assert.Same(t, refused, runtimev1.MarkNotStarted(refused), "marked once")
	assert.NoError(t, runtimev1.MarkNotStarted(nil))

	for _, err := range []error{
		nil,
		errors.New("plain"),
		context.DeadlineExceeded,
		status.Error(codes.ResourceExhausted, "busy, but maybe after the handler ran"),
		fmt.Errorf("wrapped: %w", status.Error(codes.FailedPrecondition, "x")),
	} {
		assert.False(t, runtimev1.IsNotStarted(err), "%v", err)
	}
	plain := runtimev1.MarkNotStarted(errors.New("dial unix: no such file"))
	assert.True(t, runtimev1.IsNotStarted(plain))
	assert.Equal(t, codes.Unknown, status.Code(plain))
}
