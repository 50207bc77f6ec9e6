package app

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// retryServer answers the invoke requests of a Run in turn with replies,
// the last one again once they run out, and records each request's
// invocation ID.
type retryServer struct {
	mu      sync.Mutex
	replies []func(http.ResponseWriter)
	ids     []string
}

func (s *retryServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.ids = append(s.ids, r.Header.Get("X-Kruntime-Invocation-ID"))
	reply := s.replies[min(len(s.ids), len(s.replies))-1]
	s.mu.Unlock()
	reply(w)
}

func proxy503(w http.ResponseWriter) {
	// kube-apiserver's aggregation proxy: plain text, no Retry-After.
	http.Error(w, "error trying to reach service: http2: Transport: cannot retry err [http2: Transport received Server's graceful shutdown GOAWAY]", http.StatusServiceUnavailable)
}

func busy(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":429,"reason":"TooManyRequests","message":"busy","details":{"retryAfterSeconds":1}}`))
}

func replayed502(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Kruntime-Deduplicated", "true")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":502,"reason":"InternalError","message":"the runtimed connection broke"}`))
}

func done(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"kind":"InvokeResult","apiVersion":"kruntimes.io/v1alpha1","invocationId":"x","output":{"ok":true}}`))
}

func invokeWith(t *testing.T, s *retryServer, args ...string) (int, string, string) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	var out, errOut bytes.Buffer
	code := Run(append([]string{"invoke", "echo", "-n", "team", "--server", srv.URL}, args...),
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return code, out.String(), errOut.String()
}

func TestInvokeRetrySendsAgainWithTheSameID(t *testing.T) {
	s := &retryServer{replies: []func(http.ResponseWriter){proxy503, busy, proxy503, done}}
	code, out, errOut := invokeWith(t, s, "--retry", "20s")
	require.Equal(t, ExitOK, code, "stderr: %s", errOut)
	assert.JSONEq(t, `{"ok":true}`, out)
	require.Len(t, s.ids, 4, "sent again after each unknown outcome and the 429")
	assert.NotEmpty(t, s.ids[0], "krt sends an ID of its own, so that runtimed deduplicates the repeats")
	for _, id := range s.ids {
		assert.Equal(t, s.ids[0], id, "every attempt carries the same ID")
	}
	assert.Equal(t, 3, strings.Count(errOut, "sending invocation "+s.ids[0]+" again"), "each repeat is said: %s", errOut)
}

func TestInvokeRetryKeepsTheCallersID(t *testing.T) {
	s := &retryServer{replies: []func(http.ResponseWriter){proxy503, done}}
	code, _, errOut := invokeWith(t, s, "--retry", "20s", "--invocation-id", "order-7")
	require.Equal(t, ExitOK, code, "stderr: %s", errOut)
	assert.Equal(t, []string{"order-7", "order-7"}, s.ids)
}

func TestInvokeRetryStopsAtAReplay(t *testing.T) {
	s := &retryServer{replies: []func(http.ResponseWriter){proxy503, replayed502, done}}
	code, _, errOut := invokeWith(t, s, "--retry", "20s")
	assert.Equal(t, ExitUnknown, code, "the replayed 502 is the first attempt's recorded outcome: final; stderr: %s", errOut)
	assert.Len(t, s.ids, 2)
}

func TestInvokeRetryEndsAtItsDeadline(t *testing.T) {
	s := &retryServer{replies: []func(http.ResponseWriter){proxy503}}
	code, _, errOut := invokeWith(t, s, "--retry", "1s")
	assert.Equal(t, ExitUnknown, code, "stderr: %s", errOut)
	assert.GreaterOrEqual(t, len(s.ids), 2)
	assert.LessOrEqual(t, len(s.ids), 5, "0.1 s, then twice as long each time, within 1 s")
}

func TestInvokeWithoutRetrySendsOnce(t *testing.T) {
	s := &retryServer{replies: []func(http.ResponseWriter){proxy503, done}}
	code, _, errOut := invokeWith(t, s)
	assert.Equal(t, ExitUnknown, code, "stderr: %s", errOut)
	assert.Equal(t, []string{""}, s.ids, "sent once, with no ID of krt's: the server mints one")

	s = &retryServer{replies: []func(http.ResponseWriter){proxy503}}
	code, _, errOut = invokeWith(t, s, "--retry", "-1s")
	assert.Equal(t, ExitUsage, code, "stderr: %s", errOut)
	assert.Empty(t, s.ids)
}
