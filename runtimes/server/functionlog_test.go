package server_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// functionFollow reads a FollowFunctionLog stream response by response.
type functionFollow struct {
	t      testing.TB
	stream interface {
		Recv() (*runtimev1.FollowLogResponse, error)
	}
}

func followFunction(ctx context.Context, t testing.TB, h *harness, reg *runtimev1.RegistrationStatus, offset int64) *functionFollow {
	t.Helper()
	stream, err := h.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Offset: offset})
	require.NoError(t, err)
	return &functionFollow{t: t, stream: stream}
}

// chunks receives until n chunks arrived, and renders each as
// "invocation stream data".
func (f *functionFollow) chunks(n int) []string {
	f.t.Helper()
	var got []string
	for len(got) < n {
		resp, err := f.stream.Recv()
		require.NoError(f.t, err, "after %q", got)
		for _, c := range resp.GetChunks() {
			got = append(got, c.GetInvocationId()+" "+c.GetStream().String()+" "+string(c.GetData()))
		}
	}
	return got
}

// TestFollowFunctionLog: what each invocation of a registration writes
// reaches its followers as the invocation ends, marked with its invocation
// ID, through a real Python Runtime Server over gRPC on a unix socket.
func TestFollowFunctionLog(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	reg := h.registerReady(t, "fn-log", "handlers.echo")
	ctx := testContext(t)

	early := followFunction(ctx, t, h, reg, 0)
	resp, err := early.stream.Recv()
	require.NoError(t, err)
	assert.Empty(t, resp.GetChunks(), "the first response comes at once, empty while nothing was written")
	assert.Zero(t, resp.GetWritten())

	for _, id := range []string{"inv-1", "inv-2"} {
		_, err := h.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), InvocationId: id, Input: []byte(`{}`)})
		require.NoError(t, err)
	}
	want := []string{
		"inv-1 LOG_STREAM_STDOUT to stdout\n", "inv-1 LOG_STREAM_STDERR to stderr\n",
		"inv-2 LOG_STREAM_STDOUT to stdout\n", "inv-2 LOG_STREAM_STDERR to stderr\n",
	}
	assert.Equal(t, want, early.chunks(4), "a follower connected before the invocations")
	assert.Equal(t, want, followFunction(ctx, t, h, reg, 0).chunks(4), "a follower connected after them gets what is kept")
	assert.Equal(t, want[2:], followFunction(ctx, t, h, reg, 20).chunks(2), "a follow resumes from an offset")

	t.Run("refusals", func(t *testing.T) {
		_, err := h.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: reg.GetRunUid(), RegistrationId: "stale"})
		requireCode(t, codes.OK, err)
		stream, _ := h.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: reg.GetRunUid(), RegistrationId: "stale"})
		_, err = stream.Recv()
		requireCode(t, codes.FailedPrecondition, err)
		stream, _ = h.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: "unknown", RegistrationId: "x"})
		_, err = stream.Recv()
		requireCode(t, codes.NotFound, err)
		stream, _ = h.functions.FollowFunctionLog(ctx, &runtimev1.FollowFunctionLogRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Offset: 1 << 30})
		_, err = stream.Recv()
		requireCode(t, codes.OutOfRange, err)
	})

	t.Run("a chatty function keeps a bounded tail; a follower that fell behind skips ahead", func(t *testing.T) {
		chatty := h.registerReady(t, "fn-chatty", "handlers.chatty")
		idle := followFunction(ctx, t, h, chatty, 0)
		_, err := idle.stream.Recv() // the announcement; then it reads nothing
		require.NoError(t, err)
		const n = 8
		for i := range n {
			_, err := h.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: chatty.GetRunUid(), RegistrationId: chatty.GetRegistrationId(), InvocationId: "chat-" + string(rune('a'+i)), Input: []byte(`{}`)})
			require.NoError(t, err, "a follower that does not read never stalls an invocation")
		}
		// A follower that asks for bytes no longer kept skips ahead, told
		// how many it skipped.
		late := followFunction(ctx, t, h, chatty, 1)
		var skipped, kept, next, written int64
		var last string
		for next < n*64<<10 {
			resp, err := late.stream.Recv()
			require.NoError(t, err)
			skipped += resp.GetSkippedBytes()
			next, written = resp.GetOffset(), resp.GetWritten()
			for _, c := range resp.GetChunks() {
				kept += int64(len(c.GetData()))
				next += int64(len(c.GetData()))
				last = c.GetInvocationId()
			}
		}
		assert.Equal(t, int64(n*64<<10), written, "each invocation wrote its 64 KiB bound")
		assert.Equal(t, written-1, kept+skipped)
		assert.Positive(t, skipped)
		assert.LessOrEqual(t, kept, int64(256<<10), "what is kept is bounded")
		assert.Equal(t, "chat-h", last)
	})

	t.Run("unregistering ends the follow after its last bytes", func(t *testing.T) {
		f := followFunction(ctx, t, h, reg, 0)
		assert.Equal(t, want, f.chunks(4))
		_, err := h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId()})
		require.NoError(t, err)
		for {
			resp, err := f.stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			assert.Empty(t, resp.GetChunks(), "nothing more was written: %v", resp)
		}
	})
}
