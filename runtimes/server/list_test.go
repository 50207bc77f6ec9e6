package server_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// TestListFunctionsShowsEveryRegistration: one call returns the current
// generation of every registration, failed ones included, and forgets
// what was unregistered.
func TestListFunctionsShowsEveryRegistration(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	ctx := testContext(t)
	ready := h.registerReady(t, "ready", "handlers.noop")
	failed := h.register(t, "failed", 1, "d1", "handlers.missing")
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_FAILED, failed.GetState())
	superseded := h.register(t, "superseded", 1, "d1", "handlers.noop")
	current := h.register(t, "superseded", 2, "d2", "handlers.noop")
	require.NotEqual(t, superseded.GetRegistrationId(), current.GetRegistrationId())

	list, err := h.functions.ListFunctions(ctx, &runtimev1.ListFunctionsRequest{})
	require.NoError(t, err)
	byUID := map[string]*runtimev1.RegistrationStatus{}
	for _, st := range list.GetRegistrations() {
		byUID[st.GetRunUid()] = st
	}
	require.Len(t, byUID, 3)
	assert.Equal(t, ready.GetRegistrationId(), byUID["ready"].GetRegistrationId())
	assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, byUID["ready"].GetState())
	assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_FAILED, byUID["failed"].GetState())
	assert.NotEmpty(t, byUID["failed"].GetFatalError())
	assert.Equal(t, current.GetRegistrationId(), byUID["superseded"].GetRegistrationId(), "only the current generation")
	assert.Equal(t, int64(2), byUID["superseded"].GetRegistrationAttempt())

	_, err = h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: "ready", RegistrationId: ready.GetRegistrationId()})
	require.NoError(t, err)
	list, err = h.functions.ListFunctions(ctx, &runtimev1.ListFunctionsRequest{})
	require.NoError(t, err)
	for _, st := range list.GetRegistrations() {
		assert.NotEqual(t, "ready", st.GetRunUid(), "an unregistered Run is not listed")
	}
}

// TestUnregisterByAttempt: an owner that lost the registration ID fences an
// attempt by number; a newer generation is left alone.
func TestUnregisterByAttempt(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	ctx := testContext(t)
	h.register(t, "r", 2, "d2", "handlers.noop")

	_, err := h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: "r", RegistrationAttempt: 1})
	requireCode(t, codes.FailedPrecondition, err)
	_, err = h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: "r"})
	requireCode(t, codes.InvalidArgument, err)

	_, err = h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: "r", RegistrationAttempt: 2})
	require.NoError(t, err)
	list, err := h.functions.ListFunctions(ctx, &runtimev1.ListFunctionsRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.GetRegistrations())
	_, err = h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: "r", RegistrationAttempt: 2})
	require.NoError(t, err, "unregistering an absent registration succeeds")

	_, err = h.functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{
		RunUid: "r", RegistrationAttempt: 2, RegistrationDigest: "d2", WorkingDir: h.workDir, Handler: "handlers.noop"})
	requireCode(t, codes.FailedPrecondition, err) // an unregistered attempt never serves again
}
