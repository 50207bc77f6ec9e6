package app

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestInvokeVerbosePrintsTimingAndReplay: -v prints the invocation ID, the
// answer's Server-Timing and the replay mark, on a result and on an error.
func TestInvokeVerbosePrintsTimingAndReplay(t *testing.T) {
	var gotID string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotID = r.Header.Get("X-Kruntime-Invocation-ID")
		w.Header().Set("X-Kruntime-Invocation-ID", gotID)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/apis/kruntimes.io/v1alpha1/namespaces/team/runs/broken/invoke" {
			w.Header().Set("Server-Timing", "apiserver;dur=0.300")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":502,"reason":"InternalError","message":"outcome unknown"}`))
			return
		}
		w.Header().Set("Server-Timing", "apiserver;dur=0.300, runtimed;dur=0.100, dedup;desc=replayed")
		w.Header().Set("X-Kruntime-Deduplicated", "true")
		_, _ = w.Write([]byte(`{"kind":"InvokeResult","apiVersion":"kruntimes.io/v1alpha1","invocationId":"` + gotID + `","output":{"ok":true}}`))
	}))
	defer srv.Close()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))

	var out, errOut bytes.Buffer
	code := Run([]string{"invoke", "echo", "-n", "team", "-v", "--invocation-id", "order-42", "--server", srv.URL},
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	require.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
	assert.Equal(t, "order-42", gotID)
	assert.JSONEq(t, `{"ok":true}`, out.String(), "stdout holds the output alone")
	assert.Contains(t, errOut.String(), "Invocation ID: order-42\n")
	assert.Contains(t, errOut.String(), "Server-Timing: apiserver;dur=0.300, runtimed;dur=0.100, dedup;desc=replayed\n")
	assert.Contains(t, errOut.String(), "X-Kruntime-Deduplicated: true")
	assert.Contains(t, errOut.String(), "Total (krt): ")

	out.Reset()
	errOut.Reset()
	code = Run([]string{"invoke", "broken", "-n", "team", "--verbose", "--invocation-id", "order-43", "--server", srv.URL},
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	assert.Equal(t, ExitUnknown, code, "stderr: %s", errOut.String())
	assert.Contains(t, errOut.String(), "Invocation ID: order-43\n")
	assert.Contains(t, errOut.String(), "Server-Timing: apiserver;dur=0.300\n")
	assert.NotContains(t, errOut.String(), "Deduplicated")

	errOut.Reset()
	code = Run([]string{"invoke", "echo", "-n", "team", "--server", srv.URL},
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	require.Equal(t, ExitOK, code)
	assert.Empty(t, errOut.String(), "without -v nothing is printed to stderr")
}
