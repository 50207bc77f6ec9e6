package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/python"
)

// sandboxCall invokes one sandbox operation and decodes its answer.
func sandboxCall(ctx context.Context, t *testing.T, h *harness, reg *runtimev1.RegistrationStatus, req map[string]any) map[string]any {
	t.Helper()
	input, err := json.Marshal(req)
	require.NoError(t, err)
	resp, err := h.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(),
		InvocationId: "op", Input: input, TimeoutMillis: 20000})
	require.NoError(t, err)
	require.Nil(t, resp.GetError(), "%v", resp.GetError())
	var out map[string]any
	require.NoError(t, json.Unmarshal(resp.GetOutput(), &out))
	return out
}

// followCommand follows command id's log and returns its stream.
func followCommand(ctx context.Context, t *testing.T, h *harness, reg *runtimev1.RegistrationStatus, id string) runtimev1.FunctionRuntime_FollowFunctionLogClient {
	t.Helper()
	stream, err := h.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), CommandId: id})
	require.NoError(t, err)
	return stream
}

// commandOutput receives from stream until until says stop or the stream
// ends, and returns stdout and stderr as received, and whether it ended.
func commandOutput(t *testing.T, stream runtimev1.FunctionRuntime_FollowFunctionLogClient, stdout, stderr *string, until func() bool) (ended bool) {
	t.Helper()
	for !until() {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return true
		}
		require.NoError(t, err)
		for _, c := range resp.GetChunks() {
			if c.GetStream() == runtimev1.LogStream_LOG_STREAM_STDERR {
				*stderr += string(c.GetData())
			} else {
				*stdout += string(c.GetData())
			}
		}
	}
	return false
}

// TestFollowCommandLog: a background command the sandbox starts streams
// its output to followers of its command_id while it runs, and the follow
// ends once the command exited and all it wrote was sent.
func TestFollowCommandLog(t *testing.T) {
	h := newHarness(t, "python")
	reg := h.registerReady(t, "sandbox", python.SandboxHandler)
	ctx := testContext(t)

	out := sandboxCall(ctx, t, h, reg, map[string]any{"op": "start_command",
		"cmd": "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second; echo oops >&2; exit 2"})
	id := out["id"].(string)
	// Followed at once: the command is known as soon as it was started.
	f := followCommand(ctx, t, h, reg, id)
	var stdout, stderr string
	ended := commandOutput(t, f, &stdout, &stderr, func() bool { return stdout == "first\n" })
	require.False(t, ended, "the follow ended before the command did")

	require.NoError(t, os.WriteFile(filepath.Join(h.workDir, "go"), nil, 0o644))
	assert.True(t, commandOutput(t, f, &stdout, &stderr, func() bool { return false }), "the follow ends when the command ends")
	assert.Equal(t, "first\nsecond\n", stdout)
	assert.Equal(t, "oops\n", stderr)

	stdout, stderr = "", ""
	assert.True(t, commandOutput(t, followCommand(ctx, t, h, reg, id), &stdout, &stderr, func() bool { return false }))
	assert.Equal(t, "first\nsecond\n", stdout, "an ended command's log is kept for later followers")

	_, err := followCommand(ctx, t, h, reg, "nope").Recv()
	requireCode(t, codes.NotFound, err)
	assert.Contains(t, status.Convert(err).Message(), `"nope"`)
	assert.Contains(t, status.Convert(err).Message(), "Run sandbox")

	t.Run("the log goes with the registration", func(t *testing.T) {
		out := sandboxCall(ctx, t, h, reg, map[string]any{"op": "start_command", "cmd": "echo running; sleep 60"})
		id := out["id"].(string)
		f := followCommand(ctx, t, h, reg, id)
		var stdout, stderr string
		require.False(t, commandOutput(t, f, &stdout, &stderr, func() bool { return stdout == "running\n" }))
		_, err := h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId()})
		require.NoError(t, err)
		assert.True(t, commandOutput(t, f, &stdout, &stderr, func() bool { return false }), "the command died with the registration, ending the follow")
		_, err = followCommand(ctx, t, h, reg, id).Recv()
		requireCode(t, codes.NotFound, err)
	})
}
