package app

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestLogsCopiesTheBodyExactly runs krt logs against a server that checks
// the request and answers bytes no terminal-friendly copy would keep.
func TestLogsCopiesTheBodyExactly(t *testing.T) {
	const text = "one\n\xff\x00\x1b[31m\nthree"
	var gotPath, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.Path, r.URL.RawQuery
		if strings.HasSuffix(r.URL.Path, "/runs/absent/log") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"runs \"absent\" not found"}`))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(text))
	}))
	t.Cleanup(srv.Close)

	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := Run([]string{"--server", srv.URL, "-n", "ns", "logs", "hello", "--tail", "3", "--limit-bytes", "100", "--attempt", "2", "--timestamps", "--stream", "Stderr", "-f"}, streams)
	assert.Equal(t, ExitOK, code, errOut.String())
	assert.Equal(t, text, out.String())
	assert.Equal(t, "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/hello/log", gotPath)
	assert.Equal(t, "attempt=2&follow=true&limitBytes=100&stream=Stderr&tailLines=3&timestamps=true", gotQuery)

	out.Reset()
	code = Run([]string{"--server", srv.URL, "-n", "ns", "logs", "hello"}, streams)
	assert.Equal(t, ExitOK, code)
	assert.Empty(t, gotQuery, "no options, no query")

	errOut.Reset()
	code = Run([]string{"--server", srv.URL, "-n", "ns", "logs", "absent"}, streams)
	assert.Equal(t, ExitError, code)
	assert.Contains(t, errOut.String(), "not found")

	assert.Equal(t, ExitUsage, Run([]string{"--server", srv.URL, "logs"}, streams), "NAME is required")
}
