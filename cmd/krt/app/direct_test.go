package app

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestInvokeAgainstTheDirectURL: kubectl's connection flags point krt at
// kruntimes-apiserver's own address (the direct entry point) with a bearer
// token and the CA of its serving certificate, no kubeconfig needed.
func TestInvokeAgainstTheDirectURL(t *testing.T) {
	var gotPath, gotAuth string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAuth = r.URL.Path, r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"InvokeResult","apiVersion":"kruntimes.io/v1alpha1","invocationId":"i-1","output":{"ok":true}}`))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))

	var out, errOut bytes.Buffer
	code := Run([]string{"invoke", "echo", "-n", "team", "--data", `{}`,
		"--server", srv.URL, "--token", "sa-token", "--certificate-authority", caFile},
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	require.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
	assert.Equal(t, "/apis/kruntimes.io/v1alpha1/namespaces/team/runs/echo/invoke", gotPath)
	assert.Equal(t, "Bearer sa-token", gotAuth)
	assert.JSONEq(t, `{"ok":true}`, out.String())
}
