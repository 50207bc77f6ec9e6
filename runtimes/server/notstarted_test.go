package server_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// TestRefusalsCarryNotStarted: every refusal before a handler starts
// carries NotStarted; what comes after the handler started never does.
func TestRefusalsCarryNotStarted(t *testing.T) {
	h := newHarness(t, "bash")
	writeBashHandlers(t, h)
	reg := h.registerReady(t, "refusals", "sleep.sh")
	request := func(mutate func(*runtimev1.InvokeFunctionRequest)) *runtimev1.InvokeFunctionRequest {
		req := &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), InvocationId: "inv-1", Input: []byte(`{"seconds":0}`)}
		if mutate != nil {
			mutate(req)
		}
		return req
	}
	refusals := []struct {
		name string
		req  *runtimev1.InvokeFunctionRequest
		code codes.Code
	}{
		{"no invocation ID", request(func(r *runtimev1.InvokeFunctionRequest) { r.InvocationId = "" }), codes.InvalidArgument},
		{"an invocation ID with a control character", request(func(r *runtimev1.InvokeFunctionRequest) { r.InvocationId = "a\x01b" }), codes.InvalidArgument},
		{"an invocation ID over 128 bytes", request(func(r *runtimev1.InvokeFunctionRequest) { r.InvocationId = strings.Repeat("i", 129) }), codes.InvalidArgument},
		{"input that is not JSON", request(func(r *runtimev1.InvokeFunctionRequest) { r.Input = []byte(`{nope`) }), codes.InvalidArgument},
		{"a negative timeout", request(func(r *runtimev1.InvokeFunctionRequest) { r.TimeoutMillis = -1 }), codes.InvalidArgument},
		{"an unknown Run", request(func(r *runtimev1.InvokeFunctionRequest) { r.RunUid = "unknown" }), codes.NotFound},
		{"a stale registration ID", request(func(r *runtimev1.InvokeFunctionRequest) { r.RegistrationId = "stale" }), codes.FailedPrecondition},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.functions.InvokeFunction(testContext(t), tc.req)
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.True(t, runtimev1.IsNotStarted(err), "%v carries NotStarted", err)
		})
	}

	t.Run("a second invocation while one is in flight", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := h.functions.InvokeFunction(testContext(t), request(func(r *runtimev1.InvokeFunctionRequest) { r.Input = []byte(`{"seconds":30}`) }))
			done <- err
		}()
		h.waitForStatus(t, reg, func(st *runtimev1.RegistrationStatus) bool { return st.GetInFlight() == 1 })
		_, err := h.functions.InvokeFunction(testContext(t), request(nil))
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		assert.True(t, runtimev1.IsNotStarted(err))

		// Unregistering with the handler running: Aborted, and no
		// NotStarted, for the handler did start.
		_, err = h.functions.UnregisterFunction(testContext(t), &runtimev1.UnregisterFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), CancelInFlight: true})
		require.NoError(t, err)
		err = <-done
		require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
		assert.False(t, runtimev1.IsNotStarted(err), "an invocation that started never carries NotStarted")
	})

	t.Run("an invocation stopped at its deadline", func(t *testing.T) {
		reg := h.registerReady(t, "deadline", "sleep.sh")
		ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
		defer cancel()
		_, err := h.invoke(ctx, reg, `{"seconds":30}`, 200*time.Millisecond)
		require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
		assert.False(t, runtimev1.IsNotStarted(err))
	})
}

// TestFunctionErrorIsUTF8: a handler's stderr that is not UTF-8 becomes
// the function error's stack with U+FFFD for each invalid run, and the
// invocation answers (a protobuf string that is not UTF-8 would fail the
// whole answer).
func TestFunctionErrorIsUTF8(t *testing.T) {
	h := newHarness(t, "bash")
	h.writeFile(t, "binary.sh", "printf 'bad \\377\\376 bytes\\n' >&2\nexit 1\n")
	reg := h.registerReady(t, "binary", "binary.sh")
	resp, err := h.invoke(testContext(t), reg, `{}`, 0)
	require.NoError(t, err)
	require.NotNil(t, resp.GetError())
	assert.Equal(t, "NonZeroExit", resp.GetError().GetType())
	assert.Equal(t, "bad \uFFFD bytes\n", resp.GetError().GetStack())
	assert.True(t, utf8.ValidString(resp.GetError().GetMessage()))
	assert.Equal(t, []byte("bad \xff\xfe bytes\n"), resp.GetStderr(), "the stderr bytes themselves travel unchanged")
}
