package functions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	"kruntimes.io/kruntimes/runtimed/invoke"
)

// counterPython counts its executions in the worker: a replay answers an
// earlier count, a run the next one.
const counterPython = `import time
count = 0
def handle(event, context):
    global count
    count += 1
    if event.get("mark"):
        open(event["mark"], "w").close()
    if event.get("fail"):
        raise ValueError("failed at %d" % count)
    time.sleep(event.get("sleep", 0))
    return count
`

// TestInvokeHopDeduplicatesCallerSentIDs: runtimed over mutual TLS in
// front of a real Python Runtime Server records the outcomes of
// caller-sent IDs.
func TestInvokeHopDeduplicatesCallerSentIDs(t *testing.T) {
	h := start(t, harnessOptions{})
	hop := startInvokeHopWith(t, h, invoke.DedupConfig{Window: 10 * time.Minute, MaxEntries: 1000, MaxBytes: 4 << 20})
	h.scheduled(t, "counter", counterPython, "handler.handle")
	run := h.waitFor(t, "counter", "Ready", phaseIs(lifecycle.Ready))
	client := hop.dial(t, hop.path("client.crt"), hop.path("client.key"))
	call := func(ctx context.Context, id string, callerSent bool, input string) (*runtimedv1.InvokeResponse, bool, error) {
		req := invokeRequest(run, input)
		req.ContentType = invocation.ContentTypeJSON
		req.InvocationId, req.CallerSentId = id, callerSent
		var md metadata.MD
		resp, err := client.Invoke(ctx, req, grpc.Header(&md))
		v := md.Get(invocation.MetadataDeduplicated)
		return resp, len(v) == 1 && v[0] == "true", err
	}
	same := func(t *testing.T, a, b *runtimedv1.InvokeResponse) {
		t.Helper()
		a, b = proto.Clone(a).(*runtimedv1.InvokeResponse), proto.Clone(b).(*runtimedv1.InvokeResponse)
		a.RuntimedNanos, b.RuntimedNanos = 0, 0
		assert.True(t, proto.Equal(a, b), "%v vs %v", a, b)
	}
	ctx := t.Context()

	first, replayed, err := call(ctx, "order-1", true, `{}`)
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.True(t, first.GetWorkerWarm())
	second, replayed, err := call(ctx, "order-1", true, `{}`)
	require.NoError(t, err)
	assert.True(t, replayed, "the same caller-sent ID is replayed")
	same(t, first, second)
	n := string(first.GetOutput())

	minted1, _, err := call(ctx, "minted", false, `{}`)
	require.NoError(t, err)
	minted2, replayed, err := call(ctx, "minted", false, `{}`)
	require.NoError(t, err)
	assert.False(t, replayed, "a minted ID is never deduplicated")
	assert.NotEqual(t, string(minted1.GetOutput()), string(minted2.GetOutput()), "both ran")
	assert.NotEqual(t, n, string(minted1.GetOutput()))

	failed, _, err := call(ctx, "order-2", true, `{"fail":true}`)
	require.NoError(t, err)
	require.Equal(t, "ValueError", failed.GetError().GetType())
	again, replayed, err := call(ctx, "order-2", true, `{"fail":true}`)
	require.NoError(t, err)
	assert.True(t, replayed, "a function error is replayed")
	same(t, failed, again)

	// A handler stopped at its deadline is recorded too: its retry gets
	// the same 504-to-be, not a second run.
	slow := func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req := invokeRequest(run, `{"sleep":3}`)
		req.ContentType, req.InvocationId, req.CallerSentId, req.TimeoutMillis = invocation.ContentTypeJSON, "order-3", true, 300
		_, err := client.Invoke(ctx, req)
		return err
	}
	err1, err2 := slow(), slow()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err1), "%v", err1)
	assert.Equal(t, status.Convert(err1).Message(), status.Convert(err2).Message(), "the timeout is replayed")

	// A repeat while the first runs waits for it rather than a 429.
	mark := filepath.Join(t.TempDir(), "started")
	input := fmt.Sprintf(`{"sleep":2,"mark":%q}`, mark)
	done := make(chan *runtimedv1.InvokeResponse, 1)
	go func() {
		resp, _, err := call(ctx, "order-4", true, input)
		assert.NoError(t, err)
		done <- resp
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(mark); return err == nil }, 10*time.Second, 10*time.Millisecond, "order-4 started")
	waiter, replayed, err := call(ctx, "order-4", true, input)
	require.NoError(t, err, "the repeat waited instead of a 429")
	assert.True(t, replayed)
	same(t, <-done, waiter)
}
